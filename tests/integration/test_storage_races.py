"""Races between a GET that copies a lower tier's value up (a backfill) and a
PUT or DELETE of the same key, and between a GET and a PUT that moves a key
between small.mdb and a file. After a write is acknowledged, no read may
serve the value it replaced or removed: not at once, not after an eviction,
not after a restart. Found by a review; each test fails on the daemon before
the fix."""

from __future__ import annotations

import os
import struct
import time

import pytest
from integ_helpers import NativeClient, put_body
from pt2harness import OP, frame, key_body

OK, MISS = 0, 1
NS = "fx-graph"


RESTORE = 0x0D  # docs/protocol.md, "Export and import"; flag 1: replace


@pytest.mark.parametrize("mode", ["async", "sync"])
@pytest.mark.parametrize("op", ["put", "delete", "restore"])
def test_a_backfill_never_brings_back_what_a_later_write_replaced(make_daemon, mode, op):
    """A GET that misses memory reads the disk copy (V1, large, so slow) and
    copies it into memory; a PUT of V2 (a DELETE, a RESTORE that replaces)
    acknowledged meanwhile must win: memory must not keep V1 after it."""
    d = make_daemon("--set", f"disk.write_mode={mode}")
    values = [os.urandom(4 << 20) for _ in range(2)]
    keys = [b"race-%d" % i for i in range(40)]
    c = NativeClient(d.socket)
    for i, key in enumerate(keys):
        assert c.put(NS, key, values[i % 2]) == OK
    c.close()
    d.restart()  # memory empty: every value is on disk only
    reader, writer, check = (NativeClient(d.socket) for _ in range(3))
    stale = []
    started = time.monotonic()
    for i, key in enumerate(keys):
        assert time.monotonic() - started < 120
        new = b"new-%d" % i
        reader.send(frame(OP["get"], key_body(NS, key), rid=7))
        time.sleep(0.0005)
        if op == "put":
            writer.send(frame(OP["put"], put_body(NS, key, new), rid=8))
        elif op == "restore":
            created_ms = int(time.time() * 1000) + 10
            body = key_body(NS, key) + struct.pack("<QQ", created_ms, 0) + new
            writer.send(frame(RESTORE, body, flags=1, rid=8))
        else:
            writer.send(frame(OP["delete"], key_body(NS, key), rid=8))
        assert writer.reply()[1] == OK
        reader.reply()
        expected = (MISS, b"") if op == "delete" else (OK, new)
        if check.get(NS, key) != expected:
            stale.append(key)
    assert stale == [], f"{len(stale)} of {len(keys)} keys served the value a {op} replaced"
    # Nor from disk, after a restart.
    for c in (reader, writer, check):
        c.close()
    d.restart()
    c = NativeClient(d.socket)
    for i, key in enumerate(keys):
        expected = (MISS, b"") if op == "delete" else (OK, b"new-%d" % i)
        assert c.get(NS, key) == expected, key


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_a_read_racing_a_move_to_a_file_leaves_no_overwritten_value_behind(make_daemon, mode):
    """A GET of a small entry (zeros: a few KiB in small.mdb, slow to
    decompress) while a PUT moves the key to a file used to record the entry
    as small again in the disk index; the next small PUT then left the file,
    which came back once that small entry expired."""
    d = make_daemon("--set", f"disk.write_mode={mode}")
    c, reader, writer = (NativeClient(d.socket, timeout=60) for _ in range(3))
    zeros = bytes(32 << 20)
    came_back = []
    for trial in range(4):
        key = b"moved-%d" % trial
        replaced = os.urandom(100 << 10)  # over the small-entry limit: a file
        assert c.put(NS, key, zeros) == OK
        reader.send(frame(OP["get"], key_body(NS, key), rid=5))
        time.sleep(0.004 + trial * 0.004)
        assert writer.put(NS, key, replaced) == OK
        reader.reply()
        assert c.put(NS, key, b"small-%d" % trial, ttl_ms=500) == OK
        assert c.get(NS, key) == (OK, b"small-%d" % trial)
        time.sleep(0.7)
        status, value = c.get(NS, key)
        if status != MISS:
            came_back.append((key, value == replaced))
    assert came_back == [], f"expired keys served again: {came_back}"
