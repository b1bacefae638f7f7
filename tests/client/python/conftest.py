"""Fixtures of the Python client tests (client/python, package pt2cache).

The package is imported from the source tree: $PT2CACHE_SOURCE/client/python/src
(meson's pytest_env sets PT2CACHE_SOURCE) is put on sys.path here and on
PYTHONPATH for the processes the tests start (multiprocessing spawn workers
inherit sys.path; subprocesses get PYTHONPATH).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from pyclient_helpers import PACKAGE_SRC, bundle_ops_available, remote_tier_available  # noqa: E402

sys.path.insert(0, str(PACKAGE_SRC))
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(PACKAGE_SRC), str(Path(__file__).parent), os.environ.get("PYTHONPATH"))
    if p)

import pt2cache  # noqa: E402


@pytest.fixture
def client(daemon):
    """A strict client of the `daemon` fixture (errors raise)."""
    c = pt2cache.Client(daemon.socket, strict=True, retry_after=0.1)
    yield c
    c.close()


@pytest.fixture
def lenient(daemon):
    """A default (non-strict) client of the `daemon` fixture."""
    c = pt2cache.Client(daemon.socket, retry_after=0.1)
    yield c
    c.close()


@pytest.fixture
def needs_bundles(daemon):
    """Skips while pt2cached answers BUNDLE_BEGIN with UNKNOWN_OP (the feature
    has not landed). A daemon that serves the op but does not announce the
    BUNDLE capability is NOT skipped: the tests then fail, as they should."""
    if not bundle_ops_available(daemon.socket):
        pytest.skip("pt2cached answers BUNDLE_BEGIN with UNKNOWN_OP: daemon bundles "
                    "(daemon/bundles.cpp) have not landed in this build")


@pytest.fixture
def remote_env(redis_server):
    """The daemon environment for the bundled and per-kernel autotune remote
    caches on the `redis_server` fixture."""
    return {
        "TORCHINDUCTOR_REDIS_URL": f"unix://{redis_server.socket}",
        "TORCHINDUCTOR_BUNDLED_AUTOTUNE_REMOTE_CACHE": "1",
        "TORCHINDUCTOR_AUTOTUNE_REMOTE_CACHE": "1",
    }


@pytest.fixture
def needs_remote(make_daemon, remote_env):
    """Skips while pt2cached has no remote (Redis) tier: STATS reports
    tiers.remote = null although the remote caches are switched on."""
    if not remote_tier_available(make_daemon, remote_env):
        pytest.skip("pt2cached reports no remote tier with TORCHINDUCTOR_REDIS_URL set: the "
                    "Redis tier has not landed in this build")
