"""Replies a client has not read (docs/architecture.md, "Limits on untrusted
input"): bounded per connection and, past daemon.max_reply_bytes, for all
connections together; a connection held back by that bound goes on once the
daemon is under it again; and a client that stops reading while its
connection holds part of daemon.max_inflight_bytes is closed, one that reads
steadily never."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from integ_helpers import drain_disk_queue, vm_rss_kib
from pt2harness import RawConnection, wait_for


def echo(message: bytes) -> bytes:
    return b"*2\r\n$4\r\nECHO\r\n$%d\r\n%s\r\n" % (len(message), message)


def command(*args: bytes) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        out.append(b"$%d\r\n%s\r\n" % (len(arg), arg))
    return b"".join(out)


def test_replies_queued_for_clients_that_do_not_read_are_bounded(make_daemon):
    """Twelve clients pipeline 60 KB ECHOs and read nothing. Each connection may
    queue 16 MiB of replies, but once all of them together pass
    daemon.max_reply_bytes a connection with more than 64 KiB queued reads no
    further command until its client reads: the daemon holds about the limit,
    not 12 x 16 MiB. Another client is served meanwhile, and once the twelve
    read, every reply arrives, whole and in order."""
    d = make_daemon("--set", "daemon.max_reply_bytes=4MiB")
    rss_before = vm_rss_kib(d.proc.pid)
    size = 60000
    reply_size = len(b"$%d\r\n" % size) + size + 2
    conns, commands, sent = [], [], []
    for i in range(12):
        c = socket.socket(socket.AF_UNIX)
        c.connect(str(d.socket))
        c.setblocking(False)
        conns.append(c)
        commands.append(b"*2\r\n$4\r\nECHO\r\n$%d\r\n%s\r\n" % (size, bytes([65 + i]) * size))
        sent.append(0)
    # Send until the daemon has read nothing from any connection for a
    # second (at most 400 commands, 24 MB, each).
    deadline = time.monotonic() + 30
    stalled_since = [None] * len(conns)

    def all_stalled():
        now = time.monotonic()
        return all(since is not None and now - since > 1.0 for since in stalled_since)

    while time.monotonic() < deadline and not all_stalled():
        for i, c in enumerate(conns):
            if stalled_since[i] and time.monotonic() - stalled_since[i] > 1.0:
                continue
            offset = sent[i] % len(commands[i])
            if sent[i] >= 400 * len(commands[i]):
                stalled_since[i] = stalled_since[i] or time.monotonic() - 2
                continue
            try:
                sent[i] += c.send(commands[i][offset:])
                stalled_since[i] = None
            except BlockingIOError:
                stalled_since[i] = stalled_since[i] or time.monotonic()
                time.sleep(0.01)
    assert all_stalled(), "the daemon kept reading"
    assert vm_rss_kib(d.proc.pid) - rss_before < 64 * 1024
    daemon_stats = d.stats()["daemon"]
    assert daemon_stats["reply_limit"] == 4 << 20
    # Without the shared limit each connection held up to 16 MiB (192 MiB).
    assert daemon_stats["reply_bytes"] <= (4 << 20) + len(conns) * (256 << 10), daemon_stats
    assert sum(sent) > len(conns) * reply_size
    assert RawConnection(d.socket).hello() is not None  # others are still served
    # Now read: the rest of each partial command goes out, and every reply
    # comes back in order.
    for i, c in enumerate(conns):
        c.setblocking(True)
        c.settimeout(20)
        rest = -sent[i] % len(commands[i])
        expected = (sent[i] + rest) // len(commands[i])
        reader_error = []

        def read_all(c=c, i=i, expected=expected):
            try:
                got = bytearray()
                while len(got) < expected * reply_size:
                    chunk = c.recv(1 << 20)
                    assert chunk, "closed early"
                    got += chunk
                assert bytes(got) == (b"$%d\r\n%s\r\n" % (size, bytes([65 + i]) * size)) * expected
            except Exception as e:  # noqa: BLE001 (reported below)
                reader_error.append(e)

        reader = threading.Thread(target=read_all)
        reader.start()
        c.sendall(commands[i][len(commands[i]) - rest:])
        reader.join(30)
        assert not reader.is_alive() and not reader_error, reader_error
        c.close()
    wait_for(lambda: d.stats()["daemon"]["reply_bytes"] == 0, timeout=5,
             what="the queued replies to be released")


def test_a_connection_held_back_by_the_shared_bound_goes_on_once_under_it(make_daemon):
    """X pipelines ECHOs and never reads, taking the daemon past
    max_reply_bytes; Y then sends a pipeline whose replies it reads only once
    everything is sent (as redis-py does), and is held back at 64 KiB. When X
    leaves, nothing of Y's own wakes it: it must notice that the daemon is
    under the bound again, and finish (review: it stayed stuck for good)."""
    d = make_daemon("--set", "daemon.max_reply_bytes=2MiB")
    x = socket.socket(socket.AF_UNIX)
    x.connect(str(d.socket))
    x.settimeout(0.5)
    flood = echo(b"x" * 16000) * 200  # 3.2 MB of replies
    try:
        x.sendall(flood)
    except socket.timeout:
        pass  # the daemon stopped reading X
    wait_for(lambda: d.stats()["daemon"]["reply_bytes"] > 2 << 20, timeout=10,
             what="X to take the daemon past max_reply_bytes")
    y = socket.socket(socket.AF_UNIX)
    y.connect(str(d.socket))
    y.settimeout(30)
    pipeline = echo(b"y" * 1000) * 500  # 0.5 MB of replies
    sent = threading.Event()
    sender = threading.Thread(target=lambda: (y.sendall(pipeline), sent.set()))
    sender.start()
    time.sleep(1.0)
    assert not sent.is_set(), "Y was not held back (the test proves nothing)"
    x.close()
    sender.join(10)
    assert sent.is_set(), "Y stayed held back after X left"
    expected = (b"$1000\r\n" + b"y" * 1000 + b"\r\n") * 500
    got = bytearray()
    while len(got) < len(expected):
        chunk = y.recv(1 << 20)
        assert chunk
        got += chunk
    assert bytes(got) == expected
    y.close()
    wait_for(lambda: d.stats()["daemon"]["reply_bytes"] == 0, timeout=5,
             what="the queued replies to be released")


def test_a_client_reading_steadily_is_never_taken_for_stalled(make_daemon):
    """A client reads at most 64 KiB every 0.05 s (1.25 MiB/s). A first
    transaction's EXEC waits for room until the last of its 20 MiB of replies
    is queued (after about 3 s), then ends with 16 MiB still queued; 14 s
    after it began, past the 10 s stall deadline that its last wait had set,
    but with replies still queued, a second transaction's EXEC waits for room
    again. That old deadline must not close a client that kept reading
    (review: it was closed at once)."""
    d = make_daemon("--set", "daemon.max_value_size=8MiB")
    big = b"g" * (1 << 20)
    setter = RawConnection(d.socket)
    setter.send(command(b"SET", b"tx-big", big))
    assert setter.sock.recv(16) == b"+OK\r\n"
    c = socket.socket(socket.AF_UNIX)
    c.connect(str(d.socket))
    got = bytearray()
    fast = threading.Event()
    done = threading.Event()

    def reader():
        c.settimeout(30)
        while not done.is_set():
            chunk = c.recv(64 << 10)
            if not chunk:
                return
            got.extend(chunk)
            if not fast.is_set():
                time.sleep(0.05)

    thread = threading.Thread(target=reader)
    thread.start()
    transaction = [command(b"MULTI")] + [command(b"GET", b"tx-big")] * 20
    c.sendall(b"".join(transaction) + command(b"SET", b"pad1", b"s" * (2 << 20)) +
              command(b"EXEC"))
    time.sleep(14)
    assert len(got) < 20 << 20, "the first transaction's replies were all read: too fast"
    c.sendall(b"".join(transaction[:15]) + command(b"SET", b"pad2", b"s" * (2 << 20)) +
              command(b"EXEC"))
    time.sleep(1)
    fast.set()
    reply = b"$%d\r\n%s\r\n" % (len(big), big)
    # +OK, 21 x +QUEUED, then the EXEC array header, 20 GETs, +OK; twice
    # (the second with 14 GETs).
    expected = (len(b"+OK\r\n") + 21 * len(b"+QUEUED\r\n") + len(b"*21\r\n") + 20 * len(reply) +
                len(b"+OK\r\n") + len(b"+OK\r\n") + 15 * len(b"+QUEUED\r\n") + len(b"*15\r\n") +
                14 * len(reply) + len(b"+OK\r\n"))
    wait_for(lambda: len(got) >= expected or not thread.is_alive(), timeout=30,
             what="every reply")
    done.set()
    c.shutdown(socket.SHUT_RDWR)  # ends the reader's recv
    thread.join(5)
    c.close()
    assert len(got) == expected
    assert d.stats()["daemon"]["stalled_requests"] == 0


def receive(c: socket.socket, size: int) -> bytes:
    """`size` bytes from `c`, within 30 s each read."""
    got = bytearray()
    c.settimeout(30)
    while len(got) < size:
        chunk = c.recv(1 << 20)
        assert chunk, "closed before the whole reply"
        got.extend(chunk)
    return bytes(got)


def fill_with_large_values(d, count: int, size: int) -> list[bytes]:
    """`count` values of `size` zero bytes (tiny on disk), written to disk."""
    keys = [b"large%d" % i for i in range(count)]
    setter = RawConnection(d.socket)
    for key in keys:
        setter.send(command(b"SET", key, b"\0" * size))
        assert setter.sock.recv(16) == b"+OK\r\n"
    drain_disk_queue(d)
    return keys


def test_an_mget_of_large_values_on_disk_holds_a_slice_of_them(make_daemon):
    """One MGET of 16 values of 16 MiB, each too large for the memory tier,
    read from disk: every value was read before the first reply byte went
    out, and a client that did not read held all 256 MiB (a review: 60 x 48
    MiB took the daemon to 3 GB). It is answered slice by slice now, each
    slice sent before the next is read."""
    d = make_daemon("--set", "memory.max_size=8MiB")
    size = 16 << 20
    keys = fill_with_large_values(d, 16, size)
    rss_before = vm_rss_kib(d.proc.pid)
    c = socket.socket(socket.AF_UNIX)
    c.connect(str(d.socket))
    c.sendall(command(b"MGET", *keys))
    peak = rss_before
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:  # the client reads nothing meanwhile
        peak = max(peak, vm_rss_kib(d.proc.pid))
        time.sleep(0.02)
    assert (peak - rss_before) << 10 < 96 << 20, f"{peak - rss_before} KiB held"
    reply = b"$%d\r\n%s\r\n" % (size, b"\0" * size)
    expected = b"*16\r\n" + reply * 16
    assert receive(c, len(expected)) == expected
    c.close()


def test_a_client_leaving_a_large_reply_unread_is_closed(make_daemon):
    """A GET of a 32 MiB value whose client never reads the reply held it for
    good: with many such clients the daemon's memory had no bound but their
    number. Past a connection's 16 MiB of replies, a client must read 64 KiB
    in every 10 s, as one holding in-flight budget must."""
    d = make_daemon("--set", "memory.max_size=8MiB")
    [key] = fill_with_large_values(d, 1, 32 << 20)
    c = socket.socket(socket.AF_UNIX)
    c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    c.connect(str(d.socket))
    c.sendall(command(b"GET", key))
    time.sleep(12)  # reads nothing: closed after 10 s
    c.settimeout(10)
    c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    received = 0
    while chunk := c.recv(1 << 20):
        received += len(chunk)
    assert received < 32 << 20, "the whole reply was still there"
    stats = RawConnection(d.socket)
    stats.send(command(b"PING"))
    assert stats.sock.recv(16) == b"+PONG\r\n"
    assert "of replies; closing" in d.log()


def test_an_mget_cut_into_slices_looks_each_key_up_once(make_daemon):
    """Four 16 MiB values on disk (each a slice of its own) and 100 in
    memory, in one MGET: the memory tier counts 100 hits. Each slice cut
    short looked the rest of its 512 keys up again (a re-review: 800)."""
    d = make_daemon("--set", "memory.max_size=8MiB")
    keys = fill_with_large_values(d, 4, 16 << 20)
    setter = RawConnection(d.socket)
    small = [b"m%d" % i for i in range(100)]
    for key in small:
        setter.send(command(b"SET", key, key))
        assert setter.sock.recv(16) == b"+OK\r\n"
    hits = lambda: d.stats()["namespaces"]["redis"]["memory"]["hits"]  # noqa: E731
    before = hits()
    c = socket.socket(socket.AF_UNIX)
    c.connect(str(d.socket))
    c.sendall(command(b"MGET", *keys, *small))
    expected = (b"*104\r\n" + b"$%d\r\n%s\r\n" % (16 << 20, b"\0" * (16 << 20)) * 4 +
                b"".join(b"$%d\r\n%s\r\n" % (len(k), k) for k in small))
    assert receive(c, len(expected)) == expected
    assert hits() - before == 100


def send_gets_reading_nothing(d, keys: list[bytes]) -> list[socket.socket]:
    conns = []
    for key in keys:
        c = socket.socket(socket.AF_UNIX)
        c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        c.connect(str(d.socket))
        c.sendall(command(b"GET", key))
        conns.append(c)
    return conns


def test_gets_of_large_values_on_disk_wait_for_room_in_the_read_budget(make_daemon):
    """Eight clients each send one GET of a different 12 MiB value kept on
    disk, and read nothing: the daemon read all eight at once (a review: 60
    x 48 MiB reached 2.97 GB). Now a large value takes its size from
    daemon.max_reply_bytes before it is read and gives it back once its
    reply is written: two are read, the others wait, and every client gets
    its value, whole, once the first ones read theirs."""
    d = make_daemon("--set", "memory.max_size=8MiB", "--set", "daemon.max_reply_bytes=24MiB")
    size = 12 << 20
    keys = fill_with_large_values(d, 8, size)
    rss_before = vm_rss_kib(d.proc.pid)
    conns = send_gets_reading_nothing(d, keys)
    peak = rss_before
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        peak = max(peak, vm_rss_kib(d.proc.pid))
        time.sleep(0.02)
    daemon_stats = d.stats()["daemon"]
    assert daemon_stats["read_bytes"] == 24 << 20, daemon_stats
    assert (peak - rss_before) << 10 < 48 << 20, f"{peak - rss_before} KiB held"
    assert RawConnection(d.socket).hello() is not None  # others are still served
    # All read at once: which two were read first is not known.
    reply = b"$%d\r\n%s\r\n" % (size, b"\0" * size)
    got = [None] * len(conns)

    def read(i):
        conns[i].setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        got[i] = receive(conns[i], len(reply))

    readers = [threading.Thread(target=read, args=(i,)) for i in range(len(conns))]
    for reader in readers:
        reader.start()
    for reader in readers:
        reader.join(60)
    assert all(value == reply for value in got)
    for c in conns:
        c.close()
    wait_for(lambda: d.stats()["daemon"]["read_bytes"] == 0, timeout=10)
    assert d.stats()["daemon"]["reads_refused"] == 0


def test_a_get_finding_no_room_in_the_read_budget_is_refused_in_time(make_daemon):
    """Two clients hold the whole read budget with 12 MiB replies they never
    read: a third GET of a large value waits 10 s, then is refused (its
    connection closed, as every RESP GET that cannot be served: docs/torch.md),
    logged naming daemon.max_reply_bytes and counted as reads_refused. Small
    values are served meanwhile, and the refused value is served once there
    is room."""
    d = make_daemon("--set", "memory.max_size=8MiB", "--set", "daemon.max_reply_bytes=24MiB")
    size = 12 << 20
    keys = fill_with_large_values(d, 3, size)
    holders = send_gets_reading_nothing(d, keys[:2])
    wait_for(lambda: d.stats()["daemon"]["read_bytes"] == 24 << 20, timeout=10)
    c = RawConnection(d.socket)
    c.send(command(b"SET", b"small", b"v"))
    assert c.sock.recv(16) == b"+OK\r\n"
    waiter = socket.socket(socket.AF_UNIX)
    waiter.connect(str(d.socket))
    started = time.monotonic()
    waiter.sendall(command(b"GET", keys[2]))
    time.sleep(1)
    c.send(command(b"GET", b"small"))
    assert c.sock.recv(16) == b"$1\r\nv\r\n"
    waiter.settimeout(20)
    assert waiter.recv(4096) == b""  # closed
    waited = time.monotonic() - started
    assert 9 < waited < 15, waited
    assert "no room in daemon.max_reply_bytes" in d.log()
    assert d.stats()["daemon"]["reads_refused"] == 1
    for holder in holders:
        holder.close()
    wait_for(lambda: d.stats()["daemon"]["read_bytes"] == 0, timeout=10)
    waiter = socket.socket(socket.AF_UNIX)
    waiter.connect(str(d.socket))
    waiter.sendall(command(b"GET", keys[2]))
    reply = b"$%d\r\n%s\r\n" % (size, b"\0" * size)
    assert receive(waiter, len(reply)) == reply


@pytest.mark.parametrize("form", ["pipeline", "mget", "multi"])
def test_a_clients_own_unsent_large_replies_never_hold_up_its_next_get(make_daemon, form):
    """Two 2 MiB values on disk, read by one client in one go (a pipeline of
    two GETs, one MGET, or MULTI/GET/GET/EXEC) against a 1 MiB read budget:
    the first value's reply, not yet sent, held the room the second waited
    for, for 10 s, and the request was refused (a review). A GET that finds
    no room now sends its session's replies before it waits."""
    d = make_daemon("--set", "memory.max_size=8MiB", "--set", "daemon.max_reply_bytes=1MiB")
    size = 2 << 20
    a, b = fill_with_large_values(d, 2, size)
    value = b"$%d\r\n%s\r\n" % (size, b"\0" * size)
    if form == "pipeline":
        message, expected = command(b"GET", a) + command(b"GET", b), value * 2
    elif form == "mget":
        message, expected = command(b"MGET", a, b), b"*2\r\n" + value * 2
    else:
        message = command(b"MULTI") + command(b"GET", a) + command(b"GET", b) + command(b"EXEC")
        expected = b"+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n" + value * 2
    c = socket.socket(socket.AF_UNIX)
    c.connect(str(d.socket))
    started = time.monotonic()
    c.sendall(message)
    assert receive(c, len(expected)) == expected
    assert time.monotonic() - started < 5
    assert d.stats()["daemon"]["reads_refused"] == 0
