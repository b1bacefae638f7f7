"""Hostile native-protocol input, one case per test, against one daemon that must
keep serving a healthy connection throughout."""

from __future__ import annotations

import os
import socket
import struct

import pytest
from integ_helpers import (PUT_OVERHEAD, NativeClient, drain_disk_queue, entry_files, error_reply,
                           put_body, temp_files, vm_rss_kib, list_body)
from pt2harness import (HEADER, MAGIC, OP, STATUS, Daemon, RawConnection, TempDir, frame,
                        hello_frame, key_body, wait_for)

MAX_VALUE = 1 << 20  # --set daemon.max_value_size=1MiB


@pytest.fixture(scope="module")
def server():
    root = TempDir()
    d = Daemon(root.path, "--set", "daemon.max_value_size=1MiB").start()
    healthy = NativeClient(d.socket)
    yield d, healthy
    healthy.close()
    d.kill()
    root.cleanup()


class Case:
    def __init__(self, daemon, healthy):
        self.daemon = daemon
        self.healthy = healthy
        self.errors_before = self.protocol_errors()
        self.opened: list[RawConnection] = []

    def protocol_errors(self) -> int:
        return self.healthy.stats()["daemon"]["protocol_errors"]

    def new_errors(self) -> int:
        return self.protocol_errors() - self.errors_before

    def greeted(self) -> NativeClient:
        conn = NativeClient(self.daemon.socket)
        self.opened.append(conn)
        return conn

    def raw(self) -> RawConnection:
        conn = RawConnection(self.daemon.socket)
        self.opened.append(conn)
        return conn

    def wait_for_only_healthy(self):
        wait_for(lambda: self.healthy.stats()["daemon"]["connections_active"] == 1,
                 timeout=5, what="the bad connection to be cleaned up")


@pytest.fixture
def case(server):
    daemon, healthy = server
    c = Case(daemon, healthy)
    yield c
    for conn in c.opened:  # a failed case may have left its connection open
        conn.close()
    # Whatever the case did, the daemon is up and the healthy connection works.
    assert daemon.proc.poll() is None, f"pt2cached died:\n{daemon.log()[-3000:]}"
    healthy.ping(b"still healthy")
    status, value = healthy.get("pgo", b"canary")
    assert (status, value) == (STATUS["ok"], b"canary value")
    fresh = NativeClient(daemon.socket)
    fresh.ping()
    fresh.close()


@pytest.fixture(autouse=True, scope="module")
def canary(server):
    _, healthy = server
    assert healthy.put("pgo", b"canary", b"canary value") == STATUS["ok"]


def expect_error_and_close(conn, op, status, rid, message=None, contains=()):
    got_op, got_status, got_id, got_message = error_reply(conn)
    assert (got_op, got_status, got_id) == (op, status, rid), got_message
    if message is not None:
        assert got_message == message
    for part in contains:
        assert part in got_message, got_message
    assert conn.closed_by_peer(), "the connection stayed open after a closing error"
    conn.close()
    return got_message


# ------------------------------------------------------------ truncation


def test_truncated_header_then_close(case):
    conn = case.greeted()
    conn.send(frame(OP["get"], key_body("pgo", b"canary"), rid=5)[:7])
    conn.close()
    case.wait_for_only_healthy()


def test_truncated_body_then_close(case):
    conn = case.greeted()
    conn.send(frame(OP["put"], put_body("pgo", b"torn", b"x" * 100), rid=5)[:30])
    conn.close()
    case.wait_for_only_healthy()
    assert case.healthy.exists("pgo", b"torn") == STATUS["miss"]


def test_stalled_partial_frame_does_not_block_others(case):
    stalled = case.greeted()
    stalled.send(frame(OP["get"], key_body("pgo", b"canary"), rid=5)[:14])
    for _ in range(20):
        case.healthy.ping(b"not blocked")
    # The rest arrives late and is still answered.
    stalled.send(frame(OP["get"], key_body("pgo", b"canary"), rid=5)[14:])
    op, status, rid, body = stalled.reply()
    assert (op, status, rid, body) == (OP["get"], STATUS["ok"], 5, b"canary value")
    stalled.close()
    assert case.new_errors() == 0


