"""HASH_FILES against the real daemon (docs/protocol.md, "Hashing files"):
statuses, bad requests, and the (dev, inode, size, mtime, ctime) cache."""

from __future__ import annotations

import os
import struct
import threading
import time

import pytest

from integ_helpers import NativeClient, error_reply
from pt2harness import STATUS, frame

HASH_FILES = 0x0A
OK, NOT_FOUND, NOT_REGULAR = 0, 1, 2


def body(paths) -> bytes:
    out = struct.pack("<H", len(paths))
    for p in paths:
        raw = p if isinstance(p, bytes) else str(p).encode()
        out += struct.pack("<H", len(raw)) + raw
    return out


def parse(reply: bytes):
    (count,) = struct.unpack_from("<H", reply, 0)
    out = []
    for i in range(count):
        status, size = struct.unpack_from("<BQ", reply, 2 + i * 25)
        digest = reply[2 + i * 25 + 9: 2 + i * 25 + 25]
        out.append((status, size, digest))
    assert len(reply) == 2 + count * 25
    return out


def hash_files(conn, paths):
    status, reply = conn.request(HASH_FILES, body(paths))
    assert status == STATUS["ok"], (status, reply)
    return parse(reply)


def test_statuses_and_hashes(daemon, tmp_root):
    f = tmp_root / "f.txt"
    f.write_bytes(b"hello world\n" * 1000)
    fifo = tmp_root / "fifo"
    os.mkfifo(fifo)
    conn = NativeClient(daemon.socket)
    got = hash_files(conn, [f, tmp_root / "absent", tmp_root, fifo, "/dev/zero"])
    assert got[0][:2] == (OK, 12000)
    g = tmp_root / "g.txt"
    g.write_bytes(f.read_bytes())
    assert hash_files(conn, [g])[0] == got[0]  # a hash of the content, not of the path
    assert [g[0] for g in got[1:]] == [NOT_FOUND, NOT_REGULAR, NOT_REGULAR, NOT_REGULAR]
    assert all(g[1:] == (0, bytes(16)) for g in got[1:])
    conn.ping()  # the connection is still good


@pytest.mark.parametrize("paths", [[], ["relative"], [b"/nul\0byte"], ["/" + "x" * 4096]],
                         ids=["none", "relative", "nul", "long"])
def test_bad_requests_are_malformed(daemon, paths):
    conn = NativeClient(daemon.socket)
    conn.send(frame(HASH_FILES, body(paths), rid=9))
    _, status, rid, _ = error_reply(conn)
    assert (status, rid) == (STATUS["malformed"], 9)
    NativeClient(daemon.socket).ping()  # others are served


def test_cache_follows_stat(daemon, tmp_root):
    f = tmp_root / "h.h"
    f.write_bytes(b"#define A 1\n")
    time.sleep(2.2)  # out of the racy window
    conn = NativeClient(daemon.socket)
    first = hash_files(conn, [f])[0]
    before = daemon.stats()["file_hashes"]
    assert hash_files(conn, [f])[0] == first
    after = daemon.stats()["file_hashes"]
    assert after["hits"] == before["hits"] + 1 and after["hashed"] == before["hashed"]
    # Same size, mtime put back: the ctime still changes, so it is hashed again.
    st = f.stat()
    f.write_bytes(b"#define A 2\n")
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    changed = hash_files(conn, [f])[0]
    assert changed[0] == OK and changed[2] != first[2]
    same = tmp_root / "same.h"
    same.write_bytes(b"#define A 2\n")
    assert hash_files(conn, [same])[0] == changed


def test_a_file_whose_size_stat_does_not_know_is_read_in_chunks(daemon):
    """procfs files say size 0: read a byte per call, /proc/kallsyms (MBs)
    took the whole 2 s budget (SKIPPED), a worker held meanwhile. Read in
    64 KiB chunks, it takes a fraction of that."""
    if not os.access("/proc/kallsyms", os.R_OK):
        pytest.skip("/proc/kallsyms is not readable here")
    conn = NativeClient(daemon.socket)
    started = time.monotonic()
    (status, size, _), = hash_files(conn, ["/proc/kallsyms"])
    took = time.monotonic() - started
    assert status == OK and size > 1_000_000, (status, size)
    assert took < 1.5, took


def test_hashing_never_takes_the_workers_of_gets_and_puts(daemon, tmp_root):
    """Six clients hash a 1 GiB file named 4096 times per request, its mtime
    kept fresh (never cached, so each request hashes for its whole 2 s
    budget). They shared the worker pool with every disk get and put, and a
    client putting and getting 100 KiB values (too large for the I/O
    thread's quick path) waited up to 2 s (a review). Hashing has threads of
    its own now."""
    big = tmp_root / "big"
    with open(big, "wb") as f:
        f.truncate(1 << 30)  # sparse: read as zeros, quickly
    stop = time.monotonic() + 5
    requests = []

    def hasher():
        conn = NativeClient(daemon.socket, timeout=30)
        while time.monotonic() < stop:
            hash_files(conn, [big] * 4096)
            requests.append(1)

    def toucher():
        while time.monotonic() < stop:
            os.utime(big)
            time.sleep(0.2)

    threads = [threading.Thread(target=hasher) for _ in range(6)]
    threads.append(threading.Thread(target=toucher))
    for t in threads:
        t.start()
    time.sleep(1)  # every hashing thread busy
    victim = NativeClient(daemon.socket, timeout=30)
    value = b"v" * (100 << 10)
    slowest = 0.0
    while time.monotonic() < stop - 0.5:
        started = time.monotonic()
        assert victim.put("pgo", b"victim", value) == STATUS["ok"]
        assert victim.get("pgo", b"victim") == (STATUS["ok"], value)
        slowest = max(slowest, time.monotonic() - started)
        time.sleep(0.05)
    for t in threads:
        t.join(timeout=30)
    assert len(requests) >= 6, "the hashing clients did not run"
    assert slowest < 0.5, f"a put and get took {slowest:.2f} s beside the hashing"
