"""Concurrent gets of one key that only Redis holds send Redis one GET."""

from __future__ import annotations

import threading

import pytest
from remote_helpers import OK, Native, command_calls, fx_key, inductor_value, redis_client, \
    remote_stats, wait_remote_state


@pytest.mark.parametrize("size,memory", [(1_000, "256MiB"), (4_000_000, "256MiB"), (1_000, "0")])
def test_concurrent_gets_of_a_remote_only_key_send_one_get(remote_daemon, redis_server, size,
                                                            memory):
    """With the memory tier off (0), a get that finds the flight over finds
    the backfill on disk."""
    d = remote_daemon(extra=["--set", "daemon.blocking_threads=16",
                             "--set", f"memory.max_size={memory}"])
    wait_remote_state(d, "connected")
    direct = redis_client(redis_server)
    redis_key, inner = fx_key(f"single-flight-{size}-{memory}")
    value = inductor_value(size)
    direct.set(redis_key, value)
    clients = [Native(d.socket) for _ in range(16)]
    gets_before = command_calls(direct, "get")
    barrier = threading.Barrier(len(clients))
    results = [None] * len(clients)

    def get(i):
        barrier.wait()
        results[i] = clients[i].get("fx-graph", inner)

    threads = [threading.Thread(target=get, args=(i,)) for i in range(len(clients))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(result == (OK, value) for result in results)
    assert command_calls(direct, "get") - gets_before == 1
    stats = remote_stats(d)
    assert stats["hits"] == 1
    assert stats["backfills"] == 1
    # The others waited for the one GET (coalesced) or came after the backfill
    # (a local hit).
    fx = d.stats()["namespaces"]["fx-graph"]
    assert stats["coalesced"] + 1 + fx["memory"]["hits"] + fx["disk"]["hits"] == len(clients)