# -------------------------------------------------------- oversized lengths


@pytest.mark.parametrize("greet", [True, False], ids=["after-hello", "first-frame"])
def test_put_claiming_4gib_is_refused_without_allocating(case, greet):
    pid = case.daemon.proc.pid
    rss_before = vm_rss_kib(pid)
    conn = case.greeted() if greet else case.raw()
    conn.send(HEADER.pack(MAGIC, OP["put"], 0, 77, 0xFFFFFFFF))
    expect_error_and_close(conn, OP["put"], STATUS["value_too_large"], 77,
                           contains=("4294967295", f"max_value {MAX_VALUE}"))
    assert case.new_errors() == 1
    assert vm_rss_kib(pid) - rss_before < 50 * 1024


def test_get_claiming_1mib_is_malformed(case):
    pid = case.daemon.proc.pid
    rss_before = vm_rss_kib(pid)
    conn = case.greeted()
    conn.send(HEADER.pack(MAGIC, OP["get"], 0, 78, 1 << 20))
    expect_error_and_close(conn, OP["get"], STATUS["malformed"], 78,
                           message="GET body of 1048576 bytes exceeds the limit of 4096 bytes")
    assert case.new_errors() == 1
    assert vm_rss_kib(pid) - rss_before < 50 * 1024


def test_ping_over_64kib_is_malformed(case):
    conn = case.greeted()
    conn.send(HEADER.pack(MAGIC, OP["ping"], 0, 79, (64 << 10) + 1))
    expect_error_and_close(conn, OP["ping"], STATUS["malformed"], 79, contains=("65537",))
    assert case.new_errors() == 1


def test_ping_of_64kib_is_echoed(case):
    conn = case.greeted()
    payload = os.urandom(64 << 10)
    conn.send(frame(OP["ping"], payload, rid=80))
    assert conn.reply() == (OP["ping"], STATUS["ok"], 80, payload)
    conn.close()
    assert case.new_errors() == 0


def test_many_oversized_claims_do_not_grow_memory(case):
    pid = case.daemon.proc.pid
    rss_before = vm_rss_kib(pid)
    for i in range(50):
        conn = case.greeted()
        conn.send(HEADER.pack(MAGIC, OP["put"], 0, i, PUT_OVERHEAD + MAX_VALUE))  # just fits
        conn.send(b"\x03pgo")  # ... but never arrives
        conn.close()
    case.wait_for_only_healthy()
    assert vm_rss_kib(pid) - rss_before < 50 * 1024


# ------------------------------------------------------------ framing errors


@pytest.mark.parametrize("op", [0x00, 0x0F, 0x1F, 0x22, 0x7F, 0xFF])
def test_unknown_opcode(case, op):
    conn = case.greeted()
    conn.send(frame(op, b"", rid=81))
    expect_error_and_close(conn, op, STATUS["unknown_op"], 81,
                           message=f"unknown op 0x{op:02x}")
    assert case.new_errors() == 1


@pytest.mark.parametrize("op", [0x22, 0x2F])
def test_reserved_bundle_op_is_unknown(case, op):
    conn = case.greeted()
    conn.send(frame(op, b"", rid=82))
    _, status, rid, msg = error_reply(conn)
    assert (status, rid) == (STATUS["unknown_op"], 82), msg
    assert conn.closed_by_peer()
    assert case.new_errors() == 1


def test_bad_first_magic_byte_after_hello(case):
    conn = case.greeted()
    conn.send(b"XP" + frame(OP["get"], key_body("pgo", b"canary"), rid=83)[2:])
    expect_error_and_close(conn, 0, STATUS["malformed"], 0, contains=("magic",))
    assert case.new_errors() == 1


