"""The client never breaks the compiler: no daemon, a dying daemon, a hung or
misbehaving peer, fork() and threads."""

from __future__ import annotations

import gc
import logging
import os
import socket
import struct
import threading
import time
import tracemalloc

import pytest

import pt2cache
from pt2cache import CacheTimeoutError, ProtocolError, UnreachableError, UnsupportedError
from pt2harness import drain_disk_queue


def accepted(client) -> int:
    return client.stats()["daemon"]["connections_accepted"]


def hundred_calls(client) -> float:
    start = time.perf_counter()
    for i in range(100):
        assert client.get("fx-graph", f"k{i}") is None
    return time.perf_counter() - start


# ---------------------------------------------------------------- no daemon


@pytest.mark.parametrize("where", ["missing-file", "missing-dir", "refused"])
def test_absent_daemon_is_a_fast_miss(tmp_root, caplog, where):
    path = tmp_root / "nothing.sock"
    if where == "missing-dir":
        path = tmp_root / "no" / "such" / "dir.sock"
    elif where == "refused":
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(path))  # bound, never listening: ECONNREFUSED
        s.close()
    # The best of three fresh clients, so that a scheduler hiccup on a busy
    # machine does not fail the timing.
    elapsed = min(hundred_calls(pt2cache.Client(path)) for _ in range(3))
    client = pt2cache.Client(path)
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="pt2cache"):
        for i in range(100):
            assert client.get("fx-graph", f"k{i}") is None
        assert client.put("fx-graph", "k", b"v") is False
        assert client.exists("fx-graph", "k") is False
        assert client.delete("fx-graph", "k") is False
        assert client.stats() is None
        assert client.ping() is None
        assert client.clear("fx-graph") == 0
        assert client.list("fx-graph").entries == []
        assert client.get_many("fx-graph", ["a", "b"]) == [None, None]
        begin = client.bundle_begin("c", "b")
        assert begin.token is None and not begin.hit
        assert client.bundle_end(None) == 0
    assert elapsed < 0.05, f"100 calls took {elapsed * 1000:.1f} ms"
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert str(path) in warnings[0].getMessage()
    assert not client.connected


def test_absent_daemon_strict_raises(tmp_root):
    client = pt2cache.Client(tmp_root / "nothing.sock", strict=True)
    with pytest.raises(UnreachableError) as info:
        client.get("fx-graph", "k")
    assert "nothing.sock" in str(info.value)
    assert isinstance(info.value, ConnectionError)
    # Fail-fast during the back-off: still UnreachableError, no syscall.
    with pytest.raises(UnreachableError, match="not retrying"):
        client.get("fx-graph", "k")


def test_daemon_appearing_later_is_found_after_retry_after(make_daemon):
    d = make_daemon(start=False, sub="late")
    client = pt2cache.Client(d.socket, retry_after=0.2)
    assert client.get("pgo", "k") is None
    d.start()
    assert client.put("pgo", "k", b"v") is False  # still backing off
    time.sleep(0.25)
    assert client.put("pgo", "k", b"v") is True
    assert client.get("pgo", "k") == b"v"


# ---------------------------------------------------------------- dying daemon


def test_daemon_killed_mid_use_then_restarted(daemon):
    client = pt2cache.Client(daemon.socket, retry_after=0.3)
    assert client.put("fx-graph", "survivor", b"on disk")
    assert client.get("fx-graph", "survivor") == b"on disk"
    drain_disk_queue(client)  # on disk now: kill -9 loses only what is still queued
    daemon.kill()
    start = time.perf_counter()
    assert client.get("fx-graph", "survivor") is None  # finds the connection dead
    assert time.perf_counter() - start < 1
    # A collection of the whole test process's heap (it grows with the
    # suite) is not the client's cost: none may land in the timed loop.
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        for _ in range(99):
            assert client.get("fx-graph", "survivor") is None
        elapsed = time.perf_counter() - start
    finally:
        gc.enable()
    assert elapsed < 0.05
    assert client.put("fx-graph", "other", b"x") is False
    daemon.start()
    # Within retry_after: still a miss, without trying.
    assert client.get("fx-graph", "survivor") is None
    time.sleep(0.35)
    assert client.get("fx-graph", "survivor") == b"on disk"
    assert client.put("fx-graph", "other", b"x") is True


