"""The remote tier against a real Redis Cluster (3 masters + 3 replicas on
loopback, tests/support/redis_cluster.py): slot routing of every key kind,
MOVED during a resharding, ASK during a slot migration, a dead master (other
slots keep hitting, its own answer misses within the deadline, failover
restores them), remote.cluster = auto on a cluster and on a single node, and
a TLS-only cluster with signed entries."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

import pytest
from pt2harness import wait_for
from remote_helpers import (MISS, OK, Native, fx_key, inductor_key, inductor_value, redis_args,
                            redis_env, remote_stats, wait_remote_state)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "support"))
from redis_cluster import RedisCluster, key_slot  # noqa: E402

ALL_SWITCHES = ("FX_GRAPH", "AUTOGRAD", "AUTOTUNE", "BUNDLED_AUTOTUNE")
# Per-operation deadline of the daemons here: connect + op timeout.
OP_MS, CONNECT_MS = 400, 200


def key_kinds(seed: str) -> list[tuple[str, str, str]]:
    """(namespace, daemon key, Redis key) of one entry of every kind with a Redis form."""
    digest = hashlib.sha256(seed.encode()).hexdigest()
    kernel = digest + "::" + hashlib.sha256(digest.encode()).hexdigest()
    fx_redis, fx_inner = fx_key(seed)
    aot_redis, aot_inner = inductor_key("autograd-experimental", "a", seed)
    return [
        ("fx-graph", fx_inner, fx_redis),
        ("aot-autograd", aot_inner, aot_redis),
        ("autotune", kernel, f"pt2:{kernel}:c1"),
        ("autotune-bundle", "b" + digest[:40], f"pt2:bundled-autotune-v1::b{digest[:40]}:c1"),
        ("pgo", "p" + digest[:30], f"pt2:dynamo-pgo::p{digest[:30]}:c1"),
        ("redis", f"plain:{seed}", f"plain:{seed}"),
    ]


def cluster_env(cluster: RedisCluster, node=None) -> dict:
    node = node or cluster.masters()[0]
    env = {"TORCHINDUCTOR_REDIS_URL": f"redis://127.0.0.1:{node.port}",
           "TORCH_DYNAMO_AUTOMATIC_DYNAMIC_REMOTE_PGO": "1"}
    for name in ALL_SWITCHES:
        env[f"TORCHINDUCTOR_{name}_REMOTE_CACHE"] = "1"
    return env


def cluster_daemon(make_daemon, cluster, sub, **settings):
    d = make_daemon(*redis_args(op_ms=OP_MS, connect_ms=CONNECT_MS, **settings),
                    env=cluster_env(cluster), sub=sub)
    wait_remote_state(d, "connected")
    wait_for(lambda: d.stats()["tiers"]["remote"].get("slots_known") == 16384,
             what="the slot map", timeout=10)
    return d


def get_on(cluster, node, key):
    """GET on `node` itself (no redirection followed): None when absent or not its slot."""
    reply = cluster.command(node, "GET", key)
    return reply if isinstance(reply, bytes) else None


def keys_in_slots(slots: set[int], count: int, tag: str) -> list[tuple[str, str]]:
    """`count` FX (Redis key, inner key) pairs whose slots are in `slots`."""
    found = []
    for i in range(2_000_000):
        redis_key, inner = fx_key(f"{tag}-{i}")
        if key_slot(redis_key) in slots:
            found.append((redis_key, inner))
            if len(found) == count:
                return found
    raise AssertionError("no key found in the slots")


def two_keys_in_one_slot(tag: str) -> list[tuple[str, str]]:
    seen = {}
    for i in range(100_000):
        pair = fx_key(f"{tag}-{i}")
        slot = key_slot(pair[0])
        if slot in seen:
            return [seen[slot], pair]
        seen[slot] = pair
    raise AssertionError("no two keys in one slot")


@pytest.fixture(scope="module")
def cluster():
    root = Path(tempfile.mkdtemp(prefix="p2t-cluster-"))
    try:
        with RedisCluster(root, masters=3, replicas=1) as c:
            yield c
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_python_key_slot_matches_cluster_keyslot(cluster):
    keys = [redis_key for i in range(200) for _, _, redis_key in key_kinds(f"slot-{i}")]
    keys += ["{tag}x", "x{}{tag}", "{{tag}}", "{}", "a{b", "é{ü}"]
    slots = cluster.pipeline(cluster.masters()[0], *[("CLUSTER", "KEYSLOT", k) for k in keys])
    assert [key_slot(k) for k in keys] == slots


def test_every_key_kind_is_written_to_and_read_from_its_slots_master(cluster, make_daemon):
    d = cluster_daemon(make_daemon, cluster, "route")
    assert d.stats()["tiers"]["remote"]["cluster"] == "yes"
    client = Native(d.socket)
    entries = [kind for i in range(12) for kind in key_kinds(f"route-{i}")]
    for n, (ns, key, _) in enumerate(entries):
        assert client.put(ns, key, b"value-%d" % n) == OK
    wait_for(lambda: remote_stats(d)["written"] == len(entries), what="the writes", timeout=15)
    owners = set()
    for n, (ns, key, redis_key) in enumerate(entries):
        owner = cluster.master_for_key(redis_key)
        owners.add(owner.port)
        # On the master of its slot, under exactly the key plain PyTorch uses.
        assert get_on(cluster, owner, redis_key) == b"value-%d" % n, (ns, redis_key)
    assert len(owners) == 3  # spread over every shard
    # redis-cli as a cluster client, from another node, agrees.
    ns, key, redis_key = entries[0]
    other = next(n for n in cluster.masters() if n is not cluster.master_for_key(redis_key))
    assert cluster.cli(other, "GET", redis_key, cluster_mode=True).strip() == "value-0"

    # Reads: entries written by plain clients, one per kind, all hits.
    fresh = [kind for i in range(12) for kind in key_kinds(f"read-{i}")]
    for n, (_, _, redis_key) in enumerate(fresh):
        cluster.command(cluster.master_for_key(redis_key), "SET", redis_key, b"plain-%d" % n)
    for n, (ns, key, _) in enumerate(fresh):
        assert client.get(ns, key) == (OK, b"plain-%d" % n), ns
    stats = remote_stats(d)
    assert stats["hits"] == len(fresh)
    assert stats["errors"] == 0 and stats["cluster_moves"] == 0


def test_moved_during_resharding(cluster, make_daemon):
    source, target = cluster.masters()[:2]
    # redis-cli --cluster reshard moves the source's lowest slots first.
    owners = cluster.slot_owners()
    first = [s for s in range(16384) if owners[s] is source][:100]
    entries = keys_in_slots(set(first), 6, "moved")
    d = cluster_daemon(make_daemon, cluster, "moved")
    client = Native(d.socket)
    cluster.reshard(source, target, 100)
    owners = cluster.slot_owners()
    assert all(owners[s] is target for s in first)
    # Entries in the moved slots, now on `target`: the daemon's map still says
    # `source`, which answers MOVED.
    for redis_key, _ in entries[:3]:
        cluster.command(target, "SET", redis_key, b"resharded")
    for _, inner in entries[:3]:
        assert client.get("fx-graph", inner) == (OK, b"resharded")
    # Writes to moved slots land on the new owner.
    for _, inner in entries[3:]:
        assert client.put("fx-graph", inner, b"written after") == OK
    wait_for(lambda: all(get_on(cluster, target, k) == b"written after" for k, _ in entries[3:]),
             what="the writes on the new owner", timeout=10)
    stats = remote_stats(d)
    assert stats["cluster_moves"] >= 1
    assert stats["hits"] == 3 and stats["errors"] == 0 and stats["queue_drops"] == 0
    # The MOVED asked for a refresh: the map follows the resharding.
    wait_for(lambda: remote_stats(d)["topology_refreshes"] >= 2, what="a topology refresh")


def test_ask_during_a_slot_migration(cluster, make_daemon):
    d = cluster_daemon(make_daemon, cluster, "ask")
    client = Native(d.socket)
    (moved_key, moved_inner), (new_key, new_inner) = two_keys_in_one_slot("ask")
    slot = key_slot(moved_key)
    source = cluster.master_for_slot(slot)
    target = next(n for n in cluster.masters() if n is not source)
    cluster.command(source, "SET", moved_key, b"migrated")
    cluster.start_migration(slot, source, target)
    try:
        cluster.migrate_key(moved_key, source, target)
        assert isinstance(cluster.command(source, "GET", moved_key), Exception)  # ASK
        assert client.get("fx-graph", moved_inner) == (OK, b"migrated")
        assert remote_stats(d)["cluster_asks"] >= 1
        # A new key of a migrating slot goes to the importing node too (ASK).
        assert client.put("fx-graph", new_inner, b"new") == OK
        wait_for(lambda: _asking_get(cluster, target, new_key) == b"new", what="the write",
                 timeout=10)
        assert remote_stats(d)["cluster_moves"] == 0  # ASK never moves the slot
    finally:
        cluster.finish_migration(slot, target)
    stats = remote_stats(d)
    assert stats["errors"] == 0 and stats["queue_drops"] == 0


def _asking_get(cluster, node, key):
    return cluster.pipeline(node, ("ASKING",), ("GET", key))[1]


def test_dead_master_costs_only_its_slots_and_failover_restores_them(tmp_root, make_daemon):
    with RedisCluster(tmp_root / "cluster", masters=3, replicas=1) as cluster:
        d = cluster_daemon(make_daemon, cluster, "dead")
        client = Native(d.socket)
        victim = cluster.masters()[1]
        keys = [fx_key(f"dead-{i}") for i in range(120)]
        for n, (redis_key, _) in enumerate(keys):
            cluster.command(cluster.master_for_key(redis_key), "SET", redis_key, b"v%d" % n)
        cluster.command(victim, "WAIT", 1, 2000)  # its replica has the entries
        on_victim = [k for k in keys if cluster.master_for_key(k[0]) is victim]
        elsewhere = [k for k in keys if cluster.master_for_key(k[0]) is not victim]
        assert len(on_victim) >= 10 and len(elsewhere) >= 10

        cluster.kill(victim)
        budget = (OP_MS + CONNECT_MS) / 1000 + 0.2
        half = len(on_victim) // 2
        # Its slots: misses, each within the deadline; others: hits.
        for n, (redis_key, inner) in enumerate(on_victim[:half] + elsewhere[:20]):
            started = time.monotonic()
            status, body = client.get("fx-graph", inner)
            assert time.monotonic() - started < budget
            if (redis_key, inner) in elsewhere:
                assert status == OK and body == b"v%d" % keys.index((redis_key, inner))
            else:
                assert status == MISS
        stats = remote_stats(d)
        assert stats["suspensions"] >= 1  # the dead node's breaker opened
        assert d.stats()["remote"]["state"] == "connected"

        promoted = cluster.wait_for_failover(victim)
        assert promoted is not victim
        # The refresh after the failures moves its slots to the promoted replica.
        rest = on_victim[half:]

        def all_hit():
            return all(client.get("fx-graph", inner)[0] == OK for _, inner in rest)
        wait_for(all_hit, timeout=20, interval=0.2, what="hits after the failover")
        cluster.restart(victim)  # comes back as a replica; nothing breaks
        cluster.wait_ok()
        assert client.get("fx-graph", elsewhere[-1][1])[0] == OK
        assert "Traceback" not in d.log()


def test_auto_detects_a_single_node(make_daemon, redis_server):
    d = make_daemon(*redis_args(), env=redis_env(redis_server))
    wait_remote_state(d, "connected")
    assert d.stats()["tiers"]["remote"]["cluster"] == "no"
    client = Native(d.socket)
    _, inner = fx_key("single")
    assert client.put("fx-graph", inner, b"x") == OK
    wait_for(lambda: remote_stats(d)["written"] == 1, what="the write")
    assert remote_stats(d)["topology_refreshes"] == 0


def test_cluster_nodes_seed_when_the_url_is_down(cluster, make_daemon, tmp_root):
    """remote.cluster = true with a dead remote.url: the extra seed gives the topology."""
    from remote_helpers import free_port
    env = cluster_env(cluster)
    env["TORCHINDUCTOR_REDIS_URL"] = f"redis://127.0.0.1:{free_port()}"
    seed = cluster.masters()[2]
    d = make_daemon(*redis_args(op_ms=OP_MS, connect_ms=CONNECT_MS, cluster="true",
                                cluster_nodes=f"redis://127.0.0.1:{seed.port}"),
                    env=env, sub="seeds")
    wait_remote_state(d, "connected")
    assert d.stats()["tiers"]["remote"]["cluster"] == "yes"
    redis_key, inner = fx_key("seeded")
    cluster.command(cluster.master_for_key(redis_key), "SET", redis_key, b"seeded")
    assert Native(d.socket).get("fx-graph", inner) == (OK, b"seeded")


def test_read_from_replicas(cluster, make_daemon):
    """remote.read_from_replicas: gets go to the slot's replica (READONLY), writes to its master."""
    d = cluster_daemon(make_daemon, cluster, "replicas", read_from_replicas="true")
    client = Native(d.socket)
    redis_key, inner = fx_key("from-a-replica")
    master = cluster.master_for_key(redis_key)
    replica = cluster.replicas_of(master)[0]
    cluster.command(master, "SET", redis_key, b"replicated")
    assert cluster.command(master, "WAIT", 1, 2000) == 1

    def gets(node):
        info = cluster.command(node, "INFO", "commandstats").decode()
        for line in info.splitlines():
            if line.startswith("cmdstat_get:"):
                return int(line.split("calls=")[1].split(",")[0])
        return 0
    on_master, on_replica = gets(master), gets(replica)
    assert client.get("fx-graph", inner) == (OK, b"replicated")
    assert gets(replica) == on_replica + 1
    assert gets(master) == on_master
    # Writes still go to the master.
    _, written = fx_key("written-by-replica-reader")
    assert client.put("fx-graph", written, b"w") == OK
    wait_for(lambda: remote_stats(d)["written"] == 1, what="the write")
    assert remote_stats(d)["errors"] == 0 and remote_stats(d)["cluster_moves"] == 0


