"""Many concurrent pipelining clients: replies stay in order, on the right
connection, with the right values."""

from __future__ import annotations

import hashlib
import os
import random
import socket
import struct
import threading
import time

import pytest
import redis

from integ_helpers import NativeClient, put_body
from pt2harness import OP, STATUS, RawConnection, frame, key_body, wait_for

CLIENTS = 32
OPS_PER_CLIENT = 1000
BATCH = 16
SHARED_KEYS = 24
PRIVATE_KEYS = 40


@pytest.fixture
def make_daemon(make_daemon_two_loops):
    """These tests are about threads: two I/O loops."""
    return make_daemon_two_loops


def shared_value(writer: int, seq: int, size: int) -> bytes:
    """Self-checking: a header naming the writer, then bytes derived from it."""
    head = struct.pack("<III", writer, seq, size)
    seed = hashlib.sha256(head).digest()
    body = (seed * (size // len(seed) + 1))[:size]
    return head + body


def check_shared(value: bytes) -> bool:
    if len(value) < 12:
        return False
    writer, seq, size = struct.unpack_from("<III", value)
    return value == shared_value(writer, seq, size)


class Worker(threading.Thread):
    def __init__(self, socket_path, index: int, barrier: threading.Barrier):
        super().__init__(name=f"client-{index}")
        self.path = socket_path
        self.index = index
        self.barrier = barrier
        self.rng = random.Random(index * 7919)
        self.model: dict[bytes, bytes] = {}  # private keys: what the daemon must hold
        self.errors: list[str] = []
        self.counts = {"put": 0, "get": 0, "exists": 0, "delete": 0, "shared_hits": 0}
        self.seq = 0

    def private_key(self) -> bytes:
        return b"client-%02d/key-%02d" % (self.index, self.rng.randrange(PRIVATE_KEYS))

    def shared_key(self) -> bytes:
        return b"shared-%02d" % self.rng.randrange(SHARED_KEYS)

    def value_size(self) -> int:
        r = self.rng.random()
        if r < 0.02:
            return self.rng.randrange(64 << 10, 200 << 10)  # the large-frame path
        if r < 0.2:
            return self.rng.randrange(1024, 16 << 10)
        return self.rng.randrange(1, 512)

    def plan(self):
        """One request: (op, ns, key, value, expectation)."""
        kind = self.rng.choice(("put", "put", "get", "get", "get", "exists", "delete"))
        private = self.rng.random() < 0.6
        key = self.private_key() if private else self.shared_key()
        ns = "pgo" if private else "autotune"
        value = None
        if kind == "put":
            self.seq += 1
            size = self.value_size()
            if private:
                value = self.rng.randbytes(size)
            else:
                value = shared_value(self.index, self.seq, size)
        return kind, ns, key, value, private

    def run(self):
        try:
            conn = NativeClient(self.path, timeout=30)
            self.barrier.wait(timeout=30)
            rid = self.index << 24
            done = 0
            while done < OPS_PER_CLIENT:
                batch = []
                data = bytearray()
                for _ in range(min(BATCH, OPS_PER_CLIENT - done)):
                    kind, ns, key, value, private = self.plan()
                    rid += 1
                    if kind == "put":
                        data += frame(OP["put"], put_body(ns, key, value), rid=rid)
                    else:
                        data += frame(OP[kind], key_body(ns, key), rid=rid)
                    # What a private key must answer is known now, in request order.
                    expected = None
                    if private:
                        if kind == "put":
                            self.model[key] = value
                        elif kind == "get":
                            expected = self.model.get(key)
                        elif kind in ("exists", "delete"):
                            expected = key in self.model
                            if kind == "delete":
                                self.model.pop(key, None)
                    batch.append((kind, key, private, expected, rid))
                conn.send(bytes(data))
                for kind, key, private, expected, want_id in batch:
                    op, status, got_id, body = conn.reply()
                    if (op, got_id) != (OP[kind], want_id):
                        self.errors.append(f"reply {op}/{got_id:#x} for request "
                                           f"{OP[kind]}/{want_id:#x}")
                        return
                    self.check(kind, key, private, expected, status, body)
                    self.counts[kind] += 1
                done += len(batch)
            # Finally every private key reads back exactly.
            for i in range(PRIVATE_KEYS):
                key = b"client-%02d/key-%02d" % (self.index, i)
                status, body = conn.get("pgo", key)
                want = self.model.get(key)
                if want is None and status != STATUS["miss"]:
                    self.errors.append(f"deleted {key!r} answered {status}")
                if want is not None and (status, body) != (STATUS["ok"], want):
                    self.errors.append(f"final read of {key!r}: status {status}, "
                                       f"{len(body)} bytes, wanted {len(want)}")
            conn.close()
        except Exception as e:  # noqa: BLE001 - reported by the test
            self.errors.append(f"{type(e).__name__}: {e}")

    def check(self, kind, key, private, expected, status, body):
        where = f"{kind} {key!r}"
        if kind == "put":
            if (status, body) != (STATUS["ok"], b""):
                self.errors.append(f"{where}: status {status}")
        elif kind == "get":
            if private:
                if expected is None:
                    if (status, body) != (STATUS["miss"], b""):
                        self.errors.append(f"{where}: expected a miss, got {status}")
                elif (status, body) != (STATUS["ok"], expected):
                    self.errors.append(f"{where}: status {status}, {len(body)} bytes, "
                                       f"expected {len(expected)} bytes of this client's value")
            elif status == STATUS["ok"]:
                self.counts["shared_hits"] += 1
                if not check_shared(body):
                    self.errors.append(f"{where}: a torn or foreign value of {len(body)} bytes")
            elif (status, body) != (STATUS["miss"], b""):
                self.errors.append(f"{where}: status {status}")
        else:  # exists, delete
            if private:
                want = STATUS["ok"] if expected else STATUS["miss"]
                if (status, body) != (want, b""):
                    self.errors.append(f"{where}: status {status}, expected {want}")
            elif status not in (STATUS["ok"], STATUS["miss"]) or body != b"":
                self.errors.append(f"{where}: status {status}")


def test_32_pipelining_clients(make_daemon):
    d = make_daemon()
    barrier = threading.Barrier(CLIENTS)
    workers = [Worker(d.socket, i, barrier) for i in range(CLIENTS)]
    start = time.monotonic()
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=max(1.0, 90 - (time.monotonic() - start)))
    elapsed = time.monotonic() - start
    stuck = [w.name for w in workers if w.is_alive()]
    assert not stuck, f"clients still running after {elapsed:.0f} s: {stuck}"
    errors = [f"{w.name}: {e}" for w in workers for e in w.errors]
    assert not errors, "\n".join(errors[:20])
    assert elapsed < 60, f"{CLIENTS} x {OPS_PER_CLIENT} ops took {elapsed:.1f} s"

    total = sum(sum(v for k, v in w.counts.items() if k != "shared_hits") for w in workers)
    assert total == CLIENTS * OPS_PER_CLIENT
    assert sum(w.counts["shared_hits"] for w in workers) > 0, "shared keys were never read back"

    observer = NativeClient(d.socket)
    # The workers' connections are closed; the daemon sees each close soon after.
    wait_for(lambda: observer.stats()["daemon"]["connections_active"] == 1,
             what="the workers' connections to end")
    stats = observer.stats()
    assert stats["daemon"]["protocol_errors"] == 0
    puts = sum(w.counts["put"] for w in workers)
    # Every put reached both local tiers.
    assert (stats["namespaces"]["pgo"]["disk"]["puts"] +
            stats["namespaces"]["autotune"]["disk"]["puts"]) == puts
    # Private keys of every client, read back through a fresh connection.
    for w in workers:
        for key, value in w.model.items():
            assert observer.get("pgo", key) == (STATUS["ok"], value), key
    observer.close()
    assert d.proc.poll() is None


# ---- pipelines sent before any reply is read (docs/protocol.md, "Pipelining") ----

def test_a_pipeline_sent_whole_before_reading_does_not_deadlock(make_daemon):
    """Replies to the first requests outgrow the socket buffer while the client
    is still sending a large PUT: the daemon must go on reading."""
    d = make_daemon()
    c = NativeClient(d.socket, timeout=20)
    big = os.urandom(200 << 10)
    c.send(frame(OP["put"], put_body("pgo", b"big", big), rid=1))
    assert c.reply()[1] == STATUS["ok"]
    huge = os.urandom(4 << 20)
    data = bytearray()
    for i in range(16):
        data += frame(OP["get"], key_body("pgo", b"big"), rid=100 + i)
    data += frame(OP["put"], put_body("pgo", b"huge", huge), rid=200)
    data += frame(OP["get"], key_body("pgo", b"huge"), rid=201)
    started = time.monotonic()
    c.send(bytes(data))
    for i in range(16):
        op, status, rid, body = c.reply()
        assert (op, status, rid, body) == (OP["get"], STATUS["ok"], 100 + i, big)
    assert c.reply()[1:3] == (STATUS["ok"], 200)
    assert c.reply()[1:] == (STATUS["ok"], 201, huge)
    assert time.monotonic() - started < 15
    c.close()


def test_a_redis_py_pipeline_of_large_values_does_not_deadlock(make_daemon):
    d = make_daemon()
    client = redis.Redis(unix_socket_path=str(d.socket), socket_timeout=20)
    big = os.urandom(300 << 10)
    assert client.set("pipeline:big", big)
    pipe = client.pipeline(transaction=False)
    for _ in range(12):
        pipe.get("pipeline:big")
    pipe.set("pipeline:huge", b"h" * (6 << 20))
    pipe.get("pipeline:huge")
    replies = pipe.execute()
    assert replies[:12] == [big] * 12
    assert replies[12] is True and replies[13] == b"h" * (6 << 20)
    client.close()


@pytest.mark.parametrize("memory", ["256MiB", "0"], ids=["memory-tier", "disk-only"])
def test_a_pipeline_mixing_quick_and_slow_commands_keeps_its_order(make_daemon, memory):
    """One write of commands served in one pass (memory hits, proven misses,
    small SETs) and commands that need the worker pool (DEL, EXISTS, a SET
    with options, a GET from the disk tier, a 100 KiB value): every reply in
    order, each seeing the commands before it, over RESP and the native
    protocol."""
    d = make_daemon("--set", f"memory.max_size={memory}")
    client = redis.Redis(unix_socket_path=str(d.socket), socket_timeout=20)
    large = os.urandom(100 << 10)
    pipe = client.pipeline(transaction=False)
    for i in range(3):
        pipe.set("order:k", f"v{i}")
        pipe.get("order:k")
    pipe.set("order:k", "ex", ex=100)
    pipe.get("order:k")
    pipe.delete("order:k")
    pipe.get("order:k")
    pipe.exists("order:k")
    pipe.set("order:big", large)
    pipe.get("order:big")
    pipe.get("order:none")
    assert pipe.execute() == [True, b"v0", True, b"v1", True, b"v2", True, b"ex", 1, None, 0,
                              True, large, None]
    client.close()

    c = NativeClient(d.socket, timeout=20)
    data = bytearray()
    for i in range(3):
        data += frame(OP["put"], put_body("pgo", b"k", b"n%d" % i), rid=10 * i)
        data += frame(OP["get"], key_body("pgo", b"k"), rid=10 * i + 1)
    data += frame(OP["delete"], key_body("pgo", b"k"), rid=40)
    data += frame(OP["get"], key_body("pgo", b"k"), rid=41)
    c.send(bytes(data))
    for i in range(3):
        assert c.reply()[1:3] == (STATUS["ok"], 10 * i)
        assert c.reply()[1:] == (STATUS["ok"], 10 * i + 1, b"n%d" % i)
    assert c.reply()[1:3] == (STATUS["ok"], 40)
    assert c.reply()[1:3] == (STATUS["miss"], 41)
    c.close()
    stats = d.stats()
    assert stats["daemon"]["protocol_errors"] == 0


def test_a_client_that_never_reads_is_bounded_and_loses_nothing(make_daemon):
    """40 MiB of replies requested without reading: the daemon stops reading
    that connection past its 16 MiB of queued replies, serves everyone else,
    and delivers every reply once the client reads."""
    d = make_daemon()
    value = os.urandom(1 << 20)
    slow = NativeClient(d.socket, timeout=20)
    slow.send(frame(OP["put"], put_body("pgo", b"mib", value), rid=1))
    assert slow.reply()[1] == STATUS["ok"]
    requests = b"".join(frame(OP["get"], key_body("pgo", b"mib"), rid=10 + i) for i in range(40))
    slow.send(requests)
    time.sleep(0.5)
    other = NativeClient(d.socket, timeout=10)

    def gets_served():
        return sum(row["count"] for row in other.stats()["requests"]
                   if row["op"] == "get" and row["ns"] == "pgo")

    # 16 MiB queued, one more reply being made, and what the sockets hold.
    assert 16 <= gets_served() <= 22
    assert other.get("pgo", b"mib") == (STATUS["ok"], value)
    for i in range(40):
        op, status, rid, body = slow.reply()
        assert (status, rid) == (STATUS["ok"], 10 + i) and body == value
    assert gets_served() == 41
    other.close()
    slow.close()
    assert d.proc.poll() is None


def test_pipelined_puts_are_stored_together_yet_seen_in_order(make_daemon):
    """PUTs that arrive in one read are stored together (one write-queue append
    per run of them), yet every later request sees them and the replies keep
    their order and ids: a key put twice then read, a value too large for the
    batch, an only-if-absent PUT of a key already there, more PUTs than one
    batch holds, then a restart (a clean shutdown writes what is queued)."""
    d = make_daemon()
    c = NativeClient(d.socket)
    big = os.urandom(40 << 10)
    plan = [
        (OP["put"], put_body("pgo", b"k", b"1"), 0, (STATUS["ok"], b"")),
        (OP["put"], put_body("pgo", b"k", b"2"), 0, (STATUS["ok"], b"")),
        (OP["get"], key_body("pgo", b"k"), 0, (STATUS["ok"], b"2")),
        (OP["put"], put_body("pgo", b"big", big), 0, (STATUS["ok"], b"")),
        (OP["put"], put_body("pgo", b"k", b"3"), 0, (STATUS["ok"], b"")),
        (OP["put"], put_body("pgo", b"k", b"nx"), 1, (STATUS["not_stored"], b"")),
        (OP["put"], put_body("pgo", b"k", b"4"), 0, (STATUS["ok"], b"")),
        (OP["get"], key_body("pgo", b"k"), 0, (STATUS["ok"], b"4")),
    ]
    plan += [(OP["put"], put_body("pgo", b"many-%03d" % i, b"m%d" % i), 0, (STATUS["ok"], b""))
             for i in range(150)]
    plan += [(OP["get"], key_body("pgo", b"many-%03d" % i), 0, (STATUS["ok"], b"m%d" % i))
             for i in range(0, 150, 7)]
    plan.append((OP["get"], key_body("pgo", b"big"), 0, (STATUS["ok"], big)))
    c.send(b"".join(frame(op, body, flags=flags, rid=1000 + i)
                    for i, (op, body, flags, _) in enumerate(plan)))
    for i, (op, _, _, expected) in enumerate(plan):
        rop, status, rid, body = c.reply()
        assert (rop, rid, (status, body)) == (op, 1000 + i, expected), i
    c.close()
    d.restart()
    c = NativeClient(d.socket)
    assert c.get("pgo", b"k") == (STATUS["ok"], b"4")
    assert c.get("pgo", b"many-149") == (STATUS["ok"], b"m149")
    assert c.get("pgo", b"big") == (STATUS["ok"], big)
    c.close()


def test_pipelines_on_many_connections_get_their_own_replies_even_when_half_closed(make_daemon):
    """Replies to a pipeline wait for the end of the loop's round and then go
    out with those of the other connections (docs/architecture.md, "Replies"):
    each connection still gets exactly its own replies, in order, including
    one that shuts down its writing side right after its pipeline (the kept
    replies go out before the daemon closes it)."""
    d = make_daemon()
    native, resp = [], []
    for i in range(12):
        c = NativeClient(d.socket)
        c.send(b"".join(frame(op, body, rid=10 * j + k)
                        for j in range(8)
                        for k, (op, body) in enumerate([
                            (OP["put"], put_body("pgo", b"n%02d-%d" % (i, j), b"v%02d-%d" % (i, j))),
                            (OP["get"], key_body("pgo", b"n%02d-%d" % (i, j)))])))
        native.append(c)
        r = RawConnection(d.socket)
        r.send(b"".join(b"*3\r\n$3\r\nSET\r\n$5\r\nr%02d-%d\r\n$5\r\nw%02d-%d\r\n"
                        b"*2\r\n$3\r\nGET\r\n$5\r\nr%02d-%d\r\n" % (i, j, i, j, i, j)
                        for j in range(8)))
        resp.append(r)
        if i % 2:
            c.sock.shutdown(socket.SHUT_WR)
            r.sock.shutdown(socket.SHUT_WR)
    for i, c in enumerate(native):
        for j in range(8):
            assert c.reply() == (OP["put"], STATUS["ok"], 10 * j, b""), (i, j)
            assert c.reply() == (OP["get"], STATUS["ok"], 10 * j + 1, b"v%02d-%d" % (i, j)), (i, j)
    for i, r in enumerate(resp):
        expected = b"".join(b"+OK\r\n$5\r\nw%02d-%d\r\n" % (i, j) for j in range(8))
        assert r.recv_exact(len(expected)) == expected, i
    for i in range(1, 12, 2):
        assert native[i].closed_by_peer() and resp[i].closed_by_peer(), i
    for c in native + resp:
        c.close()
    assert d.proc.poll() is None