def test_daemon_restart_between_calls_is_transparent(daemon):
    """A reused connection that the daemon closed (restart, idle exit) costs
    one reconnect, not a miss: the request was not answered, so it is sent
    again on a new connection."""
    client = pt2cache.Client(daemon.socket, strict=True)
    client.put("fx-graph", "k", b"v")
    daemon.restart()
    assert client.get("fx-graph", "k") == b"v"
    daemon.restart()
    assert client.put("fx-graph", "k2", b"w") is True
    assert client.get_many("fx-graph", ["k", "k2"]) == [b"v", b"w"]


# ---------------------------------------------------------------- fork, threads


def test_fork_child_gets_its_own_connection(daemon):
    client = pt2cache.Client(daemon.socket, strict=True)
    client.put("pgo", "parent", b"p")
    before = accepted(client)
    pid = os.fork()
    if pid == 0:  # child: must not use (or break) the parent's socket
        code = 3
        try:
            ok = client.get("pgo", "parent") == b"p" and client.put("pgo", "child", b"c")
            code = 0 if ok else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    # The parent's connection still works and is still the same one.
    assert client.get("pgo", "child") == b"c"
    assert accepted(client) == before + 1


def test_fork_while_the_lock_is_held(daemon):
    """A child forked while another thread is inside a call must not
    deadlock on the inherited lock."""
    client = pt2cache.Client(daemon.socket, strict=True)
    client.put("pgo", "k", b"v")
    client._lock.acquire()  # as if another thread were mid-call
    try:
        pid = os.fork()
        if pid == 0:
            code = 3
            try:
                code = 0 if client.get("pgo", "k") == b"v" else 1
            finally:
                os._exit(code)
    finally:
        client._lock.release()
    deadline = time.monotonic() + 10
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child deadlocked")
        time.sleep(0.01)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def test_threads_share_one_connection(daemon):
    client = pt2cache.Client(daemon.socket, strict=True)
    before = accepted(client)
    errors = []

    def work(t):
        try:
            for i in range(100):
                value = f"{t}-{i}".encode() * (i + 1)
                assert client.put("autotune", f"t{t}-k{i}", value)
                assert client.get("autotune", f"t{t}-k{i}") == value
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert accepted(client) == before


# ---------------------------------------------------------------- bad peers


class FakePeer:
    """A Unix-socket server thread that answers each connection with
    `respond(conn)`."""

    def __init__(self, path, respond):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(str(path))
        self.sock.listen(8)
        self.respond = respond
        self.connections = 0
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self.handle, args=(conn,), daemon=True).start()

    def handle(self, conn):
        try:
            self.respond(conn)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self):
        self.sock.close()


def read_frame(conn):
    head = b""
    while len(head) < 12:
        chunk = conn.recv(12 - len(head))
        if not chunk:
            raise OSError("closed")
        head += chunk
    magic, op, flags, rid, length = struct.unpack("<2sBBII", head)
    body = b""
    while len(body) < length:
        body += conn.recv(length - len(body))
    return op, flags, rid, body


def hello_reply(rid, version=1):
    name = b"fake"
    body = struct.pack("<HIQH", version, 1, 1 << 20, 1024) + bytes([len(name)]) + name
    return struct.pack("<2sBBII", b"\xf2P", 1, 0, rid, len(body)) + body


