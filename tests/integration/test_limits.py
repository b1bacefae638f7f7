"""Limits on untrusted input (docs/architecture.md, "Limits on untrusted input"):
length fields at their edges in both protocols and the connection limits.
Every case is answered with an error or a close within a second or two, and a
healthy client keeps being served. Memory that follows the bytes that arrive
and the daemon-wide in-flight budget: test_inflight_budget.py."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from integ_helpers import PUT_OVERHEAD, NativeClient, vm_rss_kib
from pt2harness import HEADER, MAGIC, OP, STATUS, Daemon, RawConnection, TempDir, wait_for

MAX_VALUE = 1 << 20
SMALL_BODY = 4096
PING_BODY = 64 << 10


def answered_quickly(conn: RawConnection, limit_s: float = 1.0):
    """The reply to what `conn` sent, or None when the daemon closed it; either
    within `limit_s`."""
    started = time.monotonic()
    conn.sock.settimeout(limit_s)
    try:
        head = conn.recv_exact(12)
    except (ConnectionError, EOFError, AssertionError):
        head = b""
    elapsed = time.monotonic() - started
    assert elapsed < limit_s, f"no answer within {limit_s} s"
    if len(head) < 12:
        return None
    _, op, status, rid, length = HEADER.unpack(head)
    return op, status, rid, conn.recv_exact(length) if length else b""


@pytest.fixture(scope="module")
def small():
    root = TempDir()
    d = Daemon(root.path, "--set", "daemon.max_value_size=1MiB").start()
    healthy = NativeClient(d.socket)
    yield d, healthy
    healthy.close()
    d.kill()
    root.cleanup()


LENGTH_CASES = [
    # op, length, what the daemon must do: "wait" (a legal length whose body
    # has not arrived: no answer, connection open), or the error status.
    ("get", 0, "malformed"),
    ("get", SMALL_BODY, "wait"),
    ("get", SMALL_BODY + 1, "malformed"),
    ("get", 0xFFFFFFFF, "malformed"),
    ("ping", PING_BODY, "wait"),
    ("ping", PING_BODY + 1, "malformed"),
    ("ping", 0xFFFFFFFF, "malformed"),
    ("put", 0, "malformed"),
    ("put", PUT_OVERHEAD + MAX_VALUE, "wait"),
    ("put", PUT_OVERHEAD + MAX_VALUE + 1, "value_too_large"),
    ("put", 0xFFFFFFFF, "value_too_large"),
    ("list", 0xFFFFFFFF, "malformed"),
    ("stats", SMALL_BODY + 1, "malformed"),
]


@pytest.mark.parametrize("op,length,expect", LENGTH_CASES,
                         ids=[f"{o}-{n}" for o, n, _ in LENGTH_CASES])
def test_native_length_field_edges(small, op, length, expect):
    d, healthy = small
    conn = NativeClient(d.socket)
    conn.send(HEADER.pack(MAGIC, OP[op], 0, 41, length))
    if expect == "wait":
        conn.sock.settimeout(0.3)
        with pytest.raises(socket.timeout):
            conn.sock.recv(1)
        healthy.ping(b"served meanwhile")
        conn.close()
    else:
        got = answered_quickly(conn)
        assert got is not None, "closed without an error frame"
        assert got[1] == STATUS[expect], got
        conn.close()
    assert d.proc.poll() is None
    healthy.ping(b"still healthy")


RESP_CASES = [
    (b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$" + str(1 << 63).encode() + b"\r\n", "invalid bulk length"),
    (b"*2\r\n$3\r\nGET\r\n$9223372036854775807\r\n", "invalid bulk length"),
    (b"*2147483648\r\n", "invalid multibulk length"),
    (b"*9223372036854775807\r\n", "invalid multibulk length"),
    (b"*-5\r\n*1\r\n$4\r\nPING\r\n", None),  # an empty command, then PING: answered
    (b"*1\r\n$-1\r\n", "invalid bulk length"),
]


@pytest.mark.parametrize("data,error", RESP_CASES, ids=range(len(RESP_CASES)))
def test_resp_length_edges(small, data, error):
    d, healthy = small
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(str(d.socket))
    sock.settimeout(1.0)
    started = time.monotonic()
    sock.sendall(data)
    reply = b""
    while not reply.endswith(b"\r\n"):
        chunk = sock.recv(4096)
        if not chunk:
            break
        reply += chunk
    assert time.monotonic() - started < 1.0
    if error is None:
        assert reply == b"+PONG\r\n"
    else:
        assert reply.startswith(b"-ERR Protocol error: " + error.encode()), reply
    sock.close()
    assert d.proc.poll() is None
    healthy.ping(b"still healthy")


def test_resp_value_at_the_limit_is_stored(small):
    d, healthy = small
    value = os.urandom(MAX_VALUE)
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(str(d.socket))
    key = b"pt2:{autotune}::edge:c1"
    sock.sendall(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n" % (len(key), key, len(value)) +
                 value + b"\r\n")
    sock.settimeout(10)
    assert sock.recv(5) == b"+OK\r\n"
    sock.close()


def test_resp_command_over_the_query_buffer_limit_is_refused(small):
    d, healthy = small
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(str(d.socket))
    sock.settimeout(5)
    count = 400_000  # 2.8 MB: over max_value_size (1 MiB) + 1 MiB
    header = b"*%d\r\n$6\r\nEXISTS\r\n" % (count + 1)
    try:
        sock.sendall(header + b"$1\r\nx\r\n" * count)
    except BrokenPipeError:
        pass  # closed before all of it was sent
    reply = sock.recv(200)
    assert reply.startswith(b"-ERR Protocol error: command longer than max_value_size"), reply
    sock.close()
    healthy.ping(b"still healthy")


def test_resp_command_of_a_million_arguments_is_parsed_a_few_times(make_daemon):
    """Before, each read re-parsed the whole command from the start: a command
    of 1 M arguments held its connection for about 6 s (quadratic). Now the
    parser's lower bound defers parsing until enough has arrived."""
    d = make_daemon()
    healthy = NativeClient(d.socket)
    count = 1_000_000
    # An unknown command: what is measured is the parsing, not the command.
    data = b"*%d\r\n$6\r\nNOSUCH\r\n" % (count + 1) + b"$1\r\nx\r\n" * count
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(str(d.socket))
    sock.settimeout(10)
    started = time.monotonic()
    view = memoryview(data)
    for at in range(0, len(data), 64 << 10):  # in pieces, as a network delivers it
        sock.sendall(view[at:at + (64 << 10)])
    reply = sock.recv(64)
    elapsed = time.monotonic() - started
    assert reply.startswith(b"-ERR unknown command 'NOSUCH'"), reply
    assert elapsed < 3.0, f"{elapsed:.2f} s for a 7 MB command"
    sock.close()
    healthy.ping(b"still healthy")