def test_cluster_true_on_a_single_node_stays_local_and_says_why(make_daemon, redis_server):
    d = make_daemon(*redis_args(cluster="true"), env=redis_env(redis_server))
    wait_for(lambda: "topology not loaded" in d.log(), what="the log line", timeout=10)
    assert remote_stats(d)["state"] == "connecting"
    client = Native(d.socket)
    _, inner = fx_key("no-topology")
    assert client.put("fx-graph", inner, b"local") == OK
    assert client.get("fx-graph", inner) == (OK, b"local")


def check_signed_on_owners(cluster, writer, entries, value_format: bytes) -> None:
    """Once `writer` has written `entries` (value n: value_format % n), each
    value and its signature companion are on the master of the value's slot,
    and the entries span all three masters."""
    wait_for(lambda: remote_stats(writer)["written"] == len(entries), what="the writes",
             timeout=15)
    owners = set()
    for n, (redis_key, _) in enumerate(entries):
        owner = cluster.master_for_key(redis_key)
        owners.add(owner.port)
        assert get_on(cluster, owner, redis_key) == value_format % n
        assert get_on(cluster, owner, "pt2sig:{" + redis_key + "}").startswith(b"v1:")
    assert len(owners) == 3


def test_cluster_with_signing(cluster, make_daemon, tmp_root):
    """Signed entries in a cluster: value and companion `pt2sig:{key}` in one
    slot, written in one exchange and read with one MGET routed by the key."""
    keys = tmp_root / "signing.keys"
    keys.write_text(os.urandom(32).hex() + "\n")
    os.chmod(keys, 0o600)

    def daemon(sub):
        return cluster_daemon(make_daemon, cluster, sub, signing_key_file=keys)
    writer = daemon("writer")
    entries = [fx_key(f"signed-{i}") for i in range(12)]
    client = Native(writer.socket)
    for n, (_, inner) in enumerate(entries):
        assert client.put("fx-graph", inner, b"signed-%d" % n) == OK
    check_signed_on_owners(cluster, writer, entries, b"signed-%d")
    reader = Native(daemon("reader").socket)
    for n, (_, inner) in enumerate(entries):
        assert reader.get("fx-graph", inner) == (OK, b"signed-%d" % n)
    # A key with a '}' of its own: its companion may be in another slot.
    odd = [f"odd}}key-{i}" for i in range(6)]
    assert any(key_slot(k) != key_slot("pt2sig:{" + k + "}") for k in odd)
    for k in odd:
        assert client.put("redis", k, b"odd " + k.encode()) == OK
    wait_for(lambda: remote_stats(writer)["written"] == len(entries) + len(odd),
             what="the odd writes", timeout=15)
    for k in odd:
        assert reader.get("redis", k) == (OK, b"odd " + k.encode())
    # A value altered in Redis is a counted miss.
    redis_key, inner = fx_key("signed-tampered")
    assert client.put("fx-graph", inner, b"good") == OK
    wait_for(lambda: remote_stats(writer)["written"] == len(entries) + len(odd) + 1,
             what="the write")
    cluster.command(cluster.master_for_key(redis_key), "SET", redis_key, b"evil")
    third = daemon("third")
    assert Native(third.socket).get("fx-graph", inner) == (MISS, b"")
    stats = remote_stats(third)
    assert stats["rejected_bad_signature"] == 1 and stats["errors"] == 0


