"""Fixtures of the remote-tier tests (tests/conftest.py provides tmp_root,
make_daemon and redis_server: a real redis-server on a Unix socket)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pt2harness import RedisServer  # noqa: E402
from remote_helpers import free_port, redis_args, redis_env  # noqa: E402,F401


@pytest.fixture
def redis_tcp(tmp_root):
    """A redis-server listening on a loopback port (and a Unix socket)."""
    root = tmp_root / "tcp"
    root.mkdir(mode=0o700)
    r = RedisServer(root, port=free_port()).start()
    yield r
    r.stop()


@pytest.fixture
def remote_daemon(make_daemon, redis_server):
    """A daemon whose FX graph entries go to `redis_server` (short timeouts)."""
    def make(*switches, extra=(), env=None, sub="", start=True, **settings):
        full_env = redis_env(redis_server, *switches)
        full_env.update(env or {})
        return make_daemon(*redis_args(**settings), *extra, env=full_env, sub=sub, start=start)
    return make
