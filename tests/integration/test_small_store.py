"""Small entries in small.mdb (LMDB) seen from outside: no file per entry, a
broken small.mdb replaced while the daemon serves, migration of a cache of
files (docs/architecture.md, "Small entries in LMDB")."""

from __future__ import annotations

import os
import time

from integ_helpers import NativeClient, drain_disk_queue, entry_files
from pt2harness import STATUS, wait_for


def put_small_and_big(conn, count: int, size: int) -> tuple[dict, bytes]:
    """`count` autotune entries of `size` bytes and one 64 KiB fx-graph
    entry (a file), all on disk; the values."""
    small = {b"k%04d" % i: os.urandom(size) for i in range(count)}
    conn.put_many("autotune", small)
    big = os.urandom(64 << 10)
    assert conn.put("fx-graph", b"big", big) == STATUS["ok"]
    drain_disk_queue(conn)
    return small, big


def test_small_entries_make_no_files(make_daemon):
    d = make_daemon("--set", "memory.max_size=0")
    conn = NativeClient(d.socket)
    small = {b"tune-%04d" % i: os.urandom(200) for i in range(500)}
    conn.put_many("autotune", small)
    assert conn.put("fx-graph", b"graph", os.urandom(100 << 10)) == STATUS["ok"]
    drain_disk_queue(conn)
    assert entry_files(d.cache_dir, "autotune") == []
    assert len(entry_files(d.cache_dir, "fx-graph")) == 1
    assert (d.cache_dir / "small.mdb").is_file()
    for key, value in small.items():
        assert conn.get("autotune", key) == (STATUS["ok"], value)
    d.stop()
    d.start()
    conn = NativeClient(d.socket)
    # The count comes from the index, which the startup scan fills.
    wait_for(lambda: conn.stats()["tiers"]["disk"]["scan_complete"], what="the startup scan")
    assert conn.stats()["tiers"]["disk"]["count"] == 501
    assert conn.get("autotune", b"tune-0007") == (STATUS["ok"], small[b"tune-0007"])
    assert conn.get("autotune", b"absent") == (STATUS["miss"], b"")


def test_garbage_small_mdb_is_moved_aside(make_daemon):
    d = make_daemon("--set", "memory.max_size=0", start=False)
    d.cache_dir.mkdir(parents=True, exist_ok=True)
    (d.cache_dir / "small.mdb").write_bytes(os.urandom(256 << 10))
    d.start()
    conn = NativeClient(d.socket)
    assert conn.stats()["daemon"]["small_store_recoveries"] == 1
    assert (d.cache_dir / "small.mdb.broken").is_file()
    assert "small-entry store" in d.log() and "moved to" in d.log()
    assert conn.put("pgo", b"k", b"fresh") == STATUS["ok"]
    drain_disk_queue(conn)
    assert conn.get("pgo", b"k") == (STATUS["ok"], b"fresh")
    assert entry_files(d.cache_dir) == []


def test_cache_of_files_migrates_on_first_start(make_daemon):
    d = make_daemon("--set", "memory.max_size=0", "--set", "disk.small_entry_max=0")
    conn = NativeClient(d.socket)
    small, big = put_small_and_big(conn, 800, 300)
    assert len(entry_files(d.cache_dir)) == 801
    assert not (d.cache_dir / "small.mdb").exists()
    d.stop()

    migrated = make_daemon("--set", "memory.max_size=0", cache_dir=d.cache_dir, sub="second")
    conn = NativeClient(migrated.socket)
    # Readable throughout, then only the large file is left.
    for key, value in list(small.items())[::40]:
        assert conn.get("autotune", key) == (STATUS["ok"], value)
    wait_for(lambda: len(entry_files(migrated.cache_dir)) == 1, timeout=30,
             what="the small files to move into small.mdb")
    for key, value in small.items():
        assert conn.get("autotune", key) == (STATUS["ok"], value)
    assert conn.get("fx-graph", b"big") == (STATUS["ok"], big)
    assert conn.stats()["tiers"]["disk"]["count"] == 801
    assert "moved 800 small entry files" in migrated.log()


def test_small_mdb_truncated_under_the_daemon_is_replaced(make_daemon):
    # LMDB reading past the end of the file raises SIGBUS: contained, the
    # store quarantined, the daemon serving on (fault_guard.hpp).
    d = make_daemon("--set", "memory.max_size=0")
    conn = NativeClient(d.socket)
    _, big = put_small_and_big(conn, 300, 3000)
    path = d.cache_dir / "small.mdb"
    assert path.stat().st_size > 16 * 4096
    os.truncate(path, 2 * 4096)  # the meta pages only

    assert conn.get("autotune", b"k0007") == (STATUS["miss"], b"")
    assert d.proc.poll() is None
    stats = conn.stats()
    assert stats["daemon"]["small_store_recoveries"] == 1
    assert stats["namespaces"]["autotune"]["disk"]["corrupt"] == 1
    assert stats["tiers"]["disk"]["count"] == 1  # the small entries are forgotten
    assert (d.cache_dir / "small.mdb.broken").stat().st_size == 2 * 4096
    assert "LMDB faulted" in d.log()
    assert conn.get("fx-graph", b"big") == (STATUS["ok"], big)
    assert conn.get("autotune", b"k0008") == (STATUS["miss"], b"")
    assert conn.put("autotune", b"k0007", b"fresh") == STATUS["ok"]
    drain_disk_queue(conn)
    assert conn.get("autotune", b"k0007") == (STATUS["ok"], b"fresh")
    assert d.stop() == 0
    d.start()
    conn = NativeClient(d.socket)
    assert conn.get("autotune", b"k0007") == (STATUS["ok"], b"fresh")
    assert conn.stats()["daemon"]["small_store_recoveries"] == 0


