"""Hostile and malformed RESP, one case per test, against one daemon whose
other clients (a redis-py connection held open throughout) must not notice.
Where Redis has wording for the error, it is compared with a real
redis-server given the same bytes."""

from __future__ import annotations

import os
import socket
import time

import pytest
import redis
from pt2harness import Daemon, RedisServer, TempDir, wait_for
from resp_helpers import RespConnection, RespError, encode, vm_rss_kib


@pytest.fixture(scope="module")
def server():
    root = TempDir()
    d = Daemon(root.path).start()
    healthy = redis.Redis(unix_socket_path=str(d.socket), socket_timeout=10)
    healthy.set("healthy", b"before")
    (root.path / "redis").mkdir()
    real = RedisServer(root.path / "redis").start()
    yield d, healthy, real
    healthy.close()
    real.stop()
    d.kill()
    root.cleanup()


@pytest.fixture(autouse=True)
def other_clients_unaffected(server):
    d, healthy, _ = server
    stamp = os.urandom(8)
    healthy.set("healthy", stamp)
    yield
    assert d.proc.poll() is None, d.log()
    # The same connection, opened before the case, still works...
    assert healthy.get("healthy") == stamp
    assert healthy.set("healthy", b"after") is True
    # ...and so do new ones.
    assert redis.Redis(unix_socket_path=str(d.socket)).get("healthy") == b"after"


def send_and_read(sock, data: bytes):
    """Sends data; returns (the reply or None, closed by the daemon)."""
    c = RespConnection(sock)
    c.send(data)
    try:
        reply = c.reply()
    except EOFError:
        reply = None
    closed = c.closed_by_peer(timeout=5)
    c.close()
    return reply, closed


CLOSING_CASES = {
    "huge multibulk count": (b"*3000000000\r\n", "ERR Protocol error: invalid multibulk length"),
    "non-numeric multibulk count": (b"*abc\r\n", "ERR Protocol error: invalid multibulk length"),
    "non-numeric bulk length": (b"*1\r\n$abc\r\n", "ERR Protocol error: invalid bulk length"),
    "negative bulk length": (b"*1\r\n$-3\r\n", "ERR Protocol error: invalid bulk length"),
    "huge bulk length": (b"*1\r\n$2000000000\r\n", "ERR Protocol error: invalid bulk length"),
    "not a bulk string": (b"*1\r\n+PING\r\n", "ERR Protocol error: expected '$', got '+'"),
    "inline line over 64 KiB": (b"A" * (70 * 1024), "ERR Protocol error: too big inline request"),
    "unbalanced quotes": (b'SET "k v\r\n', "ERR Protocol error: unbalanced quotes in request"),
}


@pytest.mark.parametrize("case", CLOSING_CASES)
def test_protocol_error_replies_then_closes(server, case):
    d, _, real = server
    data, expected = CLOSING_CASES[case]
    reply, closed = send_and_read(d.socket, data)
    assert reply == RespError(expected)
    assert closed
    # The wording is Redis's.
    assert send_and_read(real.socket, data) == (RespError(expected), True)


def test_bulk_without_crlf_closes(server):
    d, _, _ = server
    reply, closed = send_and_read(d.socket, b"*2\r\n$3\r\nGETxx$1\r\nk\r\n")
    assert isinstance(reply, RespError) and str(reply).startswith("ERR Protocol error")
    assert closed


def test_garbage_bytes(server):
    d, _, _ = server
    rng = os.urandom(4096).replace(b"\n", b" ").replace(b'"', b" ").replace(b"'", b" ")
    c = RespConnection(d.socket)
    # Not the native magic (0xF2) nor '*': an inline command of nonsense.
    c.send(b"\x01" + rng[:2000] + b"\r\n")
    reply = c.reply()
    assert isinstance(reply, RespError) and str(reply).startswith("ERR unknown command")
    # The connection survives an unknown command, as with Redis.
    assert c.command("PING") == "PONG"
    c.close()