def test_bad_second_magic_byte_after_hello(case):
    conn = case.greeted()
    conn.send(b"\xf2Q" + frame(OP["get"], key_body("pgo", b"canary"), rid=84)[2:])
    expect_error_and_close(conn, 0, STATUS["malformed"], 0,
                           message="bad frame magic 0xf251 (expected 0xf250)")
    assert case.new_errors() == 1


def test_bad_magic_still_closes(case):
    # The part of the bad-magic contract that holds today: MALFORMED, then close.
    conn = case.greeted()
    conn.send(b"\xf2Q" + frame(OP["get"], key_body("pgo", b"canary"), rid=84)[2:])
    _, status, _, message = error_reply(conn)
    assert status == STATUS["malformed"]
    assert message == "bad frame magic 0xf251 (expected 0xf250)"
    assert conn.closed_by_peer()
    assert case.new_errors() == 1


def test_garbage_after_hello(case):
    conn = case.greeted()
    conn.send(b"\x00\x13\x37 this is not a frame \xff\xfe\xfd" * 4)
    expect_error_and_close(conn, 0, STATUS["malformed"], 0, contains=("magic",))
    assert case.new_errors() == 1


def test_garbage_as_first_bytes(case):
    # Not 0xF2: the RESP side gets it. It must answer an error or close; never crash.
    conn = case.raw()
    conn.send(b"\x00\x01\x02\x03garbage\xff\r\n*-5\r\n$-9\r\n" * 3)
    conn.sock.settimeout(1)
    data = b""
    try:
        while len(data) < 4096:
            chunk = conn.sock.recv(4096)
            if not chunk:
                break
            data += chunk
    except (socket.timeout, ConnectionResetError):
        pass
    conn.close()
    assert data.startswith(b"-ERR unknown command"), data[:200]


def test_random_garbage_frames(case):
    rng = __import__("random").Random(1234)
    for i in range(20):
        conn = case.greeted()
        junk = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))
        conn.send(b"\xf2P" + junk)
        try:
            conn.sock.settimeout(0.5)
            conn.sock.recv(65536)
        except (socket.timeout, ConnectionResetError):
            pass
        conn.close()
    case.wait_for_only_healthy()


# --------------------------------------------------------------- handshake


def test_hello_version_2(case):
    conn = case.raw()
    conn.send(hello_frame(version=2, rid=85))
    expect_error_and_close(conn, OP["hello"], STATUS["version_mismatch"], 85,
                           message="client speaks protocol version 2, pt2cached speaks version 1")
    assert case.new_errors() == 1


def test_malformed_hello(case):
    conn = case.raw()
    conn.send(frame(OP["hello"], struct.pack("<HIB", 1, 1, 10) + b"short", rid=86))
    expect_error_and_close(conn, OP["hello"], STATUS["malformed"], 86,
                           message="malformed HELLO body")
    assert case.new_errors() == 1


@pytest.mark.parametrize("op,body", [
    (OP["ping"], b"hi"),
    (OP["get"], key_body("pgo", b"canary")),
    (OP["stats"], b""),
], ids=["PING", "GET", "STATS"])
def test_first_frame_not_hello(case, op, body):
    conn = case.raw()
    conn.send(frame(op, body, rid=87))
    name = {OP["ping"]: "PING", OP["get"]: "GET", OP["stats"]: "STATS"}[op]
    expect_error_and_close(conn, op, STATUS["handshake_required"], 87,
                           message=f"the first request must be HELLO, not {name}")
    assert case.new_errors() == 1


# -------------------------------------------------------------- arguments


@pytest.mark.parametrize("op", ["get", "put", "exists", "delete"])
def test_key_of_1025_bytes(case, op):
    conn = case.greeted()
    body = key_body("pgo", b"k" * 1025)
    if op == "put":
        body += struct.pack("<Q", 0) + b"value"
    conn.send(frame(OP[op], body, rid=88))
    expect_error_and_close(conn, OP[op], STATUS["key_too_long"], 88,
                           message="key of 1025 bytes: keys are 1 to 1024 bytes")
    assert case.new_errors() == 1