def test_a_split_pair_is_written_once_during_a_migration(cluster, make_daemon, tmp_root):
    """A signed entry's value and companion are written in one exchange. With
    the companion already moved to the importing node, the source writes the
    value and answers ASK for the companion: only the companion goes on to
    the importing node. The value was sent there too, which left the key on
    both nodes and made the migration's MIGRATE of it fail (BUSYKEY)."""
    keys = tmp_root / "signing.keys"
    keys.write_text(os.urandom(32).hex() + "\n")
    os.chmod(keys, 0o600)
    writer = cluster_daemon(make_daemon, cluster, "split-writer", signing_key_file=keys)
    client = Native(writer.socket)
    redis_key, inner = fx_key("split-pair")
    companion = "pt2sig:{" + redis_key + "}"
    slot = key_slot(redis_key)
    assert key_slot(companion) == slot
    assert client.put("fx-graph", inner, b"v1") == OK
    wait_for(lambda: remote_stats(writer)["written"] == 1, what="v1 written", timeout=10)
    source = cluster.master_for_slot(slot)
    target = next(n for n in cluster.masters() if n is not source)
    cluster.start_migration(slot, source, target)
    try:
        cluster.migrate_key(companion, source, target)
        assert client.put("fx-graph", inner, b"v2") == OK
        wait_for(lambda: remote_stats(writer)["written"] == 2, what="v2 written", timeout=10)
        assert remote_stats(writer)["cluster_asks"] >= 1
        assert get_on(cluster, source, redis_key) == b"v2"
        assert _asking_get(cluster, target, redis_key) is None  # written once, on the source
        assert _asking_get(cluster, target, companion).startswith(b"v1:")
        cluster.migrate_key(redis_key, source, target)  # raises on BUSYKEY
    finally:
        cluster.finish_migration(slot, target)
    reader = cluster_daemon(make_daemon, cluster, "split-reader", signing_key_file=keys)
    assert Native(reader.socket).get("fx-graph", inner) == (OK, b"v2")
    stats = remote_stats(writer)
    assert stats["errors"] == 0 and stats["queue_drops"] == 0


