"""Concurrent gets of one key that only Redis holds send Redis one GET."""

from __future__ import annotations

import os
import threading
import time

import pytest
import redis as redis_py
from pt2harness import OP, frame, key_body, wait_for
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


def test_a_large_value_from_redis_is_charged_to_the_read_budget(remote_daemon, redis_server):
    """A 2 MiB value only Redis holds, read by a client that leaves the reply
    unread: only values read from disk were charged to daemon.max_reply_bytes
    (a review), so large values read from Redis were held outside it. Such a
    value is charged now, once read (its size is known only then), until its
    reply is written; gets sharing the read share the charge."""
    d = remote_daemon(extra=["--set", "memory.max_size=1MiB",
                             "--set", "daemon.max_reply_bytes=1MiB"])
    wait_remote_state(d, "connected")
    redis_key, inner = fx_key("charged")
    value = inductor_value(1_600_000)  # base64 in JSON: about 2.1 MB
    redis_client(redis_server).set(redis_key, value)
    reader = Native(d.socket)
    reader.conn.send(frame(OP["get"], key_body("fx-graph", inner.encode()), rid=7))
    # The reply, left unread, holds the value's charge until it is sent.
    wait_for(lambda: d.stats()["daemon"]["read_bytes"] == len(value), timeout=5,
             what="the value from Redis to be charged")
    assert reader.reply() == (OP["get"], OK, 7, value)
    wait_for(lambda: d.stats()["daemon"]["read_bytes"] == 0, timeout=5,
             what="the charge to be given back")
    # The backfilled copy on disk is read (and charged) as before.
    assert Native(d.socket).get("fx-graph", inner) == (OK, value)
    assert d.stats()["namespaces"]["fx-graph"]["disk"]["hits"] == 1


def test_a_get_after_an_answered_del_never_joins_an_older_remote_get(remote_daemon,
                                                                     redis_server):
    """A GET reading a 64 MiB value only Redis holds, then, on another
    connection, a DEL of the key (answered) and a GET: the second GET joined
    the first one's Redis read, begun before the DEL, and served the deleted
    value (a review: 10 of 10). A DEL now cuts later gets off a read in
    progress."""
    d = remote_daemon(op_ms=10000, connect_ms=3000)
    wait_remote_state(d, "connected")
    direct = redis_client(redis_server)
    wrong = []
    for trial in range(3):
        redis_key, _ = fx_key(f"joined-after-del-{trial}")
        direct.set(redis_key, os.urandom(64 << 20))
        first = {}

        def read():
            first["value"] = redis_py.Redis(unix_socket_path=str(d.socket),
                                            socket_timeout=60).get(redis_key)

        reader = threading.Thread(target=read)
        reader.start()
        time.sleep(0.01)  # the first GET is reading Redis's copy
        client = redis_py.Redis(unix_socket_path=str(d.socket), socket_timeout=60)
        deleted = client.delete(redis_key)
        after = client.get(redis_key)
        reader.join(60)
        if deleted == 1 and after is not None:
            wrong.append((trial, len(after)))
    assert not wrong