def test_empty_key(case):
    conn = case.greeted()
    conn.send(frame(OP["get"], key_body("pgo", b""), rid=89))
    expect_error_and_close(conn, OP["get"], STATUS["key_too_long"], 89,
                           message="key of 0 bytes: keys are 1 to 1024 bytes")
    assert case.new_errors() == 1


def test_key_of_1024_bytes_works(case):
    conn = case.greeted()
    key = bytes(range(256)) * 4
    assert conn.put("pgo", key, b"long key") == STATUS["ok"]
    assert conn.get("pgo", key) == (STATUS["ok"], b"long key")
    assert conn.delete("pgo", key) == STATUS["ok"]
    conn.close()
    assert case.new_errors() == 0


def test_value_over_max_value_size(case):
    conn = case.greeted()
    conn.send(frame(OP["put"], put_body("pgo", b"too-big", b"v" * (MAX_VALUE + 1)), rid=90))
    expect_error_and_close(conn, OP["put"], STATUS["value_too_large"], 90,
                           message=f"value of {MAX_VALUE + 1} bytes exceeds max_value {MAX_VALUE}")
    assert case.new_errors() == 1
    assert case.healthy.exists("pgo", b"too-big") == STATUS["miss"]


def test_value_of_exactly_max_value_size(case):
    conn = case.greeted()
    value = os.urandom(MAX_VALUE)
    assert conn.put("pgo", b"just-fits", value) == STATUS["ok"]
    assert conn.get("pgo", b"just-fits") == (STATUS["ok"], value)
    conn.close()
    assert case.new_errors() == 0


@pytest.mark.parametrize("op", ["get", "put", "exists", "delete", "list", "clear"])
@pytest.mark.parametrize("ns", ["Bad_NS", "a" * 33, "", "dot.dot", "slash/ns"])
def test_bad_namespace(case, op, ns):
    conn = case.greeted()
    nsb = ns.encode()
    if op == "list":
        body = list_body(ns, b"", 10)
    elif op == "clear":
        body = struct.pack("<B", len(nsb)) + nsb
    else:
        body = key_body(ns, b"key")
        if op == "put":
            body += struct.pack("<Q", 0) + b"value"
    conn.send(frame(OP[op], body, rid=91))
    expect_error_and_close(
        conn, OP[op], STATUS["bad_namespace"], 91,
        message=f'invalid namespace "{ns}": expected 1 to 32 characters of [a-z0-9-]')
    assert case.new_errors() == 1


@pytest.mark.parametrize("name,op,body", [
    ("get-short", OP["get"], b"\x03pg"),
    ("get-trailing", OP["get"], key_body("pgo", b"k") + b"extra"),
    ("put-no-ttl", OP["put"], key_body("pgo", b"k") + b"\x00\x00"),
    ("key-len-beyond-body", OP["exists"], b"\x03pgo\x10\x00abc"),
    ("list-short", OP["list"], b"\x03pgo\x00"),
    ("clear-trailing", OP["clear"], b"\x03pgoX"),
    ("hello-again-trailing", OP["hello"], struct.pack("<HIB", 1, 1, 1) + b"ab"),
])
def test_malformed_bodies(case, name, op, body):
    conn = case.greeted()
    conn.send(frame(op, body, rid=92))
    _, status, rid, message = error_reply(conn)
    assert (status, rid) == (STATUS["malformed"], 92), message
    assert message.startswith("malformed "), message
    assert conn.closed_by_peer()
    assert case.new_errors() == 1


def test_stats_with_body_is_malformed(case):
    conn = case.greeted()
    conn.send(frame(OP["stats"], b"unexpected", rid=93))
    _, status, rid, _ = conn.reply()
    assert (status, rid) == (STATUS["malformed"], 93)