def mark_leaves_holding(path, text: bytes) -> int:
    """Marks each LMDB leaf page of `path` whose bytes hold `text` as an
    overflow page (LMDB page header: page number, 8 bytes; pad, 2; flags,
    2): LMDB then reports its tree corrupt where it meets the page, without
    faulting. How many pages it marked."""
    page, leaf, overflow = 4096, 0x02, 0x04
    data = bytearray(path.read_bytes())
    marked = 0
    for at in range(0, len(data) - page + 1, page):
        number = int.from_bytes(data[at:at + 8], "little")
        flags = int.from_bytes(data[at + 10:at + 12], "little")
        if number == at // page and flags == leaf and text in data[at:at + page]:
            data[at + 10:at + 12] = overflow.to_bytes(2, "little")
            marked += 1
    with open(path, "r+b") as f:  # in place: the daemon has it mapped
        f.write(data)
    return marked


def test_damaged_small_mdb_is_salvaged(make_daemon):
    # The read that meets the damaged leaf quarantines the store; the salvage
    # then puts back every entry it can still read and verify
    # (docs/architecture.md, "Salvage").
    d = make_daemon("--set", "memory.max_size=0")
    conn = NativeClient(d.socket)
    small, big = put_small_and_big(conn, 400, 300)
    assert mark_leaves_holding(d.cache_dir / "small.mdb", b"k0150") == 1

    assert conn.get("autotune", b"k0150") == (STATUS["miss"], b"")
    wait_for(lambda: "salvaged" in d.log(), timeout=30, what="the salvage")
    stats = conn.stats()
    salvaged = stats["daemon"]["small_store_salvaged"]
    assert stats["daemon"]["small_store_recoveries"] == 1
    assert 340 <= salvaged < 400  # one leaf's entries lost
    hits = 0
    for key, value in small.items():
        status, got = conn.get("autotune", key)
        assert status in (STATUS["ok"], STATUS["miss"])
        if status == STATUS["ok"]:
            assert got == value
            hits += 1
    assert hits == salvaged
    assert conn.get("autotune", b"k0150") == (STATUS["miss"], b"")
    assert conn.stats()["tiers"]["disk"]["count"] == salvaged + 1
    assert conn.get("fx-graph", b"big") == (STATUS["ok"], big)
    assert f"salvaged {salvaged} of the 400 entries" in d.log()
    assert d.proc.poll() is None


def damage_node_sizes(path, ns: bytes) -> int:
    """Sets the 32-bit data size of every LMDB leaf node holding an entry of
    `ns` to 0xFFFFFFFF (the node header: size low and high halves, flags, key
    size, then the key "ns\\0" + 16 id bytes, then the entry "P2CE...")."""
    data = bytearray(path.read_bytes())
    key_size = len(ns) + 1 + 16
    damaged = 0
    at = data.find(b"P2CE")
    while at >= 0:
        node = at - 8 - key_size
        if node >= 0 and data[node + 6:node + 8] == key_size.to_bytes(2, "little") and \
                data[node + 8:node + 8 + len(ns) + 1] == ns + b"\0":
            data[node:node + 4] = b"\xff\xff\xff\xff"
            damaged += 1
        at = data.find(b"P2CE", at + 1)
    path.write_bytes(bytes(data))
    return damaged


def test_a_damaged_node_size_is_damage_not_an_allocation(make_daemon):
    # A node that claims 4 GiB made each read allocate and copy that much
    # (4 concurrent reads peaked at 16.8 GB, each taking 23 s).
    d = make_daemon("--set", "memory.max_size=0", "--set", "disk.write_mode=sync")
    conn = NativeClient(d.socket)
    for i in range(8):
        assert conn.put("autotune", b"k%d" % i, b"x" * 300) == STATUS["ok"]
    conn.close()
    d.stop()
    assert damage_node_sizes(d.cache_dir / "small.mdb", b"autotune") >= 8  # and old pages
    d.start()
    conn = NativeClient(d.socket, timeout=60)
    started = time.monotonic()
    assert conn.get("autotune", b"k0") == (STATUS["miss"], b"")
    assert time.monotonic() - started < 5.0
    with open(f"/proc/{d.proc.pid}/status") as status:
        peak_kib = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    assert peak_kib < 512 << 10, f"peak RSS {peak_kib} KiB"
    stats = conn.stats()
    assert stats["namespaces"]["autotune"]["disk"]["corrupt"] >= 1
    assert conn.put("autotune", b"after", b"y" * 100) == STATUS["ok"]
    assert conn.get("autotune", b"after") == (STATUS["ok"], b"y" * 100)