def test_hung_peer_times_out_then_backs_off(tmp_root):
    path = tmp_root / "hung.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.listen(8)  # accepts into the backlog, never answers
    try:
        client = pt2cache.Client(path, connect_timeout=0.2, retry_after=5)
        start = time.perf_counter()
        assert client.get("pgo", "k") is None
        first = time.perf_counter() - start
        assert 0.15 < first < 2
        start = time.perf_counter()
        assert client.get("pgo", "k") is None
        assert time.perf_counter() - start < 0.01
        strict = pt2cache.Client(path, connect_timeout=0.2, strict=True)
        with pytest.raises(CacheTimeoutError):
            strict.ping()
    finally:
        listener.close()


def test_slow_reply_times_out(tmp_root):
    def respond(conn):
        _, _, rid, _ = read_frame(conn)
        conn.sendall(hello_reply(rid))
        read_frame(conn)
        time.sleep(1.0)  # never answers in time
        conn.close()

    peer = FakePeer(tmp_root / "slow.sock", respond)
    try:
        client = pt2cache.Client(tmp_root / "slow.sock", timeout=0.2, strict=True)
        start = time.perf_counter()
        with pytest.raises(CacheTimeoutError):
            client.get("pgo", "k")
        assert time.perf_counter() - start < 0.9
        assert not client.connected
    finally:
        peer.close()


@pytest.mark.parametrize("reply,match", [
    (lambda rid: b"GARBAGE!" + bytes(4), "bad magic"),
    (lambda rid: struct.pack("<2sBBII", b"\xf2P", 3, 0, rid + 1, 0), "crossed"),
    (lambda rid: struct.pack("<2sBBII", b"\xf2P", 3, 0x07, rid, 0), "unknown status"),
    (lambda rid: struct.pack("<2sBBII", b"\xf2P", 3, 0, rid, 0xFFFFFFFF), "exceeds"),
])
def test_misbehaving_peer_is_a_protocol_error(tmp_root, reply, match):
    def respond(conn):
        _, _, rid, _ = read_frame(conn)
        conn.sendall(hello_reply(rid))
        _, _, rid, _ = read_frame(conn)
        conn.sendall(reply(rid))
        time.sleep(0.2)
        conn.close()

    path = tmp_root / "bad.sock"
    peer = FakePeer(path, respond)
    try:
        with pytest.raises(ProtocolError, match=match):
            pt2cache.Client(path, strict=True).get("pgo", "k")
        assert pt2cache.Client(path).get("pgo", "k") is None
    finally:
        peer.close()


def test_other_protocol_version_is_named(tmp_root):
    def respond(conn):
        _, _, rid, _ = read_frame(conn)
        conn.sendall(hello_reply(rid, version=2))
        time.sleep(0.2)
        conn.close()

    path = tmp_root / "v2.sock"
    peer = FakePeer(path, respond)
    try:
        with pytest.raises(ProtocolError, match="speaks protocol version 2, this client speaks "
                                                "version 1"):
            pt2cache.Client(path, strict=True).ping()
    finally:
        peer.close()


def test_server_error_status_is_a_miss_and_keeps_the_connection(tmp_root):
    """A non-closing error (STORAGE_ERROR) is a miss; the connection stays."""

    def respond(conn):
        _, _, rid, _ = read_frame(conn)
        conn.sendall(hello_reply(rid))
        while True:
            op, _, rid, _ = read_frame(conn)
            msg = b"disk on fire"
            body = struct.pack("<H", len(msg)) + msg
            conn.sendall(struct.pack("<2sBBII", b"\xf2P", op, 0x17, rid, len(body)) + body)

    path = tmp_root / "err.sock"
    peer = FakePeer(path, respond)
    try:
        strict = pt2cache.Client(path, strict=True)
        with pytest.raises(pt2cache.ServerError, match="STORAGE_ERROR: disk on fire"):
            strict.get("pgo", "k")
        lenient = pt2cache.Client(path)
        assert lenient.get("pgo", "k") is None
        assert lenient.put("pgo", "k", b"v") is False
        assert lenient.connected
        assert peer.connections == 2
    finally:
        peer.close()