@pytest.mark.parametrize("ttl_ms", [2**63 - 1, 2**63, 2**64 - 1])
def test_huge_ttl_does_not_expire_at_once(case, ttl_ms):
    conn = case.greeted()
    key = b"huge-ttl-%d" % ttl_ms
    assert conn.put("pgo", key, b"long-lived", ttl_ms=ttl_ms) == STATUS["ok"]
    assert conn.get("pgo", key) == (STATUS["ok"], b"long-lived")
    conn.close()


def test_large_ttl_within_range(case):
    conn = case.greeted()
    ttl_ms = 10**15  # ~31,700 years: still in range
    assert conn.put("pgo", b"big-ttl", b"long-lived", ttl_ms=ttl_ms) == STATUS["ok"]
    assert conn.get("pgo", b"big-ttl") == (STATUS["ok"], b"long-lived")
    conn.close()


def test_invalid_list_cursor_is_a_storage_error_not_a_close(case):
    conn = case.greeted()
    status, body = conn.request(OP["list"], list_body("pgo", b"../../../etc/passwd", 10))
    assert status == STATUS["storage_error"]
    conn.ping()  # still open
    conn.close()
    assert case.new_errors() == 0


def test_pipelined_requests_before_an_error_are_answered(case):
    conn = case.greeted()
    conn.send(frame(OP["ping"], b"one", rid=1) +
              frame(OP["get"], key_body("pgo", b"canary"), rid=2) +
              frame(OP["exists"], key_body("pgo", b"absent"), rid=3) +
              frame(0x55, b"", rid=4) +
              frame(OP["ping"], b"never", rid=5))
    assert conn.reply() == (OP["ping"], STATUS["ok"], 1, b"one")
    assert conn.reply() == (OP["get"], STATUS["ok"], 2, b"canary value")
    assert conn.reply() == (OP["exists"], STATUS["miss"], 3, b"")
    expect_error_and_close(conn, 0x55, STATUS["unknown_op"], 4)
    assert case.new_errors() == 1


# ------------------------------------------------------- protocol edges


def test_hello_response_fields(case):
    conn = case.raw()
    name = b"edge-client"
    conn.send(frame(OP["hello"], struct.pack("<HIB", 1, 0xFFFFFFFF, len(name)) + name, rid=95))
    op, status, rid, body = conn.reply()
    assert (op, status, rid) == (OP["hello"], STATUS["ok"], 95)
    version, caps, max_value, max_key, name_len = struct.unpack_from("<HIQHB", body)
    server_name = body[17:17 + name_len]
    assert len(body) == 17 + name_len
    assert (version, max_value, max_key) == (1, MAX_VALUE, 1024)
    assert caps == 15, "TTL, BUNDLE, HASH_FILES and CXX_LOOKUP are offered: the intersection"
    assert server_name.startswith(b"pt2cached ")
    conn.close()


def test_unknown_bundle_token_keeps_the_connection(case):
    conn = case.greeted()
    token = struct.pack("<Q", 42)
    status, body = conn.request(OP["put"], token + put_body("pgo", b"bundled", b"v"), flags=0x80)
    assert status == STATUS["unknown_token"]
    status, body = conn.request(OP["get"], token + key_body("pgo", b"bundled"), flags=0x80)
    assert status == STATUS["unknown_token"]
    conn.ping()
    assert conn.exists("pgo", b"bundled") == STATUS["miss"]
    conn.close()
    assert case.new_errors() == 0


def test_list_limits_are_clamped(case):
    conn = case.greeted()
    conn.put_many("list-edge", {b"k%d" % i: b"v" for i in range(5)})
    cursor, page = conn.list_page("list-edge", b"", 0)  # 0 counts as 1
    assert len(page) == 1 and cursor != b""
    cursor, page = conn.list_page("list-edge", b"", 0xFFFFFFFF)
    assert len(page) == 5 and cursor == b""
    assert sorted(k for k, _, _ in page) == [b"k%d" % i for i in range(5)]
    assert all(size == 1 for _, size, _ in page)
    conn.close()


