"""``python -m pt2cache stats [--json]`` and ``ping [--wait DURATION]``: see
:mod:`pt2cache._cli`."""

import sys

from ._cli import main

if __name__ == "__main__":
    sys.exit(main())
