"""Pipelining and connection churn: many commands in one write, one command in
many writes, and Inductor's pattern of short-lived connections."""

from __future__ import annotations

import array
import os
import signal
import socket
import time

import redis
from pt2harness import wait_for
from resp_helpers import RespConnection, encode


def test_thousand_commands_in_one_write_answered_in_order(daemon):
    c = RespConnection(daemon.socket)
    commands = []
    for i in range(250):
        commands += [encode("SET", f"p:{i}", f"v{i}"), encode("GET", f"p:{i}"),
                     encode("GET", f"p:missing:{i}"), encode("ECHO", f"e{i}")]
    c.send(b"".join(commands))
    for i in range(250):
        assert c.reply() == "OK"
        assert c.reply() == f"v{i}".encode()
        assert c.reply() is None
        assert c.reply() == f"e{i}".encode()
    assert c.command("DBSIZE") == 250
    c.close()


def test_pipelined_sets_are_stored_together_yet_seen_in_order(daemon):
    """SETs that arrive in one read are stored together (one write-queue append
    per run of them), yet every later command sees them and the replies keep
    their order: a key set twice then read, a value too large for the batch,
    a SET with an option, more SETs than one batch holds, and a restart
    (a clean shutdown writes what is queued)."""
    c = RespConnection(daemon.socket)
    big = "B" * 20000
    commands = [encode("SET", "k", "1"), encode("SET", "k", "2"), encode("GET", "k"),
                encode("SET", "big", big), encode("SET", "k", "3"),
                encode("SET", "nx", "n", "NX"), encode("SET", "k", "4"), encode("GET", "k")]
    commands += [encode("SET", f"many:{i}", f"m{i}") for i in range(200)]
    commands += [encode("GET", f"many:{i}") for i in range(0, 200, 7)]
    commands += [encode("GET", "big"), encode("GET", "nx")]
    c.send(b"".join(commands))
    assert [c.reply() for _ in range(3)] == ["OK", "OK", b"2"]
    assert [c.reply() for _ in range(5)] == ["OK", "OK", "OK", "OK", b"4"]
    assert [c.reply() for _ in range(200)] == ["OK"] * 200
    assert [c.reply() for _ in range(0, 200, 7)] == [f"m{i}".encode() for i in range(0, 200, 7)]
    assert c.reply() == big.encode()
    assert c.reply() == b"n"
    c.close()
    daemon.restart()
    c = RespConnection(daemon.socket)
    assert c.command("GET", "k") == b"4"
    assert c.command("GET", "many:199") == b"m199"
    assert c.command("GET", "big") == big.encode()
    c.close()


def test_pipelined_sets_beyond_the_write_queue_all_land(make_daemon):
    """4 MiB of pipelined SETs through a 1 MiB write queue: those the queue has
    no room for wait their turn (back-pressure); none is dropped or reordered."""
    daemon = make_daemon("--set", "disk.write_queue_size=1MiB")
    c = RespConnection(daemon.socket, timeout=60.0)
    values = {f"bp:{i}": (b"%05d" % i) * 2000 for i in range(400)}
    c.send(b"".join(encode("SET", key, value) for key, value in values.items()))
    assert [c.reply() for _ in values] == ["OK"] * len(values)
    c.close()
    daemon.restart()
    c = RespConnection(daemon.socket)
    for key, value in values.items():
        assert c.command("GET", key) == value
    c.close()


def test_pipelined_replies_before_a_close_still_arrive(daemon):
    """Replies due before a refused command go out before the connection closes."""
    c = RespConnection(daemon.socket)
    c.send(encode("SET", "a", "1") + encode("GET", "a") + encode("SET", "k" * 2000, "v") +
           encode("GET", "a"))
    assert c.reply() == "OK"
    assert c.reply() == b"1"
    assert c.closed_by_peer() and c.buf == b""
    c.close()


def test_command_split_into_one_byte_writes(daemon):
    c = RespConnection(daemon.socket)
    data = encode("SET", "split", "x" * 100) + encode("GET", "split") + b"PING\r\n"
    for byte in data:
        c.send(bytes([byte]))
        time.sleep(0.0005)
    assert c.reply() == "OK"
    assert c.reply() == b"x" * 100
    assert c.reply() == "PONG"
    c.close()


def test_inline_commands(daemon):
    c = RespConnection(daemon.socket)
    c.send(b"SET inline 'a b'\r\nGET inline\nPING\r\nEXISTS inline nope\r\n")
    assert [c.reply() for _ in range(4)] == ["OK", b"a b", "PONG", 1]
    c.close()


