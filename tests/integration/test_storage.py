"""The disk tier seen from outside: eviction, corrupt files, leftovers and
compression. Every test here is about entry files, so every daemon runs with
disk.small_entry_max=0 (each entry a file); small entries in small.mdb are
tested in test_small_store.py."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from integ_helpers import (NativeClient, drain_disk_queue, entry_bytes, entry_files, temp_files,
                           wait_for_log)
from pt2harness import STATUS, wait_for

OK, MISS = 0, 1


@pytest.fixture
def make_daemon(make_daemon):
    """The conftest factory with every entry stored as a file."""
    def make(*args, **kwargs):
        return make_daemon("--set", "disk.small_entry_max=0", *args, **kwargs)
    return make


def only_entry(cache_dir: Path, ns: str) -> Path:
    files = entry_files(cache_dir, ns)
    assert len(files) == 1, files
    path = files[0]
    # root/v1/<ns>/<2 hex>/<32 hex>
    assert path.parent.name == path.name[:2]
    assert path.parent.parent == Path(cache_dir) / "v1" / ns
    return path


# ---------------------------------------------------------------- eviction


def test_lru_eviction_keeps_recent_and_hot_entries(make_daemon):
    limit = 2 << 20
    d = make_daemon("--set", "disk.max_size=2MiB", "--set", "memory.max_size=0")
    conn = NativeClient(d.socket)
    count, size = 96, 64 << 10  # 6 MiB of incompressible 64 KiB values
    values = {i: os.urandom(size) for i in range(count)}
    hot = range(4)

    def key(i):
        return b"entry-%03d" % i

    for i in range(count):
        assert conn.put("autotune", key(i), values[i]) == STATUS["ok"]
        if i % 8 == 7:
            # Recency is the write's: let the puts before this read land first.
            drain_disk_queue(conn)
            for h in hot:
                status, body = conn.get("autotune", key(h))
                assert (status, body == values[h]) == (STATUS["ok"], True), (i, h)

    drain_disk_queue(conn)
    wait_for(lambda: entry_bytes(d.cache_dir) <= limit, timeout=15,
             what="the disk tier to shrink to disk.max_size")
    files = entry_files(d.cache_dir, "autotune")
    on_disk = entry_bytes(d.cache_dir)
    assert on_disk <= limit
    assert len(files) < count

    present = set()
    for i in range(count):
        status, body = conn.get("autotune", key(i))
        if status == STATUS["ok"]:
            assert body == values[i]
            present.add(i)
        else:
            assert (status, body) == (STATUS["miss"], b"")
    assert len(present) == len(files)
    assert set(hot) <= present, f"hot entries were evicted: {sorted(set(hot) - present)}"
    newest = set(range(count - 8, count))
    assert newest <= present, f"the newest entries were evicted: {sorted(newest - present)}"
    oldest_untouched = set(range(4, 40))
    assert not (oldest_untouched & present), \
        f"old untouched entries survived: {sorted(oldest_untouched & present)}"

    stats = conn.stats()
    disk = stats["namespaces"]["autotune"]["disk"]
    assert disk["evictions"] == count - len(files)
    assert disk["puts"] == count
    assert stats["tiers"]["disk"]["count"] == len(files)
    assert stats["tiers"]["disk"]["bytes"] == on_disk
    assert stats["tiers"]["disk"]["capacity"] == limit
    assert stats["tiers"]["memory"] is None  # memory.max_size=0: no memory tier
    conn.close()


def test_eviction_order_survives_restart(make_daemon):
    # After a restart the LRU order comes from file mtimes.
    d = make_daemon("--set", "disk.max_size=1MiB", "--set", "memory.max_size=0")
    conn = NativeClient(d.socket)
    values = {i: os.urandom(64 << 10) for i in range(12)}  # 768 KiB: fits
    for i, value in values.items():
        assert conn.put("pgo", b"k%d" % i, value) == STATUS["ok"]
        drain_disk_queue(conn)  # written now: each file's mtime is its put's
        time.sleep(0.01)  # distinct mtimes
    time.sleep(0.05)
    assert conn.get("pgo", b"k0")[0] == STATUS["ok"]  # k0 becomes the most recent
    conn.close()
    assert d.stop() == 0
    assert len(entry_files(d.cache_dir, "pgo")) == 12

    d.start()
    conn = NativeClient(d.socket)
    wait_for(lambda: conn.stats()["tiers"]["disk"]["scan_complete"], what="the startup scan")
    # 6 more entries push it over 1 MiB: the least recent go first.
    for i in range(12, 18):
        assert conn.put("pgo", b"k%d" % i, os.urandom(64 << 10)) == STATUS["ok"]
    drain_disk_queue(conn)
    wait_for(lambda: entry_bytes(d.cache_dir) <= 1 << 20, what="eviction after restart")
    assert conn.get("pgo", b"k0")[0] == STATUS["ok"], "the entry read before the restart was evicted"
    assert conn.get("pgo", b"k1")[0] == STATUS["miss"], "the oldest entry survived"
    assert conn.get("pgo", b"k17")[0] == STATUS["ok"]
    conn.close()


# -------------------------------------------------------------- corruption


def corrupt_and_restart(make_daemon, mutate):
    """Puts one entry, stops, mutates its file, restarts; returns (daemon, path)."""
    d = make_daemon()
    value = os.urandom(10_000)
    assert d.cli("put", "fx-graph", "victim", input=value).returncode == OK
    assert d.cli("put", "fx-graph", "bystander", input=b"intact").returncode == OK
    assert d.stop() == 0
    files = entry_files(d.cache_dir, "fx-graph")
    assert len(files) == 2
    # Which file is the victim's: the one holding the 10,000-byte value.
    path = max(files, key=lambda p: p.stat().st_size)
    mutate(path)
    d.start()
    return d, path


def check_corrupt_handled(d, path, reason=None):
    r = d.cli("get", "fx-graph", "victim")
    assert (r.returncode, r.stdout) == (MISS, b""), r.stderr
    assert d.proc.poll() is None, "the daemon died on a broken file"
    stats = d.stats()
    assert stats["namespaces"]["fx-graph"]["disk"]["corrupt"] == 1
    assert stats["namespaces"]["fx-graph"]["disk"]["errors"] == 0
    assert not os.path.lexists(path), "the broken file was left in place"
    log = wait_for_log(d, r"removing broken cache file (\S+): (.*)")
    assert log[1] == str(path)
    if reason:
        assert reason in log[2], log[2]
    # Still serving, including the same key afterwards.
    assert d.cli("ping").returncode == OK
    assert d.cli("get", "fx-graph", "bystander").stdout == b"intact"
    assert d.cli("put", "fx-graph", "victim", input=b"fresh").returncode == OK
    assert d.cli("get", "fx-graph", "victim").stdout == b"fresh"


def test_flipped_byte_is_a_miss_and_removed(make_daemon):
    def flip(path: Path):
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0x40
        path.write_bytes(bytes(data))

    d, path = corrupt_and_restart(make_daemon, flip)
    check_corrupt_handled(d, path, "checksum")


def test_flipped_header_byte(make_daemon):
    def flip(path: Path):
        data = bytearray(path.read_bytes())
        data[0] ^= 0xFF  # magic
        path.write_bytes(bytes(data))

    d, path = corrupt_and_restart(make_daemon, flip)
    check_corrupt_handled(d, path)


def test_header_claiming_huge_payload(make_daemon):
    def enlarge(path: Path):
        data = bytearray(path.read_bytes())
        # payload_length: the last u64 of the 43-byte fixed header.
        data[35:43] = b"\xff" * 8
        path.write_bytes(bytes(data))

    d, path = corrupt_and_restart(make_daemon, enlarge)
    check_corrupt_handled(d, path)


def test_truncated_file_is_a_miss(make_daemon):
    def truncate(path: Path):
        os.truncate(path, path.stat().st_size // 2)

    d, path = corrupt_and_restart(make_daemon, truncate)
    check_corrupt_handled(d, path)


def test_empty_file_is_a_miss(make_daemon):
    d, path = corrupt_and_restart(make_daemon, lambda p: os.truncate(p, 0))
    check_corrupt_handled(d, path)


def test_foreign_file_is_a_miss(make_daemon):
    d, path = corrupt_and_restart(make_daemon, lambda p: p.write_bytes(os.urandom(5000)))
    check_corrupt_handled(d, path)


def test_symlink_at_entry_path_is_not_followed(make_daemon, tmp_root):
    target = tmp_root / "target"
    target.write_bytes(b"secret")

    def link(path: Path):
        path.unlink()
        path.symlink_to(target)

    d, path = corrupt_and_restart(make_daemon, link)
    check_corrupt_handled(d, path)
    assert target.read_bytes() == b"secret"


def test_entry_at_another_keys_path_is_not_served(make_daemon):
    # A valid entry file under the wrong name (another key's hash) is a miss
    # for that key, and left alone.
    d = make_daemon("--set", "memory.max_size=0")
    assert d.cli("put", "pgo", "a", input=b"value of a").returncode == OK
    drain_disk_queue(d)
    path_a = only_entry(d.cache_dir, "pgo")
    assert d.cli("put", "pgo", "b", input=b"value of b").returncode == OK
    drain_disk_queue(d)
    path_b = next(p for p in entry_files(d.cache_dir, "pgo") if p != path_a)
    path_b.write_bytes(path_a.read_bytes())
    r = d.cli("get", "pgo", "b")
    assert (r.returncode, r.stdout) == (MISS, b"")
    assert d.cli("get", "pgo", "a").stdout == b"value of a"
    assert d.stats()["namespaces"]["pgo"]["disk"]["corrupt"] == 0


def test_corruption_while_running_without_memory_tier(make_daemon):
    d = make_daemon("--set", "memory.max_size=0")
    value = os.urandom(100_000)
    assert d.cli("put", "autotune", "k", input=value).returncode == OK
    drain_disk_queue(d)
    path = only_entry(d.cache_dir, "autotune")
    data = bytearray(path.read_bytes())
    data[-20] ^= 1
    path.write_bytes(bytes(data))
    assert d.cli("get", "autotune", "k").returncode == MISS
    assert not path.exists()
    assert d.stats()["namespaces"]["autotune"]["disk"]["corrupt"] == 1


def test_expired_entry_on_disk_is_removed(make_daemon):
    d = make_daemon()
    assert d.cli("put", "pgo", "brief", "--ttl", "1", input=b"v").returncode == OK
    assert d.cli("put", "pgo", "lasting", input=b"w").returncode == OK
    assert d.stop() == 0
    assert len(entry_files(d.cache_dir, "pgo")) == 2
    time.sleep(1.1)
    d.start()
    assert d.cli("ls", "pgo").stdout == b"lasting\n"
    assert d.cli("get", "pgo", "brief").returncode == MISS
    assert len(entry_files(d.cache_dir, "pgo")) == 1, "the expired file was kept"
    assert d.stats()["namespaces"]["pgo"]["disk"]["corrupt"] == 0


# ------------------------------------------------------------- memory tier


def test_memory_only(make_daemon):
    d = make_daemon("--set", "disk.max_size=0", "--set", "memory.max_size=1MiB")
    conn = NativeClient(d.socket)
    values = {b"k%02d" % i: os.urandom(64 << 10) for i in range(40)}  # 2.5 MiB
    conn.put_many("autotune", values, batch=8)
    stats = conn.stats()
    memory = stats["tiers"]["memory"]
    assert stats["tiers"]["disk"] is None
    assert memory["capacity"] == 1 << 20
    assert 0 < memory["bytes"] <= 1 << 20
    evicted = stats["namespaces"]["autotune"]["memory"]["evictions"]
    assert evicted > 0 and memory["count"] == 40 - evicted
    assert conn.get("autotune", b"k39") == (STATUS["ok"], values[b"k39"])
    assert conn.get("autotune", b"k00")[0] == STATUS["miss"]
    listed = []
    cursor = b""
    for _ in range(100):
        cursor, page = conn.list_page("autotune", cursor, 7)
        listed += [k for k, _, _ in page]
        if not cursor:
            break
    assert sorted(listed) == sorted(k for k in values if conn.exists("autotune", k) == 0)
    assert len(listed) == memory["count"]
    conn.close()
    assert entry_files(d.cache_dir) == []


# ------------------------------------------------------------- leftovers


def dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def test_leftover_temp_files_removed_at_startup(make_daemon):
    d = make_daemon()
    assert d.cli("put", "pgo", "k", input=b"v").returncode == OK
    assert d.stop() == 0
    entry = only_entry(d.cache_dir, "pgo")
    shard = entry.parent
    hexname = entry.name
    dead = shard / f".{hexname}.{dead_pid()}.0.tmp"
    unparsable = shard / f".{hexname}.tmp"
    other_ns_dir = d.cache_dir / "v1" / "fx-graph" / "ab"
    other_ns_dir.mkdir(parents=True, mode=0o700)
    elsewhere = other_ns_dir / f".ab{'0' * 30}.{dead_pid()}.7.tmp"
    live = shard / f".{hexname}.{os.getpid()}.1.tmp"  # a writer that may still be running
    for path in (dead, unparsable, elsewhere, live):
        path.write_bytes(b"half-written")

    since = len(d.log())
    d.start()
    m = wait_for_log(d, r"disk cache scan of (\S+): (\d+) files, (\d+) bytes, (\d+) leftover "
                        r"temporary files removed", since=since)
    assert m[1] == str(d.cache_dir)
    assert (int(m[2]), int(m[3]), int(m[4])) == (1, entry.stat().st_size, 3)
    assert not dead.exists() and not unparsable.exists() and not elsewhere.exists()
    assert live.exists(), "a temporary file of a live process was removed"
    assert d.cli("get", "pgo", "k").stdout == b"v"
    assert d.cli("ls", "pgo").stdout == b"k\n"
    assert d.stats()["tiers"]["disk"]["count"] == 1


def test_stray_files_are_ignored(make_daemon):
    d = make_daemon(start=False)
    ns_dir = d.cache_dir / "v1" / "pgo" / "0a"
    ns_dir.mkdir(parents=True, mode=0o700)
    (ns_dir / "README").write_text("not an entry")
    (ns_dir / ("0a" + "z" * 30)).write_text("not hex")
    (d.cache_dir / "v1" / "Not_A_Namespace").mkdir()
    (d.cache_dir / "v1" / "stray-file").write_text("x")
    d.start()
    m = wait_for_log(d, r"disk cache scan of \S+: (\d+) files")
    assert m[1] == "0"
    assert d.cli("ls", "pgo").stdout == b""
    assert d.cli("put", "pgo", "k", input=b"v").returncode == OK
    assert d.cli("get", "pgo", "k").stdout == b"v"
    assert (ns_dir / "README").read_text() == "not an entry"


# ------------------------------------------------------------- compression


@pytest.mark.parametrize("name,value,compressed", [
    ("text-1MiB", (b"def forward(self, x):\n    return x * 2\n" * 30000)[:1 << 20], True),
    ("zeros-64KiB", bytes(64 << 10), True),          # at the threshold: compressed
    ("zeros-under", bytes((64 << 10) - 1), False),   # below it: stored raw
    ("random-1MiB", os.urandom(1 << 20), False),     # incompressible: stored raw
])
def test_compression(make_daemon, name, value, compressed):
    d = make_daemon("--set", "memory.max_size=0")
    assert d.cli("put", "fx-graph", name, input=value).returncode == OK
    drain_disk_queue(d)
    size = only_entry(d.cache_dir, "fx-graph").stat().st_size
    if compressed:
        assert size < len(value) // 10, (size, len(value))
    else:
        assert size > len(value), (size, len(value))
        assert size - len(value) < 200  # header, ns, key and checksum only
    r = d.cli("get", "fx-graph", name)
    assert r.stdout == value
    r = d.cli("ls", "fx-graph", "--long")
    assert r.stdout.decode().split()[0] == str(len(value)), "ls shows the value's size"
    disk = d.stats()["namespaces"]["fx-graph"]["disk"]
    assert (disk["bytes_in"], disk["bytes_out"]) == (len(value), len(value))
