"""The remote tier against a hostile Redis (tests/support/hostile_redis.py):
each scripted GET answer must leave the daemon alive, answer the client (a
miss) within the operation timeout plus a small margin, leave another client
unaffected, and move the right counter."""

from __future__ import annotations

import pytest

from hostile_cases import CASES, HostileRedis, Result, run_case, table
from remote_helpers import MISS, OK, redis_args

OP_MS = 300
CONNECT_MS = 200
# Scheduling slack on a loaded 2-core machine.
MARGIN_S = 0.25
# The bystander's local puts and gets.
BYSTANDER_MAX_S = 0.25

RESULTS: list[Result] = []


@pytest.fixture(scope="module", autouse=True)
def print_table(request):
    """After the module: the table of the cases run (quotable figures)."""
    yield
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if RESULTS and capture is not None:
        with capture.global_and_fixture_disabled():
            print("\n" + table(RESULTS, OP_MS))


@pytest.fixture
def hostile(tmp_root):
    server = HostileRedis(unix=tmp_root / "hostile.sock").start()
    yield server
    server.stop()


@pytest.fixture
def hostile_daemon(make_daemon, hostile):
    env = {"TORCHINDUCTOR_REDIS_URL": hostile.url(), "TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE": "1"}
    return make_daemon(*redis_args(op_ms=OP_MS, connect_ms=CONNECT_MS), env=env)


@pytest.mark.parametrize("behaviour", list(CASES))
def test_hostile_get(hostile_daemon, hostile, behaviour):
    r = run_case(hostile_daemon, hostile, behaviour)
    RESULTS.append(r)
    assert r.alive, hostile_daemon.log()[-3000:]
    assert r.reached, "the GET never reached the hostile server"
    assert r.status == (OK if behaviour == "normal" else MISS), r
    assert r.latency_s < OP_MS / 1000 + MARGIN_S, r
    assert r.deltas[r.expected_counter] >= 1, r
    if r.expected_counter != "protocol_errors":
        assert r.deltas["protocol_errors"] == 0, r
    assert not r.bystander_failures, r.bystander_failures
    assert r.bystander_ops > 0
    assert r.bystander_max_s < BYSTANDER_MAX_S, r
    # Nothing was allocated from an announced length.
    assert r.rss_growth_kib < 64 << 10, r


def test_lying_length_is_logged_and_the_tier_recovers(hostile_daemon, hostile):
    r = run_case(hostile_daemon, hostile, "lying_length")
    assert r.deltas["protocol_errors"] == 1
    assert "bulk length 99999999999 over the limit of 536870912 bytes" in hostile_daemon.log()
    # The connection was dropped, a probe reconnects, and the next GET is served.
    after = run_case(hostile_daemon, hostile, "normal")
    assert after.status == OK, after
    stats = hostile_daemon.stats()
    assert stats["remote"]["protocol_errors"] == 1
    text = hostile_daemon.cli("stats", check=True).stdout.decode()
    assert "protocol_errors" in text


def test_max_value_size_bounds_accepted_replies(make_daemon, hostile):
    env = {"TORCHINDUCTOR_REDIS_URL": hostile.url(), "TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE": "1"}
    d = make_daemon(*redis_args(op_ms=OP_MS, connect_ms=CONNECT_MS, max_value_size=10), env=env)
    # "remote value" is 12 bytes: over remote.max_value_size = 10.
    r = run_case(d, hostile, "normal")
    assert r.status == MISS, r
    assert r.deltas["protocol_errors"] == 1, r
    assert "bulk length 12 over the limit of 10 bytes" in d.log()
