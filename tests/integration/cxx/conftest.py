import sys
from pathlib import Path

# cxx_helpers here, integ_helpers one level up.
sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(1, str(Path(__file__).parent.parent))