# ------------------------------------------------------- connection limits


OPENER = r"""
import socket, sys, time
path, count = sys.argv[1], int(sys.argv[2])
conns = []
for _ in range(count):
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    conns.append(s)
print("open", flush=True)
sys.stdin.read()  # hold them until told to stop
"""


def resp_ping(path) -> bytes:
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(str(path))
    sock.settimeout(5)
    try:
        sock.sendall(b"PING\r\n")
    except BrokenPipeError:
        pass  # refused: the refusal line is still there to read
    reply = sock.recv(100)
    sock.close()
    return reply


def test_connection_limits(make_daemon):
    d = make_daemon("--set", "daemon.max_connections=30",
                    "--set", "daemon.max_connections_per_process=20")
    # One process takes its 20; its 21st is refused with Redis's wording...
    mine = [RawConnection(d.socket) for _ in range(19)]
    mine.append(NativeClient(d.socket))
    assert resp_ping(d.socket) == b"-ERR max number of clients per process reached\r\n"
    # ... while another process is still served, up to the total.
    other = subprocess.Popen([sys.executable, "-c", OPENER, str(d.socket), "9"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert other.stdout.readline() == b"open\n"
    pinger = subprocess.run([sys.executable, "-c",
                             "import socket,sys; s=socket.socket(socket.AF_UNIX); "
                             "s.connect(sys.argv[1]); s.sendall(b'PING\\r\\n'); "
                             "print(s.recv(100))", str(d.socket)],
                            capture_output=True, timeout=10, check=True)
    assert pinger.stdout.strip() == b"b'+PONG\\r\\n'"
    # 20 + 9 held: the 30th (from a third process) fits, then the total is full.
    full = subprocess.Popen([sys.executable, "-c", OPENER, str(d.socket), "1"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert full.stdout.readline() == b"open\n"
    refused = subprocess.run([sys.executable, "-c",
                              "import socket,sys; s=socket.socket(socket.AF_UNIX); "
                              "s.connect(sys.argv[1]); print(s.recv(100))", str(d.socket)],
                             capture_output=True, timeout=10, check=True)
    assert refused.stdout.strip() == b"b'-ERR max number of clients reached\\r\\n'"
    # The native CLI reports the refusal in words.
    cli = d.cli("ping")
    assert cli.returncode != 0
    assert b"refused the connection: ERR max number of clients reached" in cli.stderr, cli
    # So does the Python client.
    source = Path(os.environ.get("PT2CACHE_SOURCE") or Path(__file__).resolve().parents[2])
    py = subprocess.run(
        [sys.executable, "-c",
         "import sys, pt2cache\n"
         "try:\n"
         "    pt2cache.Client(sys.argv[1], strict=True).ping()\n"
         "except pt2cache.UnreachableError as e:\n"
         "    print(e)\n", str(d.socket)],
        capture_output=True, timeout=20, check=True,
        env={**os.environ, "PYTHONPATH": str(source / "client" / "python" / "src")})
    assert b"refused the connection: ERR max number of clients reached" in py.stdout, py
    mine[-1].ping(b"the admitted ones are still served")
    for proc in (other, full):
        proc.stdin.close()
        proc.wait(timeout=10)
    for conn in mine:
        conn.close()
    wait_for(lambda: resp_ping(d.socket) == b"+PONG\r\n", timeout=5,
             what="room after the others left")
    stats = d.stats()["daemon"]
    assert stats["connections_over_limit"] == 4
    assert d.proc.poll() is None


def test_idle_connections_cost_little(make_daemon):
    d = make_daemon("--set", "daemon.max_connections_per_process=1000")
    healthy = NativeClient(d.socket)
    pid = d.proc.pid
    # A large frame once grows a connection's buffer; idle, it must shrink back.
    healthy.ping(os.urandom(PING_BODY))
    rss_before = vm_rss_kib(pid)
    conns = []
    for _ in range(500):
        c = NativeClient(d.socket)
        c.ping(os.urandom(60 << 10))  # each buffer grows, then idles
        conns.append(c)
    healthy.ping()
    per_connection_kib = (vm_rss_kib(pid) - rss_before) / len(conns)
    assert per_connection_kib < 48, f"{per_connection_kib:.1f} KiB per idle connection"
    assert healthy.stats()["daemon"]["inflight_bytes"] == 0
    for c in conns:
        c.close()