def test_cluster_with_tls_and_signing(tmp_root, make_daemon):
    """All three together: a TLS-only cluster (nodes verify the daemon's
    client certificate), signed entries, and slot routing."""
    from tls_certs import TlsCerts
    from redis_cluster import TlsFiles
    certs = TlsCerts(tmp_root / "certs")
    # A node is also a TLS client of the other nodes' cluster bus.
    node = certs.issue("node", dns=["localhost"], ips=["127.0.0.1"], both=True)
    mine = certs.issue("pt2cached", client=True)
    keys = tmp_root / "signing.keys"
    keys.write_text(os.urandom(32).hex() + "\n")
    os.chmod(keys, 0o600)
    files = TlsFiles(str(certs.ca), str(node.cert), str(node.key))
    with RedisCluster(tmp_root / "tls-cluster", masters=3, replicas=1, tls=files) as cluster:
        env = cluster_env(cluster)
        env["TORCHINDUCTOR_REDIS_URL"] = f"rediss://127.0.0.1:{cluster.masters()[0].port}"

        def daemon(sub):
            d = make_daemon(*redis_args(op_ms=1000, connect_ms=500, tls_ca_file=certs.ca,
                                        tls_cert_file=mine.cert, tls_key_file=mine.key,
                                        signing_key_file=keys),
                            env=env, sub=sub)
            wait_remote_state(d, "connected")
            wait_for(lambda: d.stats()["tiers"]["remote"].get("slots_known") == 16384,
                     what="the slot map", timeout=10)
            return d

        writer = daemon("tls-writer")
        remote = writer.stats()["tiers"]["remote"]
        assert (remote["cluster"], remote["tls"], remote["signed"]) == ("yes", True, True)
        entries = [fx_key(f"tls-signed-{i}") for i in range(12)]
        client = Native(writer.socket)
        for n, (_, inner) in enumerate(entries):
            assert client.put("fx-graph", inner, b"tls-signed-%d" % n) == OK
        check_signed_on_owners(cluster, writer, entries, b"tls-signed-%d")

        reader = Native(daemon("tls-reader").socket)
        for n, (_, inner) in enumerate(entries):
            assert reader.get("fx-graph", inner) == (OK, b"tls-signed-%d" % n)
        stats = remote_stats(writer)
        assert stats["errors"] == 0 and stats["protocol_errors"] == 0

        # Tampered in Redis: a counted miss, over TLS too.
        redis_key, inner = entries[0]
        cluster.command(cluster.master_for_key(redis_key), "SET", redis_key, b"evil")
        third = daemon("tls-third")
        assert Native(third.socket).get("fx-graph", inner) == (MISS, b"")
        assert remote_stats(third)["rejected_bad_signature"] == 1