def test_client_that_leaves_before_reading_a_big_reply(case):
    conn = case.greeted()
    value = os.urandom(MAX_VALUE)
    assert conn.put("pgo", b"big-reply", value) == STATUS["ok"]
    conn.close()
    for i in range(20):
        c = case.greeted()
        c.send(frame(OP["get"], key_body("pgo", b"big-reply"), rid=i) * 4)
        c.sock.close()  # unread: the daemon's writes fail with EPIPE or ECONNRESET
    case.wait_for_only_healthy()
    assert case.healthy.get("pgo", b"big-reply") == (STATUS["ok"], value)
    assert case.new_errors() == 0


def test_many_idle_connections(case):
    conns = [case.greeted() for _ in range(200)]
    case.healthy.ping()
    assert case.healthy.stats()["daemon"]["connections_active"] == 201
    conns[-1].ping()
    for c in conns:
        c.close()
    case.wait_for_only_healthy()


def test_requests_counted_exactly(case):
    conn = case.greeted()
    before = conn.stats()["daemon"]["requests"]
    conn.ping()
    conn.get("pgo", b"canary")
    conn.exists("pgo", b"nothing")
    after = conn.stats()["daemon"]["requests"]
    assert after - before == 4  # three requests and this STATS
    conn.close()


# ------------------------------------------------------ mid-PUT disconnect


def test_disconnect_mid_put_leaves_nothing(make_daemon):
    d = make_daemon()  # default max_value: a 4 MiB PUT is legal
    observer = NativeClient(d.socket)
    value = os.urandom(4 << 20)
    data = frame(OP["put"], put_body("fx-graph", b"half", value), rid=94)
    for cut in (12, 12 + 100, len(data) // 2, len(data) - 1):
        conn = NativeClient(d.socket)
        conn.send(data[:cut])
        conn.close()
        wait_for(lambda: observer.stats()["daemon"]["connections_active"] == 1, timeout=5,
                 what="the torn PUT's connection to close")
        assert observer.exists("fx-graph", b"half") == STATUS["miss"], cut
        assert observer.get("fx-graph", b"half") == (STATUS["miss"], b""), cut
        assert temp_files(d.cache_dir) == [], cut
        assert entry_files(d.cache_dir, "fx-graph") == [], cut
    # The whole frame on another connection is stored.
    writer = NativeClient(d.socket)
    writer.send(data)
    assert writer.reply() == (OP["put"], STATUS["ok"], 94, b"")
    assert observer.get("fx-graph", b"half") == (STATUS["ok"], value)
    drain_disk_queue(observer)
    assert len(entry_files(d.cache_dir, "fx-graph")) == 1
    assert observer.stats()["daemon"]["protocol_errors"] == 0


def test_client_bytes_cannot_forge_or_flood_log_lines(make_daemon):
    """A namespace holding a newline and a made-up log line went to the log
    as it was (a forged line with its own timestamp), and every bad frame
    logged a line: 3,000 in 0.6 s (helper review). The bytes are escaped, and
    bad frames log a line a second at most while the counter has them all."""
    d = make_daemon()
    forged = "x\n2026-11-28 00:00:00.000 [daemon] critical: forged"
    for _ in range(200):
        conn = NativeClient(d.socket)
        conn.send(frame(OP["get"], key_body(forged, b"key"), rid=7))
        expect_error_and_close(conn, OP["get"], STATUS["bad_namespace"], 7)
    healthy = NativeClient(d.socket)
    assert healthy.stats()["daemon"]["protocol_errors"] == 200
    log = d.log()
    assert "\n2026-11-28 00:00:00.000 [daemon] criti" not in log  # the 40 bytes quoted
    assert r'invalid namespace "x\n2026-11-28' in log
    lines = [line for line in log.splitlines() if "invalid namespace" in line]
    assert 1 <= len(lines) <= 20, len(lines)