def test_daemon_without_bundle_capability(tmp_root):
    """A daemon that does not announce BUNDLE (an older pt2cached): no
    bundle frame is ever sent; the lenient client drops tokens (plain gets and
    puts), the strict one raises UnsupportedError."""
    store = {}
    ops = []

    def respond(conn):
        _, _, rid, _ = read_frame(conn)
        conn.sendall(hello_reply(rid))  # capabilities: TTL only
        while True:
            op, flags, rid, body = read_frame(conn)
            ops.append((op, flags))
            n = body[0]
            ns, rest = body[1:1 + n], body[1 + n:]
            (klen,) = struct.unpack_from("<H", rest)
            key = ns + b"/" + rest[2:2 + klen]
            status, reply = 1, b""
            if op == 4:  # PUT
                store[key] = rest[2 + klen + 8:]
                status = 0
            elif op == 3 and key in store:  # GET
                status, reply = 0, store[key]
            conn.sendall(struct.pack("<2sBBII", b"\xf2P", op, status, rid, len(reply)) + reply)

    path = tmp_root / "old.sock"
    peer = FakePeer(path, respond)
    try:
        lenient = pt2cache.Client(path)
        assert lenient.put("pgo", "k", b"v", bundle_token=7) is True
        assert lenient.get("pgo", "k", bundle_token=7) == b"v"
        assert not lenient.server_info.supports_bundles
        begin = lenient.bundle_begin("code", "backend")
        assert begin.token is None and not begin.ok and not begin.hit
        assert lenient.bundle_end(begin.token) == 0
        assert lenient.bundle_end(7) == 0
        strict = pt2cache.Client(path, strict=True)
        with pytest.raises(UnsupportedError, match="BUNDLE"):
            strict.get("pgo", "k", bundle_token=7)
        with pytest.raises(UnsupportedError):
            strict.bundle_begin("code", "backend")
        assert strict.get("pgo", "k") == b"v"
        assert ops == [(4, 0), (3, 0), (3, 0)]  # no bundle op, no BUNDLE flag
    finally:
        peer.close()


# ---------------------------------------------------------------- interrupted requests


