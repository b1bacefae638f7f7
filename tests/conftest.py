"""pytest fixtures shared by every Python test: real daemons and Redis servers."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "pyharness"))

from pt2harness import Daemon, RedisServer, TempDir  # noqa: E402


@pytest.fixture
def tmp_root():
    root = TempDir()
    yield root.path
    root.cleanup()


@pytest.fixture
def daemon(tmp_root):
    """A fresh pt2cached on a private socket and cache directory."""
    d = Daemon(tmp_root).start()
    yield d
    d.kill()


@pytest.fixture
def make_daemon(tmp_root):
    """Factory for daemons with extra arguments; all are killed at the end."""
    made = []

    def make(*args, start=True, env=None, sub="", cache_dir=None):
        root = tmp_root / sub if sub else tmp_root
        root.mkdir(mode=0o700, exist_ok=True)
        d = Daemon(root, *args, env=env, cache_dir=cache_dir)
        made.append(d)
        return d.start() if start else d

    yield make
    for d in made:
        d.kill()


@pytest.fixture
def make_daemon_two_loops(make_daemon):
    """`make_daemon` with two I/O loops (the default is one), so that
    connections, and the write queue's pushes, run on two threads."""
    def make(*args, **kwargs):
        return make_daemon("--set", "daemon.io_threads=2", *args, **kwargs)
    return make


@pytest.fixture
def redis_server(tmp_root):
    r = RedisServer(tmp_root).start()
    yield r
    r.stop()
