"""Pipelining and connection churn: many commands in one write, one command in
many writes, and Inductor's pattern of short-lived connections."""

from __future__ import annotations

import time

import redis
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
