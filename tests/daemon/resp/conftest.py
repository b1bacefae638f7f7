"""Fixtures of the RESP front-door tests (tests/conftest.py provides tmp_root,
daemon, make_daemon and redis_server)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pt2harness import PT2CACHED  # noqa: E402

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="session")
def hiredis_client(tmp_path_factory) -> str:
    """The hiredis test client: meson's build (PT2CACHE_HIREDIS_CLIENT, or next to
    the daemon's build tree), else compiled here from hiredis_client.c."""
    candidates = [os.environ.get("PT2CACHE_HIREDIS_CLIENT", ""),
                  str(Path(PT2CACHED).resolve().parents[1] / "tests/daemon/resp/resp_hiredis_client")]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "no resp_hiredis_client built and no C compiler to build one"
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "hiredis"], capture_output=True,
                           text=True, check=True).stdout.split()
    out = tmp_path_factory.mktemp("hiredis") / "resp_hiredis_client"
    subprocess.run([cc, "-O1", "-Wall", "-Werror", "-o", str(out), str(HERE / "hiredis_client.c"),
                    *flags], check=True)
    return str(out)
