"""`pt2cache export` and `pt2cache import` between real daemons (docs/archive.md,
docs/protocol.md "Export and import")."""

from __future__ import annotations

import os
import re
import struct
import subprocess
import sys
import threading
import time
from contextlib import closing

import pytest
from integ_helpers import NativeClient
from pt2harness import PT2CACHE_CLI, key_body

OK, USAGE = 0, 2
DUMP, RESTORE = 0x0C, 0x0D
ST_OK, ST_MISS, ST_NOT_STORED = 0, 1, 2
BEST = "a" * 64 + ".best_config"

# (namespace, key, size): every well-known namespace, binary keys, empty and
# larger values.
ENTRIES = [
    ("fx-graph", b"fxgraph-1", 1000),
    ("fx-graph", b"fxgraph-2", 0),
    ("aot-autograd", b"aot-1", 70_000),
    ("autotune", BEST.encode(), 40),
    ("autotune", b"remote::inner", 50),
    ("autotune-bundle", b"b" * 64, 300),
    ("pgo", b"pgo-1", 5000),
    ("redis", b"\x00\xffbinary key", 10),
    ("my-own-ns", b"k" * 1024, 1 << 20),
]


def err(result) -> str:
    return result.stderr.decode(errors="replace")


def out(result) -> str:
    return result.stdout.decode(errors="replace")


