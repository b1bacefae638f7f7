"""The remote tier against a real redis-server: read-through with local
backfill, interop with plain PyTorch's redis-py traffic (Inductor's exact keys
and JSON values), TTLs, read-only mode, per-namespace switches, AUTH (password
and ACL user), SELECT, and loopback TCP."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest
import redis as redis_py
from pt2harness import RedisServer, wait_for
from remote_helpers import (MISS, OK, Native, command_calls, fx_key, inductor_key,
                            inductor_value, redis_args, redis_client, redis_env, remote_stats,
                            wait_remote_state)


def test_remote_hit_is_backfilled_and_then_served_locally(remote_daemon, redis_server):
    r = redis_client(redis_server)
    redis_key, inner = fx_key("backfill")
    value = inductor_value(20_000)
    r.set(redis_key, value)  # another machine's plain PyTorch wrote it
    d = remote_daemon()
    wait_remote_state(d, "connected")
    gets_before = command_calls(r, "get")

    client = Native(d.socket)
    assert client.get("fx-graph", inner) == (OK, value)
    assert command_calls(r, "get") == gets_before + 1
    # The second get never reaches Redis: memory (then disk) serve it.
    assert client.get("fx-graph", inner) == (OK, value)
    assert command_calls(r, "get") == gets_before + 1
    stats = d.stats()
    assert stats["remote"]["hits"] == 1
    assert stats["remote"]["backfills"] == 1
    fx = stats["namespaces"]["fx-graph"]
    assert fx["remote"]["hits"] == 1 and fx["memory"]["hits"] == 1
    # Backfilled to disk too: a restarted daemon serves it with Redis emptied.
    client.close()
    r.flushall()
    d.restart()
    assert Native(d.socket).get("fx-graph", inner) == (OK, value)
    assert command_calls(r, "get") == gets_before + 1  # a disk hit: Redis not asked
    assert d.stats()["namespaces"]["fx-graph"]["disk"]["hits"] == 1


def test_a_remote_miss_is_a_miss(remote_daemon, redis_server):
    # Generous timeouts: the first GET also connects. With the usual 200/300
    # ms this once counted no miss in a CI run (not reproduced in 20 runs
    # since, loaded or not); a stall past a timeout answers MISS too but
    # counts a timeout. The counters now show in the failure message.
    # It failed once more on 2026-11-30, in a full tools/test run beside the
    # other suites (the counters cut short by pytest): the message is the
    # whole dict now. A first GET that timed out or failed on a loaded
    # machine is answered MISS as well and counted as such; the second must
    # count the miss.
    d = remote_daemon(op_ms=3000, connect_ms=3000)
    _, inner = fx_key("nothing")
    assert Native(d.socket).get("fx-graph", inner) == (MISS, b"")
    stats = remote_stats(d)
    if stats["misses"] == 0 and stats["timeouts"] + stats["errors"] == 1:
        assert Native(d.socket).get("fx-graph", inner) == (MISS, b"")
        stats = remote_stats(d)
    assert stats["misses"] == 1, f"{stats}"


def test_plain_pytorch_reads_what_pt2cached_writes(remote_daemon, redis_server, tmp_root):
    """Inductor's key and value format, both ways, with redis-py 8 on each side:
    one process talks to pt2cached (RESP front door), another to Redis."""
    d = remote_daemon("FX_GRAPH", "AUTOGRAD")
    via_daemon = redis_py.Redis(unix_socket_path=str(d.socket))
    direct = redis_client(redis_server)
    redis_key, inner = fx_key("interop-1")
    value = inductor_value(100_000, time_taken_ms=77)
    assert via_daemon.set(redis_key, value)
    wait_for(lambda: direct.get(redis_key) is not None, what="the write-behind SET")
    assert direct.get(redis_key) == value  # byte for byte: no header, no compression
    decoded = json.loads(direct.get(redis_key))
    assert set(decoded) == {"data", "time_taken_ms"} and decoded["time_taken_ms"] == 77
    # Native puts use the same key.
    aot_key, aot_inner = inductor_key("autograd-experimental", "a", "interop-2")
    assert Native(d.socket).put("aot-autograd", aot_inner, b'{"data": "AA=="}') == OK
    wait_for(lambda: direct.get(aot_key) == b'{"data": "AA=="}', what="the AOT entry in Redis")
    assert set(direct.keys("*")) == {redis_key.encode(), aot_key.encode()}


def test_pt2cached_reads_what_plain_pytorch_writes(remote_daemon, redis_server):
    d = remote_daemon()
    direct = redis_client(redis_server)
    via_daemon = redis_py.Redis(unix_socket_path=str(d.socket))
    redis_key, inner = fx_key("interop-3")
    value = inductor_value(50_000)
    direct.set(redis_key, value)
    # Inductor through pt2cached: the same key, the same bytes.
    assert via_daemon.get(redis_key) == value
    assert d.cli("get", "fx-graph", inner).stdout == value


def test_an_entry_whose_redis_key_is_another_entrys_stays_local(remote_daemon, redis_server):
    """("autotune", "fx-graph-v1::K") would be written as pt2:fx-graph-v1::K:c1,
    the Redis key of ("fx-graph", "K"): another machine asking for that FX
    graph got the autotune entry's bytes. Such an entry stays local; the one
    that owns the key still goes to Redis."""
    switches = ("FX_GRAPH", "AUTOTUNE", "AUTOGRAD", "BUNDLED_AUTOTUNE")
    pgo = {"TORCH_DYNAMO_AUTOMATIC_DYNAMIC_REMOTE_PGO": "1"}
    a = remote_daemon(*switches, env=pgo, sub="a")
    b = remote_daemon(*switches, env=pgo, sub="b")
    direct = redis_client(redis_server)
    hex64 = "c" * 64
    strays = [("autotune", "fx-graph-v1::K1"), ("aot-autograd", "autograd-experimental::K2"),
              ("redis", "pt2:dynamo-pgo::K3:c1"), ("autotune", f"bundled-autotune-v1::{hex64}")]
    owners = [("fx-graph", "K1"), ("aot-autograd", "K2"), ("pgo", "K3"),
              ("autotune-bundle", hex64)]
    writer = Native(a.socket)
    for ns, key in strays:
        assert writer.put(ns, key, f"stray {ns} {key}".encode()) == OK
    # An owner written after the strays: when it is in Redis, they would be.
    assert writer.put("autotune", f"{hex64}::K5", b"owner") == OK
    wait_for(lambda: direct.get(f"pt2:{hex64}::K5:c1") == b"owner", what="the owner's write")
    assert direct.keys("*") == [f"pt2:{hex64}::K5:c1".encode()]
    reader = Native(b.socket)
    for ns, key in owners:
        assert reader.get(ns, key) == (MISS, b""), (ns, key)
    # The strays are still served where they were written.
    for ns, key in strays:
        assert writer.get(ns, key) == (OK, f"stray {ns} {key}".encode())


def test_an_overwrite_reaches_redis_after_the_value_it_replaced(remote_daemon, redis_server):
    """A large value then a small one under the same key, both acknowledged:
    the small lane went first, the large write landed last, and Redis (every
    other machine) kept the older value (helper review: 4-7 of 20 keys)."""
    d = remote_daemon("FX_GRAPH", env={"TORCH_DYNAMO_AUTOMATIC_DYNAMIC_REMOTE_PGO": "1"})
    wait_remote_state(d, "connected")
    via_daemon = redis_py.Redis(unix_socket_path=str(d.socket))
    direct = redis_client(redis_server)
    keys = [f"pt2:dynamo-pgo::overwrite-{i}:c1" for i in range(20)]
    for key in keys:
        assert via_daemon.set(key, b"OLD" * 100_000)  # over the 256 KiB small lane
        assert via_daemon.set(key, b"NEW")
    wait_for(lambda: all(direct.exists(key) for key in keys), what="the writes")
    time.sleep(1.0)  # any write still to land would land now
    stale = [key for key in keys if direct.get(key) != b"NEW"]
    assert stale == [], f"{len(stale)} of {len(keys)} keys kept the older value in Redis"


@pytest.mark.parametrize("signed", [False, True], ids=["plain", "signed"])
def test_a_backfilled_entry_expires_when_it_does_in_redis(remote_daemon, redis_server, tmp_root,
                                                          signed):
    """Backfilled with no expiry, an entry another machine wrote with a TTL
    was served here for ever after Redis had dropped it (helper review)."""
    extra = {}
    if signed:
        key_file = tmp_root / "signing.key"
        key_file.write_text("ab" * 32 + "\n")
        key_file.chmod(0o600)
        extra = {"signing_key_file": key_file}
    writer = remote_daemon(sub="w", **extra)
    reader = remote_daemon(sub="r", **extra)
    direct = redis_client(redis_server)
    redis_key, inner = fx_key(f"short-lived-{signed}")
    value = inductor_value(1000)
    assert Native(writer.socket).put("fx-graph", inner, value, ttl_ms=1500) == OK
    wait_for(lambda: direct.get(redis_key) == value, what="the write-behind SET")
    assert 0 < direct.pttl(redis_key) <= 1500
    client = Native(reader.socket)
    assert client.get("fx-graph", inner) == (OK, value)  # backfilled
    wait_for(lambda: not direct.exists(redis_key), timeout=5, what="the expiry in Redis")
    assert client.get("fx-graph", inner) == (MISS, b"")
    client.close()
    reader.restart()  # nor from disk
    assert Native(reader.socket).get("fx-graph", inner) == (MISS, b"")


def test_ttl_from_torchinductor_redis_expire(remote_daemon, redis_server):
    d = remote_daemon(env={"TORCHINDUCTOR_REDIS_EXPIRE": "600"})
    direct = redis_client(redis_server)
    redis_key, inner = fx_key("ttl")
    assert Native(d.socket).put("fx-graph", inner, b"{}") == OK
    wait_for(lambda: direct.exists(redis_key), what="the SET")
    assert 0 < direct.ttl(redis_key) <= 600
    assert command_calls(direct, "set") >= 1
    # Without the setting, no TTL (as plain PyTorch).
    d2 = remote_daemon(sub="nottl")
    redis_key2, inner2 = fx_key("no-ttl")
    assert Native(d2.socket).put("fx-graph", inner2, b"{}") == OK
    wait_for(lambda: direct.exists(redis_key2), what="the SET")
    assert direct.ttl(redis_key2) == -1


def test_read_only_mode_writes_nothing(remote_daemon, redis_server):
    d = remote_daemon(read_only="true")
    direct = redis_client(redis_server)
    present, present_inner = fx_key("ro-present")
    direct.set(present, b"shared")
    client = Native(d.socket)
    for i in range(20):
        assert client.put("fx-graph", fx_key(f"ro-{i}")[1], b"local only") == OK
    assert client.put("redis", "plain-key", b"local only") == OK
    assert client.get("fx-graph", present_inner) == (OK, b"shared")  # reads still work
    assert client.get("fx-graph", fx_key("ro-3")[1]) == (OK, b"local only")
    time.sleep(0.5)
    assert direct.dbsize() == 1
    assert command_calls(direct, "set") == 1  # ours, above
    assert remote_stats(d)["queued"] == 0


def test_namespace_switches(make_daemon, redis_server):
    """Only the switched-on namespaces go remote; autotune's local
    `<hash>.best_config` entries have no Redis form and never leave."""
    d = make_daemon(*redis_args(), env=redis_env(redis_server, "AUTOTUNE"))
    direct = redis_client(redis_server)
    client = Native(d.socket)
    kernel = "ab" * 32 + "::" + "cd" * 32
    assert client.put("autotune", kernel, b'{"XBLOCK": 64}') == OK
    assert client.put("autotune", "0123abcd.best_config", b"{}") == OK
    assert client.put("fx-graph", fx_key("switch")[1], b"{}") == OK
    wait_for(lambda: direct.dbsize() >= 1, what="the autotune SET")
    time.sleep(0.3)
    assert direct.keys("*") == [f"pt2:{kernel}:c1".encode()]


def test_autograd_remote_needs_fx_graph_remote(make_daemon, redis_server):
    d = make_daemon(*redis_args(), env=redis_env(redis_server, "AUTOGRAD"))
    assert "remote AOTAutograd entries need remote FX graph entries" in d.log()
    # That was the only switch: no remote tier at all.
    assert d.stats()["tiers"]["remote"] is None
    assert d.stats()["remote"]["state"] == "disabled"


@pytest.mark.parametrize("form", ["url", "settings"])
def test_auth_with_password(make_daemon, tmp_root, form):
    (tmp_root / "auth").mkdir(mode=0o700)
    r = RedisServer(tmp_root / "auth", "--requirepass", "pw with space").start()
    try:
        if form == "url":
            env = {"TORCHINDUCTOR_REDIS_URL": f"unix://:pw%20with%20space@{r.socket}",
                   "TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE": "1"}
            args = redis_args()
        else:
            env = {"TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE": "1"}
            args = redis_args(unix_socket=str(r.socket)) + ["--set",
                                                             "remote.password=pw with space"]
        d = make_daemon(*args, env=env)
        wait_remote_state(d, "connected")
        direct = redis_py.Redis(unix_socket_path=str(r.socket), password="pw with space")
        redis_key, inner = fx_key("auth")
        assert Native(d.socket).put("fx-graph", inner, b"v") == OK
        wait_for(lambda: direct.get(redis_key) == b"v", what="the authenticated SET")
        assert "pw with space" not in d.cli("stats", "--json").stdout.decode()
    finally:
        r.stop()


def test_wrong_password_suspends_and_serves_locally(make_daemon, tmp_root):
    (tmp_root / "auth").mkdir(mode=0o700)
    r = RedisServer(tmp_root / "auth", "--requirepass", "right").start()
    try:
        env = {"TORCHINDUCTOR_REDIS_URL": f"unix://:wrong@{r.socket}",
               "TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE": "1"}
        d = make_daemon(*redis_args(), env=env)
        wait_remote_state(d, "suspended until ")
        client = Native(d.socket)
        assert client.put("fx-graph", "fk", b"v") == OK
        assert client.get("fx-graph", "fk") == (OK, b"v")
        assert "AUTH refused" in d.log()
    finally:
        r.stop()


def test_auth_with_acl_user_and_select(make_daemon, redis_server):
    direct = redis_client(redis_server)
    direct.execute_command("ACL", "SETUSER", "cache", "on", ">pw", "~pt2:*", "+get", "+pttl",
                           "+set", "+del", "+ping", "+select")
    env = {"TORCHINDUCTOR_REDIS_URL": f"unix://cache:pw@{redis_server.socket}?db=2",
           "TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE": "1"}
    d = make_daemon(*redis_args(), env=env)
    wait_remote_state(d, "connected")
    redis_key, inner = fx_key("acl")
    client = Native(d.socket)
    assert client.put("fx-graph", inner, b"acl value") == OK
    db2 = redis_client(redis_server, db=2)
    wait_for(lambda: db2.get(redis_key) == b"acl value", what="the SET as user cache in db 2")
    assert direct.get(redis_key) is None  # not in db 0
    other_key, other_inner = fx_key("acl-2")
    db2.set(other_key, b"from db 2")
    assert client.get("fx-graph", other_inner) == (OK, b"from db 2")
    # A key outside the user's pattern is refused by Redis: counted, local put fine.
    assert client.put("redis", "outside-pattern", b"v") == OK
    wait_for(lambda: remote_stats(d)["errors"] >= 1, what="the NOPERM error")
    assert remote_stats(d)["state"] == "connected"  # an error reply is no outage


def test_loopback_tcp(make_daemon, redis_tcp):
    env = {"TORCHINDUCTOR_REDIS_HOST": "127.0.0.1",
           "TORCHINDUCTOR_REDIS_PORT": str(redis_tcp.port),
           "TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE": "1"}
    d = make_daemon(*redis_args(), env=env)
    wait_remote_state(d, "connected")
    assert d.stats()["tiers"]["remote"]["endpoint"] == f"redis://127.0.0.1:{redis_tcp.port}"
    direct = redis_py.Redis(host="127.0.0.1", port=redis_tcp.port)
    redis_key, inner = fx_key("tcp")
    value = inductor_value(300_000)
    assert Native(d.socket).put("fx-graph", inner, value) == OK
    wait_for(lambda: direct.get(redis_key) == value, what="the SET over TCP")
    other_key, other_inner = fx_key("tcp-2")
    direct.set(other_key, value)
    assert Native(d.socket).get("fx-graph", other_inner) == (OK, value)


def test_stats_show_remote_state_and_counters(remote_daemon, redis_server):
    d = remote_daemon()
    wait_remote_state(d, "connected")
    stats = d.stats()
    for counter in ("hits", "misses", "errors", "timeouts", "suspensions", "queue_drops",
                    "backfills", "oversize_skips", "skipped", "coalesced", "queued", "written",
                    "shutdown_drops", "protocol_errors"):
        assert stats["remote"][counter] == 0, counter
    tier = stats["tiers"]["remote"]
    assert tier["state"] == "connected"
    assert tier["endpoint"] == f"unix://{redis_server.socket}"
    assert tier["namespaces"] == ["fx-graph", "redis"]
    text = d.cli("stats").stdout.decode()
    assert f"remote    connected (unix://{redis_server.socket})" in text
    assert "\nremote connected\n" in text and "queue_drops 0" in text


def test_remote_disabled_by_default(make_daemon):
    d = make_daemon()
    stats = d.stats()
    assert stats["remote"]["state"] == "disabled"
    assert stats["tiers"]["remote"] is None


def test_own_socket_as_redis_is_refused(make_daemon, tmp_root):
    """TORCHINDUCTOR_REDIS_URL meant for PyTorch (pointing at pt2cached) must not
    make the daemon its own remote tier."""
    env = {"TORCHINDUCTOR_REDIS_URL": f"unix://{tmp_root / 's'}",
           "TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE": "1"}
    d = make_daemon(*redis_args(), env=env)
    assert "this daemon's own socket" in d.log()
    assert d.stats()["remote"]["state"] == "disabled"
    client = Native(d.socket)
    assert client.put("fx-graph", "fk", b"v") == OK
    assert client.get("fx-graph", "fk") == (OK, b"v")


def test_a_full_redis_refusing_writes_is_no_outage(make_daemon, tmp_root):
    """-OOM (maxmemory with noeviction, which we advise against) is an error reply:
    counted, logged (rate-limited), never a suspension."""
    (tmp_root / "full").mkdir(mode=0o700)
    r = RedisServer(tmp_root / "full", "--maxmemory", "2mb", "--maxmemory-policy",
                    "noeviction").start()
    try:
        env = {"TORCHINDUCTOR_REDIS_URL": f"unix://{r.socket}",
               "TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE": "1"}
        d = make_daemon(*redis_args(), env=env)
        wait_remote_state(d, "connected")
        client = Native(d.socket)
        for i in range(10):
            assert client.put("fx-graph", fx_key(f"full-{i}")[1], b"v" * 500_000) == OK
        wait_for(lambda: remote_stats(d)["errors"] >= 3, what="-OOM replies")
        stats = remote_stats(d)
        assert stats["state"] == "connected" and stats["suspensions"] == 0
        assert d.log().count("Redis refused SET") == 1
        assert client.get("fx-graph", fx_key("full-9")[1]) == (OK, b"v" * 500_000)
    finally:
        r.stop()


def test_zero_byte_queue_means_read_only(remote_daemon, redis_server):
    d = remote_daemon(write_behind_queue_bytes="0")
    assert "(read-only)" in d.log()
    assert Native(d.socket).put("fx-graph", fx_key("zero")[1], b"v") == OK
    assert d.stats()["tiers"]["remote"]["read_only"] is True
    assert redis_client(redis_server).dbsize() == 0


def del_race_daemon(remote_daemon, redis_server, env=None):
    """(a client of `redis_server`, a connected daemon using it) for the DEL
    races below: timeouts long enough for 64 MiB values and paused writes."""
    d = remote_daemon(op_ms=10000, connect_ms=3000, env=env)
    wait_remote_state(d, "connected")
    return redis_client(redis_server), d


def race_with_del(d, redis_key: str, action, del_after=0.0, action_after=0.0) -> dict:
    """A DEL of `redis_key` through `d` and `action(client)` on another
    connection, each begun after its delay: their answers, under "del" and
    "other"."""
    results = {}

    def run(name, after, call):
        client = redis_py.Redis(unix_socket_path=str(d.socket), socket_timeout=60)
        client.ping()
        time.sleep(after)
        results[name] = call(client)

    threads = [threading.Thread(target=run, args=("del", del_after, lambda c: c.delete(redis_key))),
               threading.Thread(target=run, args=("other", action_after, action))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return results


def during_a_paused_del(d, r, redis_key: str, action) -> dict:
    """race_with_del while CLIENT PAUSE WRITE holds the DEL's delete from
    Redis for 1.5 s (reads go on), `action` 0.2 s into it."""
    r.execute_command("CLIENT", "PAUSE", 1500, "WRITE")
    return race_with_del(d, redis_key, action, action_after=0.2)


def test_set_xx_never_outlives_a_del_that_ended_while_it_asked_redis(remote_daemon, redis_server):
    """SET XX with nothing local asks Redis before it takes the key's lock
    (its round trip must not hold up other puts). A DEL that began and ended
    during that question (Redis's copy is 64 MiB, so it takes a while) made
    the answer stale: both were answered, yet the XX's value was left behind,
    locally and in Redis (a review: 12 of 12). The answer stands now only if
    no other write of the key's stripe began in between; else Redis is asked
    again."""
    r, d = del_race_daemon(remote_daemon, redis_server)
    wrong = []
    for trial in range(4):
        redis_key, _ = fx_key(f"xx-after-del-{trial}")
        r.set(redis_key, os.urandom(64 << 20))  # only Redis holds it
        # The DEL 0.02 s in: the XX is reading Redis's copy.
        results = race_with_del(d, redis_key, lambda c: c.set(redis_key, b"XXVALUE", xx=True),
                                del_after=0.02)
        after = redis_py.Redis(unix_socket_path=str(d.socket)).get(redis_key)
        # XX answered OK after the DEL removed the key: only a linearization
        # with the XX first explains OK, and then the DEL removed its value.
        if results.get("del") == 1 and after is not None:
            wrong.append((trial, results, after[:8], r.exists(redis_key)))
        r.delete(redis_key)
    assert not wrong


@pytest.mark.parametrize("local", [True, False], ids=["local", "remote_only"])
def test_set_xx_never_outlives_a_del_still_deleting_from_redis(remote_daemon, redis_server, local):
    """A DEL deletes locally, then from Redis, outside the key's lock. A SET
    XX in between found nothing local, read Redis's copy, found no write of
    the key since it asked, and stored: both answered, the XX's value stayed
    (a re-review: 5 of 5 with Redis's writes paused, 43 of 352 without). In
    a namespace only Redis keeps (TORCHINDUCTOR_FX_GRAPH_CACHE=0), the XX
    took no lock and looked at no DEL at all (a review: 5 of 5, 277 of 1,215
    without the pause)."""
    r, d = del_race_daemon(remote_daemon, redis_server,
                           env={} if local else {"TORCHINDUCTOR_FX_GRAPH_CACHE": "0"})
    wrong = []
    for trial in range(3):
        redis_key, _ = fx_key(f"xx-during-del-{trial}")
        via = redis_py.Redis(unix_socket_path=str(d.socket), socket_timeout=30)
        via.set(redis_key, b"OLD")
        wait_for(lambda: r.exists(redis_key) == 1, timeout=10)  # written behind
        results = during_a_paused_del(d, r, redis_key,
                                      lambda c: c.set(redis_key, b"NEW", xx=True))
        time.sleep(0.3)  # a stored XX is written behind to Redis
        after = (via.get(redis_key), r.get(redis_key))
        if results.get("del") == 1 and after != (None, None):
            wrong.append((trial, results, after))
    assert not wrong


def test_a_get_during_a_del_never_copies_the_deleted_value_back(remote_daemon, redis_server):
    """A GET that misses locally while a DEL is still deleting from Redis
    reads Redis's doomed copy: serving it is fine (the DEL has not answered),
    but it was copied back into memory and disk, and outlived the DEL, also
    after a restart (a review: 3 of 3 with Redis's writes paused, 5 of 300
    without)."""
    r, d = del_race_daemon(remote_daemon, redis_server)
    wrong = []
    for trial in range(3):
        redis_key, _ = fx_key(f"get-during-del-{trial}")
        r.set(redis_key, b"OLD")  # only Redis holds it
        results = during_a_paused_del(d, r, redis_key, lambda c: c.get(redis_key))
        after = redis_py.Redis(unix_socket_path=str(d.socket)).get(redis_key)
        if results.get("del") == 1 and after is not None:
            wrong.append((trial, results, after))
    assert not wrong