def test_a_frozen_master_holds_back_only_its_own_writes(tmp_root, make_daemon):
    """Queued writes of a master that stopped answering (SIGSTOP) wait for
    it; the other masters' writes go out meanwhile. The frozen node's entry,
    put back at the head of the queue, had been taken again and again: no
    master got its writes while the node was down."""
    with RedisCluster(tmp_root / "cluster", masters=3, replicas=0) as cluster:
        d = cluster_daemon(make_daemon, cluster, "frozen")
        victim = cluster.masters()[2]
        keys = [fx_key(f"hol-{i}") for i in range(150)]
        owner = {redis_key: cluster.master_for_key(redis_key) for redis_key, _ in keys}
        cluster.kill(victim, signal.SIGSTOP)
        try:
            client = Native(d.socket)
            for n, (_, inner) in enumerate(keys):
                assert client.put("fx-graph", inner, b"v%d" % n) == OK
            live = [(n, redis_key) for n, (redis_key, _) in enumerate(keys)
                    if owner[redis_key] is not victim]
            assert len(live) >= 50

            def written():
                return all(get_on(cluster, owner[k], k) == b"v%d" % n for n, k in live)
            wait_for(written, timeout=15, interval=0.25, what="the live masters' writes")
            assert remote_stats(d)["queue_entries"] >= 1  # the frozen node's wait
        finally:
            cluster.kill(victim, signal.SIGCONT)