def value_for(ns: str, key: bytes, size: int) -> bytes:
    seed = (ns.encode() + key) * 3
    return (os.urandom(size // 2) + seed * (size // max(len(seed), 1) + 1))[:size]


def dump(client: NativeClient, ns: str, key: bytes) -> tuple[int, int, bytes] | None:
    status, body = client.request(DUMP, key_body(ns, key))
    if status == ST_MISS:
        return None
    assert status == ST_OK, status
    created, expires = struct.unpack_from("<QQ", body)
    return created, expires, body[16:]


def restore(client: NativeClient, ns: str, key: bytes, value: bytes, created_ms: int,
            expires_ms: int = 0, replace=False) -> int:
    body = key_body(ns, key) + struct.pack("<QQ", created_ms, expires_ms) + value
    return client.request(RESTORE, body, flags=1 if replace else 0)[0]


def fill(daemon, entries=ENTRIES) -> dict:
    values = {}
    with closing(NativeClient(daemon.socket)) as c:
        for ns, key, size in entries:
            values[(ns, key)] = value_for(ns, key, size)
            assert c.put(ns, key, values[(ns, key)]) == ST_OK
        # One entry that expires in an hour keeps its expiry.
        assert c.put("pgo", b"expiring", b"soon", ttl_ms=3_600_000) == ST_OK
        values[("pgo", b"expiring")] = b"soon"
    return values


def everything(daemon, keys) -> dict:
    with closing(NativeClient(daemon.socket)) as c:
        return {k: dump(c, *k) for k in keys}


def imported_count(result) -> int:
    match = re.search(r"imported (\d+) entries", out(result))
    assert match, out(result) + err(result)
    return int(match.group(1))


def skipped_count(result) -> int:
    match = re.search(r"skipped (\d+) already present", out(result))
    assert match, out(result)
    return int(match.group(1))


@pytest.fixture
def two(make_daemon):
    return make_daemon(sub="a"), make_daemon(sub="b")


def test_round_trip_between_two_daemons_is_exact(two, tmp_root):
    a, b = two
    values = fill(a)
    archive = tmp_root / "cache.p2ca"
    exported = a.cli("export", "-o", str(archive))
    assert exported.returncode == OK, err(exported)
    assert f"exported {len(values)} entries" in err(exported)
    assert archive.read_bytes()[:4] == b"P2CA"

    result = b.cli("import", str(archive))
    assert result.returncode == OK, err(result)
    assert imported_count(result) == len(values)
    source = everything(a, values)
    copied = everything(b, values)
    for k, v in values.items():
        assert copied[k] is not None, k
        assert copied[k] == source[k], k  # bytes, created_ms and expires_ms
        assert copied[k][2] == v
    assert copied[("pgo", b"expiring")][1] != 0
    # A GET through the normal path hits too.
    with closing(NativeClient(b.socket)) as c:
        assert c.get("autotune", BEST.encode()) == (ST_OK, values[("autotune", BEST.encode())])


def test_export_piped_into_import(two):
    a, b = two
    values = fill(a)
    exporter = subprocess.Popen([PT2CACHE_CLI, "--socket", str(a.socket), "export"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    importer = subprocess.run([PT2CACHE_CLI, "--socket", str(b.socket), "import", "-"],
                              stdin=exporter.stdout, capture_output=True, timeout=60)
    exporter.stdout.close()
    assert exporter.wait(60) == OK, exporter.stderr.read()
    exporter.stderr.close()
    assert importer.returncode == OK, err(importer)
    assert imported_count(importer) == len(values)
    assert everything(b, values) == everything(a, values)


def test_import_is_idempotent(two, tmp_root):
    a, b = two
    values = fill(a)
    archive = tmp_root / "x.p2ca"
    assert a.cli("export", "-o", str(archive)).returncode == OK
    first = b.cli("import", str(archive))
    assert imported_count(first) == len(values)
    second = b.cli("import", str(archive))
    assert second.returncode == OK, err(second)
    assert imported_count(second) == 0
    assert skipped_count(second) == len(values)
    # Importing into the source changes nothing either.
    again = a.cli("import", str(archive))
    assert (imported_count(again), skipped_count(again)) == (0, len(values))


def test_newer_entries_are_kept_unless_overwrite(two, tmp_root):
    a, b = two
    now = int(time.time() * 1000)
    with closing(NativeClient(a.socket)) as ca, closing(NativeClient(b.socket)) as cb:
        assert restore(ca, "pgo", b"newer-here", b"archive", now - 60_000) == ST_OK
        assert restore(cb, "pgo", b"newer-here", b"target", now) == ST_OK
        assert restore(ca, "pgo", b"older-here", b"archive", now) == ST_OK
        assert restore(cb, "pgo", b"older-here", b"target", now - 60_000) == ST_OK
    archive = tmp_root / "x.p2ca"
    assert a.cli("export", "-o", str(archive)).returncode == OK
    result = b.cli("import", str(archive))
    assert (imported_count(result), skipped_count(result)) == (1, 1), out(result)
    with closing(NativeClient(b.socket)) as cb:
        assert dump(cb, "pgo", b"newer-here")[2] == b"target"
        assert dump(cb, "pgo", b"older-here")[2] == b"archive"
    forced = b.cli("import", "--overwrite", str(archive))
    assert forced.returncode == OK, err(forced)
    assert imported_count(forced) == 2
    with closing(NativeClient(b.socket)) as cb:
        assert dump(cb, "pgo", b"newer-here") == (now - 60_000, 0, b"archive")


def test_namespace_and_since_filters(two, tmp_root):
    a, b = two
    now = int(time.time() * 1000)
    with closing(NativeClient(a.socket)) as c:
        for ns in ("fx-graph", "pgo", "autotune"):
            assert restore(c, ns, b"old", b"o", now - 3 * 3600_000) == ST_OK
            assert restore(c, ns, b"new", b"n", now - 60_000) == ST_OK
    archive = tmp_root / "x.p2ca"

    def keys_in(*args) -> set:
        b.cli("clear", "fx-graph", "--yes")
        b.cli("clear", "pgo", "--yes")
        b.cli("clear", "autotune", "--yes")
        result = a.cli("export", "-o", str(archive), *args)
        assert result.returncode == OK, err(result)
        assert b.cli("import", str(archive)).returncode == OK
        with closing(NativeClient(b.socket)) as c:
            return {(ns, k) for ns in ("fx-graph", "pgo", "autotune") for k in (b"old", b"new")
                    if dump(c, ns, k) is not None}

    assert keys_in("--ns", "pgo", "--ns", "autotune") == {
        ("pgo", b"old"), ("pgo", b"new"), ("autotune", b"old"), ("autotune", b"new")}
    assert keys_in("--since", "1h") == {("fx-graph", b"new"), ("pgo", b"new"),
                                        ("autotune", b"new")}
    assert keys_in("--since", "4h", "--ns", "fx-graph") == {("fx-graph", b"old"),
                                                           ("fx-graph", b"new")}


def make_big_archive(a, tmp_root, count=60, size=40_000):
    with closing(NativeClient(a.socket)) as c:
        for i in range(count):
            assert c.put("fx-graph", b"k%03d" % i, os.urandom(size)) == ST_OK
    archive = tmp_root / "big.p2ca"
    assert a.cli("export", "-o", str(archive)).returncode == OK
    return archive, count


def test_flipped_byte_imports_nothing_past_the_damage(two, tmp_root):
    a, b = two
    archive, count = make_big_archive(a, tmp_root)
    data = bytearray(archive.read_bytes())
    data[len(data) // 2] ^= 0x20
    damaged = tmp_root / "damaged.p2ca"
    damaged.write_bytes(bytes(data))
    result = b.cli("import", str(damaged))
    assert result.returncode == USAGE
    match = re.search(r"damaged at record (\d+) \(byte (\d+) of the uncompressed stream",
                      err(result))
    assert match, err(result)
    record = int(match.group(1))
    imported = imported_count(result)
    assert 0 < record <= count and imported == record - 1
    # Exactly the records before the damage are there, nothing after.
    order = scan_order(archive)
    assert len(order) == count
    with closing(NativeClient(b.socket)) as c:
        present = [dump(c, "fx-graph", k) is not None for k in order]
    assert present == [True] * imported + [False] * (count - imported)


def scan_order(archive) -> list[bytes]:
    """The keys of an intact archive's entry records, in order, decoded here
    (libzstd through ctypes) as docs/archive.md describes them."""
    import ctypes
    zstd = ctypes.CDLL("libzstd.so.1")
    zstd.ZSTD_getFrameContentSize.restype = ctypes.c_ulonglong
    zstd.ZSTD_decompress.restype = ctypes.c_size_t
    data = archive.read_bytes()[8:]
    size = zstd.ZSTD_getFrameContentSize(data, len(data))
    if size >= (1 << 63):
        size = 64 << 20
    buf = ctypes.create_string_buffer(size)
    n = zstd.ZSTD_decompress(buf, size, data, len(data))
    stream = buf.raw[:n]
    keys, pos = [], 0
    while stream[pos] == 1:
        ns_len = stream[pos + 1]
        (key_len,) = struct.unpack_from("<H", stream, pos + 2 + ns_len)
        key = stream[pos + 4 + ns_len:pos + 4 + ns_len + key_len]
        (value_size,) = struct.unpack_from("<Q", stream, pos + 4 + ns_len + key_len + 16)
        keys.append(key)
        pos += 4 + ns_len + key_len + 24 + value_size + 8
    return keys


def test_truncated_archive_is_reported(two, tmp_root):
    a, b = two
    archive, count = make_big_archive(a, tmp_root)
    data = archive.read_bytes()
    for cut in (len(data) - 1, len(data) // 3, 5):
        short = tmp_root / "short.p2ca"
        short.write_bytes(data[:cut])
        result = b.cli("import", str(short))
        assert result.returncode == USAGE, out(result)
        assert "damaged at" in err(result) and "nothing after it was imported" in err(result)
        assert imported_count(result) < count or cut == len(data) - 1
        assert ("truncated" if cut > 8 else "shorter than the 8-byte header") in err(result)


def test_not_an_archive_and_bad_arguments(daemon, tmp_root):
    junk = tmp_root / "junk"
    junk.write_bytes(b"hello world, not an archive")
    result = daemon.cli("import", str(junk))
    assert result.returncode == USAGE and "not a pt2cache archive" in err(result)
    assert daemon.cli("import", str(tmp_root / "missing")).returncode == USAGE
    assert daemon.cli("export", "--since", "soon", "-o", str(tmp_root / "x")).returncode == USAGE
    assert daemon.cli("export", "--ns", "Bad NS", "-o", str(tmp_root / "x")).returncode == USAGE
    assert not (tmp_root / "x").exists()


def test_import_while_the_daemon_serves(two, tmp_root):
    a, b = two
    archive, count = make_big_archive(a, tmp_root, count=200, size=20_000)
    errors, served = [], [0]
    stop = threading.Event()

    def client_loop():
        try:
            with closing(NativeClient(b.socket)) as c:
                deadline = time.monotonic() + 60
                while not stop.is_set() and time.monotonic() < deadline:
                    key = b"other-%d" % served[0]
                    assert c.put("pgo", key, key * 10) == ST_OK
                    assert c.get("pgo", key) == (ST_OK, key * 10)
                    served[0] += 1
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    thread = threading.Thread(target=client_loop)
    thread.start()
    try:
        result = b.cli("import", str(archive), timeout=60)
    finally:
        stop.set()
        thread.join(70)
    assert result.returncode == OK, err(result)
    assert imported_count(result) == count
    assert not errors, errors
    assert served[0] > 0
    # What the other client wrote is exported too, along with the import.
    again = tmp_root / "again.p2ca"
    exported = b.cli("export", "-o", str(again))
    assert f"exported {count + served[0]} entries" in err(exported)


def test_export_memory_is_bounded(daemon, tmp_root):
    """96 MiB of values export with the CLI's peak RSS far below that."""
    with closing(NativeClient(daemon.socket)) as c:
        for i in range(96):
            assert c.put("fx-graph", b"big-%d" % i, os.urandom(1 << 20)) == ST_OK
    archive = tmp_root / "big.p2ca"
    measure = ("import resource, subprocess, sys\n"
               "rc = subprocess.run(sys.argv[1:]).returncode\n"
               "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
               "sys.exit(rc)\n")
    result = subprocess.run([sys.executable, "-c", measure, PT2CACHE_CLI, "--socket",
                             str(daemon.socket), "export", "-o", str(archive)],
                            capture_output=True, timeout=120)
    assert result.returncode == OK, err(result)
    peak_kib = int(out(result).split()[-1])
    assert archive.stat().st_size > 96 << 20
    assert peak_kib < 40 * 1024, f"export peak RSS {peak_kib} KiB"


def test_round_trip_with_async_disk_writes(make_daemon, tmp_root):
    """With write-behind disk writes, SCAN still sees what was just stored."""
    a = make_daemon("--set", "disk.write_mode=async", sub="a")
    b = make_daemon("--set", "disk.write_mode=async", sub="b")
    values = fill(a)
    archive = tmp_root / "x.p2ca"
    assert a.cli("export", "-o", str(archive)).returncode == OK
    result = b.cli("import", str(archive))
    assert imported_count(result) == len(values), out(result)
    assert everything(b, values) == everything(a, values)
    again = tmp_root / "again.p2ca"
    assert f"exported {len(values)} entries" in err(b.cli("export", "-o", str(again)))