class Interrupting:
    """The client's socket, but the next sendall (or recv_into) passes half
    of its bytes and then raises KeyboardInterrupt, as a Ctrl-C or a signal
    handler's exception would land mid-request."""

    def __init__(self, sock, on):
        self._sock = sock
        self._on = on

    def __getattr__(self, name):
        return getattr(self._sock, name)

    def sendall(self, data):
        if self._on != "send":
            return self._sock.sendall(data)
        self._on = None
        self._sock.sendall(memoryview(data)[:len(data) // 2])
        raise KeyboardInterrupt

    def recv_into(self, view, *args):
        if self._on != "recv":
            return self._sock.recv_into(view, *args)
        self._on = None
        count = self._sock.recv_into(view[:max(1, len(view) // 2)], *args)
        assert count > 0
        raise KeyboardInterrupt


def test_interrupted_put_stores_nothing_and_drops_the_connection(daemon):
    """Left open, the connection would carry the next request's frame as the
    rest of the interrupted value: the daemon stored key-a with key-b's frame
    in it and served it."""
    client = pt2cache.Client(daemon.socket, strict=True)
    assert client.put("pgo", "warm", b"x")
    client._sock = Interrupting(client._sock, "send")
    with pytest.raises(KeyboardInterrupt):
        client.put("pgo", "key-a", b"A" * (1 << 20))
    assert not client.connected
    assert client.put("pgo", "key-b", b"B" * (1 << 20))
    assert client.get("pgo", "key-b") == b"B" * (1 << 20)
    assert client.get("pgo", "key-a") is None


def test_interrupted_get_leaves_nothing_for_the_next_reply(daemon):
    client = pt2cache.Client(daemon.socket, strict=True)
    assert client.put("pgo", "big", bytes(range(256)) * 4096)
    assert client.put("pgo", "small", b"small value")
    client._sock = Interrupting(client._sock, "recv")
    with pytest.raises(KeyboardInterrupt):
        client.get("pgo", "big")
    assert not client.connected
    assert client.get("pgo", "small") == b"small value"


def test_error_inside_get_many_reads_the_rest_of_its_replies(tmp_root):
    """An error reply in a pipelined get_many ends the call once the other
    replies are read: the connection's next request gets its own reply."""

    def respond(conn):
        _, _, rid, _ = read_frame(conn)
        conn.sendall(hello_reply(rid))
        while True:
            op, _, rid, body = read_frame(conn)
            if body.endswith(b"bad"):
                msg = b"disk on fire"
                reply, status = struct.pack("<H", len(msg)) + msg, 0x17
            else:
                reply, status = b"value of " + body[-1:], 0
            conn.sendall(struct.pack("<2sBBII", b"\xf2P", op, status, rid, len(reply)) + reply)

    path = tmp_root / "many.sock"
    peer = FakePeer(path, respond)
    try:
        client = pt2cache.Client(path, strict=True)
        with pytest.raises(pt2cache.ServerError, match="disk on fire"):
            client.get_many("pgo", ["bad", "a", "b", "c"])
        assert client.connected
        assert client.get("pgo", "x") == b"value of x"
        assert peer.connections == 1
    finally:
        peer.close()


def test_reply_claiming_gigabytes_costs_what_arrived(tmp_root):
    """A peer that announces a huge max_value, then a 4 GiB reply of which 1000
    bytes come: the client neither allocates the 4 GiB nor overstays its
    timeout."""

    def respond(conn):
        _, _, rid, _ = read_frame(conn)
        name = b"fake"
        body = struct.pack("<HIQH", 1, 1, 1 << 62, 1024) + bytes([len(name)]) + name
        conn.sendall(struct.pack("<2sBBII", b"\xf2P", 1, 0, rid, len(body)) + body)
        _, _, rid, _ = read_frame(conn)
        conn.sendall(struct.pack("<2sBBII", b"\xf2P", 3, 0, rid, 0xFFFFFFFF) + bytes(1000))
        time.sleep(3)

    path = tmp_root / "huge.sock"
    peer = FakePeer(path, respond)
    try:
        client = pt2cache.Client(path, timeout=0.5, strict=True)
        tracemalloc.start()
        try:
            start = time.perf_counter()
            with pytest.raises(CacheTimeoutError):
                client.get("pgo", "k")
            elapsed = time.perf_counter() - start
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert elapsed < 1.5
        assert peak < 100 << 20
    finally:
        peer.close()


def test_a_closed_stdout_never_becomes_the_connection(daemon, client):
    """In a process that closed its stdout, the client's socket took
    descriptor 1, and print() wrote into the connection: text that is a PUT
    frame ran in the daemon and overwrote another key."""
    import subprocess
    import sys
    client.put("fx-graph", "victim", b"original")
    script = (
        "import os, struct, sys, pt2cache\n"
        "os.close(1)\n"
        "c = pt2cache.Client(sys.argv[1], strict=True)\n"
        "assert c.get('fx-graph', 'victim') == b'original'\n"
        "assert c._sock.fileno() > 2, c._sock.fileno()\n"
        "ns, key, value = b'fx-graph', b'victim', b'POISONED'\n"
        "body = bytes([len(ns)]) + ns + struct.pack('<H', len(key)) + key + bytes(8) + value\n"
        "frame = b'\\xf2\\x50\\x04\\x00' + struct.pack('<II', 9, len(body)) + body\n"
        "try:\n"
        "    sys.stdout.buffer.write(frame)\n"
        "    sys.stdout.flush()\n"
        "except OSError:\n"
        "    pass\n"
        "assert c.get('fx-graph', 'victim') == b'original'\n")
    done = subprocess.run([sys.executable, "-c", script, str(daemon.socket)],
                          capture_output=False, stderr=subprocess.PIPE, timeout=60)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert client.get("fx-graph", "victim") == b"original"