def test_transaction(daemon):
    c = RespConnection(daemon.socket)
    assert c.command("MULTI") == "OK"
    assert c.command("SET", "t", "1") == "QUEUED"
    assert c.command("GET", "t") == "QUEUED"
    assert c.command("EXEC") == ["OK", b"1"]
    assert c.command("MULTI") == "OK"
    assert str(c.command("NOPE")).startswith("ERR unknown command 'NOPE'")
    assert str(c.command("EXEC")).startswith("EXECABORT")
    assert c.command("MULTI") == "OK"
    assert c.command("SET", "t", "2") == "QUEUED"
    assert c.command("DISCARD") == "OK"
    assert c.command("GET", "t") == b"1"
    c.close()


def test_inductor_connection_churn(daemon):
    """500 x (connect, HELLO 3, CLIENT SETINFO x2, GET, close), as redis-py 8 does
    for every remote-cache lookup; all succeed, in bounded time."""
    before = daemon.stats()["daemon"]["connections_accepted"]
    start = time.monotonic()
    for i in range(500):
        r = redis.Redis(unix_socket_path=str(daemon.socket))
        assert r.get(f"pt2:fx-graph-v1::fchurn{i}:c1") is None
        r.close()
    elapsed = time.monotonic() - start
    assert elapsed < 30, f"{elapsed:.1f} s"
    after = daemon.stats()["daemon"]["connections_accepted"]
    assert after - before >= 500


def test_raw_handshake_churn(daemon):
    """The same pattern on raw sockets, checking every reply."""
    daemon_key = "pt2:fx-graph-v1::fraw:c1"
    redis.Redis(unix_socket_path=str(daemon.socket)).set(daemon_key, b"v", ex=3600)
    start = time.monotonic()
    for _ in range(500):
        c = RespConnection(daemon.socket)
        c.send(encode("HELLO", "3") + encode("CLIENT", "SETINFO", "LIB-NAME", "redis-py") +
               encode("CLIENT", "SETINFO", "LIB-VER", "8.1.0") + encode("GET", daemon_key))
        assert c.reply()[b"proto"] == 3
        assert c.reply() == "OK"
        assert c.reply() == "OK"
        assert c.reply() == b"v"
        c.close()
    assert time.monotonic() - start < 30


def _stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


def test_end_of_file_that_comes_with_the_last_request_ends_the_connection(daemon):
    """A client that sends its last request and shuts down writing (or closes)
    before the daemon reads raises one event for both. The read that takes the
    request reports the socket drained, so no further event comes for the
    end-of-file; the daemon's probe (docs/architecture.md, "Replies") must
    still see it: the reply arrives, then the connection ends, promptly. The
    daemon is stopped (SIGSTOP) while the client writes, so that both always
    arrive before it reads."""
    pid = daemon.proc.pid
    baseline = daemon.stats()["daemon"]["connections_active"]
    rounds = 6
    for i in range(rounds):
        c = RespConnection(daemon.socket, timeout=5.0)
        assert c.command("PING") == "PONG"  # the read after this one waits for an event
        time.sleep(0.05)
        os.kill(pid, signal.SIGSTOP)
        try:
            wait_for(lambda: _stopped(pid), timeout=5.0, what="the daemon stopped")
            c.send(encode("ECHO", f"last{i}"))
            if i % 2:
                c.sock.close()  # closed: nothing to read back
            else:
                c.sock.shutdown(socket.SHUT_WR)
        finally:
            os.kill(pid, signal.SIGCONT)
        if i % 2 == 0:
            start = time.monotonic()
            assert c.reply() == f"last{i}".encode()
            assert c.closed_by_peer(), "no end-of-file after the reply"
            assert time.monotonic() - start < 2.0
            c.close()
    wait_for(lambda: daemon.stats()["daemon"]["connections_active"] == baseline, timeout=5.0,
             what="the closed connections to end")


def test_bytes_no_read_can_take_end_the_connection(daemon):
    """A recv on a Unix socket stops short of bytes queued behind a message that
    carries descriptors (SCM_RIGHTS), and no event comes for them: a read that
    waits for one would wait for good, and its probe would wake every 10 ms.
    No client of ours passes descriptors; the connection is answered as far as
    the daemon could read, then closed and counted, and others are served."""
    pid = daemon.proc.pid
    before = daemon.stats()["daemon"]["protocol_errors"]
    c = RespConnection(daemon.socket, timeout=5.0)
    assert c.command("PING") == "PONG"
    time.sleep(0.05)  # the daemon waits for the next event
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_for(lambda: _stopped(pid), timeout=5.0, what="the daemon stopped")
        with open(os.devnull, "rb") as passed:
            c.sock.sendmsg([encode("ECHO", "first")],
                           [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [passed.fileno()]))])
        c.send(encode("ECHO", "second"))
    finally:
        os.kill(pid, signal.SIGCONT)
    start = time.monotonic()
    assert c.reply() == b"first"
    assert c.closed_by_peer(), ("the connection stayed open", c.buf)
    assert time.monotonic() - start < 2.0
    c.close()
    assert daemon.stats()["daemon"]["protocol_errors"] == before + 1
    assert RespConnection(daemon.socket).command("PING") == "PONG"