def test_huge_claimed_lengths_do_not_allocate(server):
    """A client that announces big bulk strings and sends nothing costs nothing."""
    d, _, _ = server
    before = vm_rss_kib(d.proc.pid)
    holders = []
    for _ in range(2):
        c = RespConnection(d.socket)
        # Within the protocol limit, so the daemon waits for the bytes.
        c.send(b"*2\r\n$3\r\nSET\r\n$300000000\r\nabc")
        holders.append(c)
    reply, closed = send_and_read(d.socket, b"*1\r\n$2000000000\r\n")
    assert reply == RespError("ERR Protocol error: invalid bulk length") and closed
    time.sleep(0.3)
    grown_mib = (vm_rss_kib(d.proc.pid) - before) / 1024
    for c in holders:
        c.close()
    assert grown_mib < 64, f"RSS grew {grown_mib:.0f} MiB"


def test_partial_command_then_disconnect(server):
    d, _, _ = server
    for prefix in (b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$10\r\nabc", b"*2\r\n$3\r\nGE", b"GET k"):
        c = RespConnection(d.socket)
        c.send(prefix)
        c.close()


def test_empty_and_zero_length_commands(server):
    d, _, _ = server
    c = RespConnection(d.socket)
    c.send(b"\r\n\r\n*0\r\n*-1\r\n")
    assert c.command("PING") == "PONG"
    assert c.command("ECHO", "") == b""
    # An empty key has no native form: GET misses, SET closes (never -ERR).
    assert c.command("GET", "") is None
    c.send(b"*3\r\n$3\r\nSET\r\n$0\r\n\r\n$1\r\nv\r\n")
    assert c.closed_by_peer() and c.buf == b""
    c.close()


def test_wrong_arity_and_options_keep_the_connection(server):
    d, _, _ = server
    c = RespConnection(d.socket)
    assert c.command("GET") == RespError("ERR wrong number of arguments for 'get' command")
    assert c.command("SET", "k") == RespError("ERR wrong number of arguments for 'set' command")
    assert c.command("SET", "k", "v", "PX", "-5") == RespError(
        "ERR invalid expire time in 'set' command")
    assert c.command("PING") == "PONG"
    c.close()


def test_dbsize_with_arguments_is_an_arity_error_as_in_redis(server):
    d, _, real = server
    for target in (d.socket, real.socket):
        c = RespConnection(target)
        assert c.command("DBSIZE", "x") == RespError(
            "ERR wrong number of arguments for 'dbsize' command"), target
        assert isinstance(c.command("DBSIZE"), int)
        c.close()


def test_errors_quoting_arguments_cannot_inject_replies(server):
    """An error that quotes a client's argument holding CR LF ended its line
    early, and the rest read as a reply of its own: the client's replies were
    then off by one. As in Redis, CR and LF become spaces."""
    d, _, real = server
    sent = (encode("FOO", "a\r\n+INJECTED") + encode("HELLO", "3", "x\r\n:42") +
            encode("CLIENT", "x\r\n+SUB") + encode("GET", "k\r\n") + encode("PING"))
    for target in (d.socket, real.socket):
        c = RespConnection(target)
        c.send(sent)
        replies = [c.reply() for _ in range(5)]
        assert [type(r) for r in replies] == [RespError] * 3 + [type(None), str], replies
        assert replies[0].args[0].startswith("ERR unknown command 'FOO'"), replies
        assert "'a  +INJECTED'" in replies[0].args[0], replies
        assert "'x  :42'" in replies[1].args[0] and "'x  +SUB'" in replies[2].args[0], replies
        assert replies[4] == "PONG"
        c.send(encode("PING"))
        assert c.reply() == "PONG" and c.buf == b"", (target, c.buf)
        c.close()


def test_a_transaction_holds_no_more_than_one_command_may(make_daemon):
    """MULTI then 64 KiB SETs without EXEC: the queued copies grew without
    bound (182 MB on one connection with a 4 MiB budget; helper review).
    Past max_value_size + 1 MiB the transaction is refused, counted and
    closed; a smaller one still runs."""
    d = make_daemon("--set", "daemon.max_value_size=1MiB")
    c = RespConnection(d.socket)
    assert c.command("MULTI") == "OK"
    value = b"v" * 65536
    replies = []
    for i in range(40):  # 2.5 MiB queued if nothing stopped it
        c.send(b"*3\r\n$3\r\nSET\r\n$2\r\nk%d\r\n$65536\r\n" % (i % 10) + value + b"\r\n")
        replies.append(c.reply())
        if isinstance(replies[-1], RespError):
            break
    refused = [r for r in replies if isinstance(r, RespError)]
    assert len(refused) == 1 and "MULTI transaction longer" in str(refused[0]), replies[-3:]
    assert 25 <= replies.index(refused[0]) <= 33  # about 2 MiB queued, not more
    assert c.closed_by_peer()
    assert d.stats()["daemon"]["protocol_errors"] == 1
    small = redis.Redis(unix_socket_path=str(d.socket))
    with small.pipeline(transaction=True) as pipe:
        assert pipe.set("a", b"1").get("a").execute() == [True, b"1"]


def test_queued_transactions_take_from_the_in_flight_budget(make_daemon):
    """Each connection may queue max_value_size + 1 MiB in MULTI; 100 of them
    held 836 MB outside max_inflight_bytes (helper review). The queued copies
    now take from it, and a transaction that finds no room waits for it."""
    # While a SET is queued its input buffer still holds it too (6 MiB): two
    # queued 6 MiB SETs and a third one's input fit 20 MiB, a third copy not.
    d = make_daemon("--set", "daemon.max_inflight_bytes=20MiB",
                    "--set", "daemon.max_value_size=8MiB")
    value = b"q" * (6 << 20)
    held = []
    for name in ("a", "b"):
        c = RespConnection(d.socket)
        assert c.command("MULTI") == "OK"
        assert c.command("SET", "tx-" + name, value) == "QUEUED"
        held.append(c)
    assert d.stats()["daemon"]["inflight_bytes"] >= 12 << 20
    waiting = RespConnection(d.socket)
    assert waiting.command("MULTI") == "OK"
    waiting.send(encode("SET", "tx-c", value))
    waiting.sock.settimeout(0.5)
    with pytest.raises(socket.timeout):
        waiting.reply()  # no room: QUEUED waits
    assert held[0].command("EXEC") == ["OK"]  # gives its share back
    waiting.sock.settimeout(10)
    assert waiting.reply() == "QUEUED"
    assert held[1].command("DISCARD") == "OK"
    assert waiting.command("EXEC") == ["OK"]
    wait_for(lambda: d.stats()["daemon"]["inflight_bytes"] == 0, timeout=5,
             what="every lease to be given back")
    assert d.stats()["daemon"]["inflight_refused"] == 0
    for c in held + [waiting]:
        c.close()


def test_a_queued_command_that_can_never_fit_is_refused_at_once(make_daemon):
    """MULTI then a 5 MiB SET against an 8 MiB budget: the queued copy and
    the command's own input (held until the command is queued) can never fit
    together. It waited 10 s, and, first in line for room, held up every
    other large request meanwhile (a review: a 2 MiB SET took 9.6 s). It is
    refused at once now, and the other SET goes through."""
    d = make_daemon("--set", "daemon.max_inflight_bytes=8MiB")
    queuing = RespConnection(d.socket)
    assert queuing.command("MULTI") == "OK"
    started = time.monotonic()
    queuing.send(encode("SET", "tx-large", b"q" * (5 << 20)))
    queuing.sock.settimeout(5)
    try:
        assert queuing.sock.recv(100) == b""  # closed, as a SET that cannot be served
    except ConnectionResetError:
        pass
    other = RespConnection(d.socket)
    assert other.command("SET", "plain", b"p" * (2 << 20)) == "OK"
    assert time.monotonic() - started < 3
    assert d.stats()["daemon"]["inflight_refused"] == 1


def test_a_transaction_whose_replies_are_never_read_gives_its_budget_back(make_daemon):
    """EXEC runs its commands while sending their replies; one whose client
    stops reading waits for it, and the commands still queued held their part
    of max_inflight_bytes for as long as the connection stayed open (helper
    review). Like a client that stops sending, it must read 64 KiB of replies
    in every 10 s: otherwise it is closed and counted, and the budget comes
    back."""
    d = make_daemon("--set", "daemon.max_value_size=8MiB")
    big = b"g" * (1 << 20)
    assert RespConnection(d.socket).command("SET", "tx-big", big) == "OK"
    c = socket.socket(socket.AF_UNIX)
    c.connect(str(d.socket))
    c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    # 24 MiB of GET replies, more than the 16 MiB a connection may queue,
    # then a 4 MiB SET that stays queued (held) while EXEC waits.
    c.sendall(encode("MULTI") + encode("GET", "tx-big") * 24 +
              encode("SET", "tx-after", b"s" * (4 << 20)) + encode("EXEC"))
    wait_for(lambda: d.stats()["daemon"]["inflight_bytes"] >= 4 << 20, timeout=10,
             what="EXEC to wait with the SET still queued")
    started = time.monotonic()
    wait_for(lambda: d.stats()["daemon"]["stalled_requests"] == 1, timeout=20,
             what="the transaction to be closed as stalled")
    assert 8 < time.monotonic() - started < 15
    wait_for(lambda: d.stats()["daemon"]["inflight_bytes"] == 0, timeout=5,
             what="the queued SET's budget to come back")
    assert RespConnection(d.socket).command("GET", "tx-after") is None  # never ran
    c.close()


def test_a_transaction_read_slowly_is_not_closed(make_daemon):
    """The same transaction read by a client that takes 64 KiB every half
    second runs to its end."""
    d = make_daemon("--set", "daemon.max_value_size=8MiB")
    big = b"g" * (1 << 20)
    assert RespConnection(d.socket).command("SET", "tx-big", big) == "OK"
    c = RespConnection(d.socket, timeout=30)
    c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    c.send(encode("MULTI") + encode("GET", "tx-big") * 18 +
           encode("SET", "tx-after", b"s" * (2 << 20)) + encode("EXEC"))
    wait_for(lambda: d.stats()["daemon"]["inflight_bytes"] >= 2 << 20, timeout=10,
             what="EXEC to wait with the SET still queued")
    # Slowly for 12 s (past the 10 s rule), then at full speed.
    deadline = time.monotonic() + 12
    while time.monotonic() < deadline:
        c.buf += c.sock.recv(64 << 10)
        time.sleep(0.5)
    assert c.reply() == "OK"
    assert [c.reply() for _ in range(19)] == ["QUEUED"] * 19
    assert c.reply() == [big] * 18 + ["OK"]
    assert d.stats()["daemon"]["stalled_requests"] == 0
    c.close()


def test_client_names_are_checked_as_redis_does(server):
    d, _, real = server
    for target in (d.socket, real.socket):
        c = redis.Redis(unix_socket_path=str(target))
        for bad in ("with space", "new\nline", "\x01"):
            with pytest.raises(redis.ResponseError, match="cannot contain spaces"):
                c.client_setname(bad)
        assert c.client_setname("fine-name") is True
        assert c.client_getname() in ("fine-name", b"fine-name")
    # Redis sets no length limit; every connection here keeps its name.
    c = redis.Redis(unix_socket_path=str(d.socket))
    with pytest.raises(redis.ResponseError, match="at most 4096 bytes"):
        c.client_setname("n" * 4097)
    refused = RespConnection(d.socket).command("HELLO", "3", "SETNAME", "a b")
    assert isinstance(refused, RespError) and "cannot contain" in str(refused)


def test_a_client_that_never_reads_gives_its_input_budget_back(make_daemon):
    """A 30 MB request whose replies are never read kept its 30 MB of
    max_inflight_bytes while the daemon waited for the client to read, and
    another client's 40 MB SET was refused after 10 s (helper review; then
    with a 30 MB ECHO, which is now refused: see the test below)."""
    d = make_daemon("--set", "daemon.max_inflight_bytes=64MiB")
    idle = socket.socket(socket.AF_UNIX)
    idle.connect(str(d.socket))
    idle.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    payload = b"e" * 30_000_000
    idle.sendall(encode("SET", "idle-big", payload) + encode("GET", "idle-big") * 2)
    healthy = redis.Redis(unix_socket_path=str(d.socket), socket_timeout=30)
    wait_for(lambda: healthy.execute_command("DBSIZE") is not None
             and d.stats()["daemon"]["inflight_bytes"] < 1_000_000,
             timeout=10, what="the idle client's budget to come back")
    started = time.monotonic()
    assert healthy.set("big", b"s" * 40_000_000) is True
    assert time.monotonic() - started < 5
    assert d.stats()["daemon"]["inflight_refused"] == 0
    idle.close()


def test_a_long_command_costs_nothing_once_answered(make_daemon):
    """A command of 1,048,576 arguments left its 16 MiB argument vector to its
    connection for good: 100 idle connections held 1.6 GB (helper review)."""
    d = make_daemon()
    many = b"*1048576\r\n$4\r\nPING\r\n" + b"$0\r\n\r\n" * 1048575
    idle = []
    try:
        c = RespConnection(d.socket)
        c.send(many)  # the first one warms the allocator
        assert "wrong number of arguments" in str(c.reply())
        idle.append(c)
        before = vm_rss_kib(d.proc.pid)
        for _ in range(12):
            c = RespConnection(d.socket)
            c.send(many)
            assert "wrong number of arguments" in str(c.reply())
            idle.append(c)
        grown_mib = (vm_rss_kib(d.proc.pid) - before) / 1024
        assert grown_mib < 64, f"12 idle connections hold {grown_mib:.0f} MiB more"
    finally:
        for c in idle:
            c.close()


def test_long_arguments_are_neither_copied_nor_quoted_whole(server):
    d, _, _ = server
    long = "x" * 1_000_000
    c = RespConnection(d.socket)
    for command, wording in ((("HELLO", "3", long), "Syntax error in HELLO option"),
                             (("CLIENT", long), "unknown subcommand"),
                             ((long, "a"), "unknown command"),
                             (("SET", "k", "v", long), "ERR syntax error")):
        reply = c.command(*command)
        assert isinstance(reply, RespError) and wording in str(reply), str(reply)[:200]
        assert len(str(reply)) < 300
    assert c.command("SET", "k", "v", "px", "100") == "OK"
    assert c.command("SET", "k", "v", "Ex", "100", "nX") is None  # not stored: k exists
    c.close()


def test_echo_and_ping_messages_over_64_kib_are_refused(server):
    """The reply is a copy outside max_inflight_bytes: 100 connections that
    each sent three 8 MB ECHOs and never read held 2.4 GB (helper review)."""
    d, _, _ = server
    c = RespConnection(d.socket)
    limit = 64 << 10
    assert c.command("ECHO", "e" * limit) == b"e" * limit
    assert c.command("PING", "p" * limit) == b"p" * limit
    for command in ("ECHO", "PING"):
        reply = c.command(command, "x" * (limit + 1))
        assert reply == RespError(
            f"ERR {command} message longer than {limit} bytes (the native PING's limit)")
    assert c.command("PING") == "PONG"
    c.close()


def test_multi_key_commands_share_the_worker_pool(make_daemon):
    """EXISTS of 300,000 keys ran as one task on the worker pool: eight such
    commands held a bystander's one-key EXISTS for 1.9 s (helper review).
    They run in slices now, and the bystander's task goes between them."""
    d = make_daemon()
    keys = b"".join(b"$8\r\n%08d\r\n" % i for i in range(300_000))
    command = b"*300001\r\n$6\r\nEXISTS\r\n" + keys
    attackers = [RespConnection(d.socket) for _ in range(8)]
    bystander = redis.Redis(unix_socket_path=str(d.socket), socket_timeout=30)
    bystander.set("mine", b"1")
    for attacker in attackers:
        attacker.send(command)
    slowest = 0.0
    for _ in range(20):
        started = time.monotonic()
        assert bystander.exists("mine") == 1
        slowest = max(slowest, time.monotonic() - started)
        time.sleep(0.02)
    for attacker in attackers:
        assert attacker.reply() == 0
    assert slowest < 0.6, f"a one-key EXISTS waited {slowest:.2f} s"


def both(server):
    """A fresh raw connection to pt2cached and one to the real redis-server."""
    d, _, real = server
    return [("pt2cached", RespConnection(d.socket)), ("redis-server", RespConnection(real.socket))]


def test_a_transaction_with_a_malformed_command_runs_nothing_as_in_redis(server):
    """MULTI queued a GET without its key and EXEC ran the rest of the
    transaction; Redis refuses the command when it is queued and EXEC then
    runs nothing (differential review)."""
    for target, c in both(server):
        key = "tx-arity-" + target
        assert c.command("MULTI") == "OK"
        assert c.command("GET") == RespError("ERR wrong number of arguments for 'get' command")
        assert c.command("SET", key, "1") == "QUEUED"
        exec_reply = c.command("EXEC")
        assert isinstance(exec_reply, RespError) and str(exec_reply).startswith("EXECABORT"), \
            (target, exec_reply)
        assert c.command("GET", key) is None, target
        # MULTI, EXEC, DISCARD and RESET take no arguments.
        assert c.command("MULTI", "x") == RespError(
            "ERR wrong number of arguments for 'multi' command"), target
        assert c.command("EXEC") == RespError("ERR EXEC without MULTI"), target
        assert c.command("DISCARD", "x") == RespError(
            "ERR wrong number of arguments for 'discard' command"), target
        c.close()


def test_a_failed_hello_auth_fails_hello_on_an_authenticated_connection(server):
    for target, c in both(server):
        assert c.command("AUTH", "default", "anything") == "OK", target
        reply = c.command("HELLO", "3", "AUTH", "someone", "wrong")
        assert isinstance(reply, RespError) and str(reply).startswith("WRONGPASS"), (target, reply)
        c.send(encode("GET", "no-such-key-hello"))
        assert c.raw_reply_line() == b"$-1", target  # still RESP2
        c.close()


def test_set_options_and_keepttl_as_in_redis(server):
    for target, c in both(server):
        key = "keepttl-" + target
        for options in (("KEEPTTL", "EX", "10"), ("EX", "10", "PX", "100"),
                        ("PX", "100", "KEEPTTL"), ("NX", "XX")):
            assert c.command("SET", key, "v", *options) == RespError("ERR syntax error"), \
                (target, options)
        assert c.command("SET", key, "v", "EX", "0", "EX", "1000") == "OK", target
        # KEEPTTL keeps the stored value's expiry: the new value goes with it.
        assert c.command("SET", key, "v", "PX", "300") == "OK", target
        assert c.command("SET", key, "v2", "KEEPTTL") == "OK", target
        assert c.command("GET", key) == b"v2", target
        time.sleep(0.6)
        assert c.command("GET", key) is None, target
        # Without a stored value there is nothing to keep.
        assert c.command("SET", key, "v3", "KEEPTTL") == "OK", target
        time.sleep(0.1)
        assert c.command("GET", key) == b"v3", target
        c.close()
