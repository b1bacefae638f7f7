"""The disk tier under filesystem faults: a full filesystem (a small tmpfs,
mounted by the test: needs root, as tools/test runs), small.mdb truncated or
deleted under the daemon, writes that fail. The daemon never dies, never
answers a put's key with the value that put replaced, and recovers when
space comes back."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from integ_helpers import NativeClient, drain_disk_queue
from pt2harness import PT2CACHE_CLI, STATUS, wait_for


@pytest.fixture
def tmpfs(tmp_root):
    """mount(size) -> a fresh tmpfs of `size` under tmp_root; unmounted after."""
    mounted = []

    def mount(size: str, name: str = "fs") -> Path:
        path = tmp_root / name
        path.mkdir(mode=0o700)
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=700", "tmpfs",
                            str(path)], capture_output=True, text=True)
        assert r.returncode == 0, f"these tests mount a tmpfs (run as root): {r.stderr}"
        mounted.append(path)
        return path

    yield mount
    for path in mounted:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(path: Path) -> Path:
    """Fills the filesystem holding `path` with one file; returns it."""
    filler = path / "filler"
    with open(filler, "wb", buffering=0) as out:
        for size in (1 << 16, 4096, 512):
            try:
                for _ in range(1 << 16):
                    out.write(b"\0" * size)
            except OSError:
                pass
    return filler


def test_start_on_a_full_filesystem_does_not_crash(make_daemon, tmpfs):
    """LMDB's new lock file is sparse and written through a mapping: on a
    full filesystem the daemon died of SIGBUS at start (a restart loop under
    systemd). Its blocks are allocated first now: an open error instead."""
    fs = tmpfs("4m")
    filler = fill(fs)
    d = make_daemon("--set", "memory.max_size=0", cache_dir=fs / "cache", start=False)
    (fs / "cache").mkdir(mode=0o700)
    d.start()
    conn = NativeClient(d.socket)
    assert conn.put("autotune", b"k", b"v" * 200) == STATUS["ok"]
    assert d.proc.poll() is None
    assert "small.mdb" in d.log()
    filler.unlink()
    # Space again: a new small entry is stored (in small.mdb or as a file).
    assert conn.put("autotune", b"k2", b"w" * 200) == STATUS["ok"]
    drain_disk_queue(conn)
    assert conn.get("autotune", b"k2") == (STATUS["ok"], b"w" * 200)
    assert d.proc.poll() is None


@pytest.mark.parametrize("size", [0, 4096])
def test_small_mdb_truncated_to_less_than_its_metas(make_daemon, size):
    """A transaction's begin reads the meta pages, outside the fault guard:
    small.mdb truncated below two pages under the daemon killed it at the
    next put or get (SIGBUS). Now the store is quarantined, as for deeper
    truncations."""
    d = make_daemon("--set", "memory.max_size=0", "--set", "disk.write_mode=sync")
    conn = NativeClient(d.socket)
    assert conn.put("pgo", b"a", b"first") == STATUS["ok"]
    os.truncate(d.cache_dir / "small.mdb", size)
    assert conn.put("pgo", b"b", b"second") in (STATUS["ok"], STATUS["storage_error"])
    assert d.proc.poll() is None, d.log()
    assert conn.get("pgo", b"a")[0] in (STATUS["miss"], STATUS["storage_error"])
    assert "LMDB faulted" in d.log()
    assert conn.stats()["daemon"]["small_store_recoveries"] >= 1
    assert conn.put("pgo", b"c", b"third") == STATUS["ok"]
    assert conn.get("pgo", b"c") == (STATUS["ok"], b"third")


def test_quarantine_on_a_full_filesystem_then_space_again(make_daemon, tmpfs):
    """A damaged small.mdb found while the filesystem is full: its
    replacement could not be opened, and that crashed the daemon (SIGBUS in
    the new lock file) or, without the crash, left small entries failing
    ("is closed") until a restart. Now the put fails cleanly, and once
    there is space the store opens again by itself."""
    fs = tmpfs("4m")
    d = make_daemon("--set", "memory.max_size=0", "--set", "disk.write_mode=sync",
                    cache_dir=fs / "cache")
    conn = NativeClient(d.socket)
    small = {b"s%03d" % i: os.urandom(300) for i in range(40)}
    for key, value in small.items():
        assert conn.put("autotune", key, value) == STATUS["ok"]
    os.truncate(d.cache_dir / "small.mdb", 2 * 4096)
    filler = fill(fs)  # after the truncation, which frees space
    assert conn.get("autotune", b"s007")[0] in (STATUS["miss"], STATUS["storage_error"])
    assert d.proc.poll() is None, d.log()
    assert conn.put("autotune", b"new", b"x" * 300) in (STATUS["ok"], STATUS["storage_error"])
    assert d.proc.poll() is None, d.log()
    filler.unlink()
    # Reopened within about a second of the next attempt.
    wait_for(lambda: conn.put("autotune", b"after", b"y" * 300) == STATUS["ok"], timeout=10,
             what="small puts to succeed again")
    assert conn.get("autotune", b"after") == (STATUS["ok"], b"y" * 300)
    for key in list(small)[:5]:
        status, got = conn.get("autotune", key)
        assert status == STATUS["miss"] or got == small[key]
    assert d.proc.poll() is None


def test_a_failed_overwrite_never_brings_the_old_value_back(make_daemon, tmpfs):
    """A put acknowledged from memory whose disk write then failed (a full
    filesystem) left the value it replaced on disk, and a later get served
    that older value. The key is a miss now."""
    fs = tmpfs("8m")
    d = make_daemon("--set", "memory.max_size=0", cache_dir=fs / "cache")
    conn = NativeClient(d.socket)
    old_big, old_small = os.urandom(1 << 20), os.urandom(300)
    assert conn.put("pgo", b"big", old_big) == STATUS["ok"]
    assert conn.put("autotune", b"small", old_small) == STATUS["ok"]
    drain_disk_queue(conn)
    filler = fill(fs)
    new_big, new_small = os.urandom(1 << 20), os.urandom(300)
    assert conn.put("pgo", b"big", new_big) == STATUS["ok"]  # acknowledged from memory
    assert conn.put("autotune", b"small", new_small) == STATUS["ok"]
    drain_disk_queue(conn)
    assert conn.stats()["namespaces"]["pgo"]["disk"]["errors"] >= 1
    assert conn.get("pgo", b"big") == (STATUS["miss"], b"")
    assert conn.get("autotune", b"small") in ((STATUS["miss"], b""), (STATUS["ok"], new_small))
    filler.unlink()
    d.stop()
    d.start()  # and after a restart's scan
    conn = NativeClient(d.socket)
    wait_for(lambda: conn.stats()["tiers"]["disk"]["scan_complete"], what="the startup scan")
    assert conn.get("pgo", b"big") == (STATUS["miss"], b"")
    assert d.proc.poll() is None


def test_a_filesystem_full_below_max_size_makes_room(make_daemon, tmpfs):
    """With disk.max_size above what the filesystem holds, the cache filled
    it and every later put failed: nothing evicted, as the cache was under
    its bound. A write that finds no space now evicts a tenth of the cache."""
    fs = tmpfs("6m")
    d = make_daemon("--set", "memory.max_size=0", "--set", "disk.max_size=64MiB",
                    cache_dir=fs / "cache")
    conn = NativeClient(d.socket)
    values = {}
    for i in range(100):  # until a write fails: 6 MB of files at most
        values[b"e%02d" % i] = os.urandom(100 << 10)
        assert conn.put("fx-graph", b"e%02d" % i, values[b"e%02d" % i]) == STATUS["ok"]
        drain_disk_queue(conn)
        if conn.stats()["namespaces"]["fx-graph"]["disk"]["errors"] > 0:
            break
    assert i < 99
    wait_for(lambda: conn.stats()["namespaces"]["fx-graph"]["disk"]["evictions"] > 0, timeout=30,
             what="eviction on a full filesystem")
    assert "is full below disk.max_size" in d.log()
    fresh = os.urandom(100 << 10)

    def stored() -> bool:
        conn.put("fx-graph", b"fresh", fresh)
        drain_disk_queue(conn)
        return conn.get("fx-graph", b"fresh") == (STATUS["ok"], fresh)

    wait_for(stored, timeout=30, what="a put to find room again")
    for key, value in values.items():
        status, got = conn.get("fx-graph", key)
        assert status == STATUS["miss"] or got == value, key
    assert d.proc.poll() is None


def test_an_address_space_limit_shrinks_the_map(tmp_root):
    """Under `ulimit -v` below twice disk.max_size, small.mdb's map did not
    fit and small entries went to files beside it: those in small.mdb were
    misses, and one removed meanwhile came back after the next start. The
    map is halved until it fits now."""
    import resource
    import signal
    root = tmp_root / "d"
    root.mkdir(mode=0o700)
    cmd = [os.environ.get("PT2CACHED", "pt2cached"), "--socket", str(root / "s"), "--cache-dir",
           str(root / "c"), "--set", "memory.max_size=0", "--log-level", "info"]
    log = root / "log"

    def start(limit=None):
        def preexec():
            if limit:
                resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        with open(log, "ab") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, preexec_fn=preexec)
        wait_for(lambda: (root / "s").exists() or proc.poll() is not None, what="pt2cached")
        assert proc.poll() is None, log.read_text()
        return proc

    proc = start()
    conn = NativeClient(root / "s")
    assert conn.put("autotune", b"k", b"v" * 200) == STATUS["ok"]
    drain_disk_queue(conn)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    proc = start(limit=4 << 30)  # the default map is 20 GiB
    try:
        conn = NativeClient(root / "s")
        assert conn.get("autotune", b"k") == (STATUS["ok"], b"v" * 200)
        assert "a quarter of the address space limit" in log.read_text()
        assert "stored as files" not in log.read_text()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)


def test_small_mdb_removed_under_the_daemon_is_replaced(make_daemon):
    """small.mdb deleted (with the whole cache directory) while the daemon
    ran: acknowledged sync puts went on into the unlinked file, all lost at
    the next start. The store is replaced within about a second now, and
    later puts land in the new file."""
    import shutil
    d = make_daemon("--set", "memory.max_size=0", "--set", "disk.write_mode=sync")
    conn = NativeClient(d.socket)
    assert conn.put("autotune", b"before", b"b" * 200) == STATUS["ok"]
    shutil.rmtree(d.cache_dir)
    wait_for(lambda: "removed or replaced under the daemon" in d.log(), timeout=10,
             what="the deleted store to be noticed")
    wait_for(lambda: conn.put("autotune", b"after", b"a" * 200) == STATUS["ok"], timeout=10,
             what="a put to succeed again")
    assert (d.cache_dir / "small.mdb").exists()
    assert d.stop() == 0
    d.start()
    conn = NativeClient(d.socket)
    assert conn.get("autotune", b"after") == (STATUS["ok"], b"a" * 200)
    assert conn.get("autotune", b"before") == (STATUS["miss"], b"")


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_entry_larger_than_max_size_evicts_nothing(make_daemon, mode):
    """A put of more than disk.max_size was written, then evicted with every
    other entry of the tier: one such put emptied the cache."""
    d = make_daemon("--set", "memory.max_size=0", "--set", "disk.max_size=1MiB", "--set",
                    f"disk.write_mode={mode}")
    conn = NativeClient(d.socket)
    small = {b"s%02d" % i: os.urandom(200) for i in range(20)}
    conn.put_many("autotune", small)
    drain_disk_queue(conn)
    status = conn.put("pgo", b"big", os.urandom(2 << 20))
    assert status == STATUS["ok"] if mode == "async" else status != STATUS["ok"]
    drain_disk_queue(conn)
    assert conn.get("pgo", b"big") == (STATUS["miss"], b"")
    for key, value in small.items():
        assert conn.get("autotune", key) == (STATUS["ok"], value)
    assert "does not fit disk.max_size" in d.log() or mode == "sync"


def test_a_replaced_small_value_never_comes_back(make_daemon, tmpfs):
    """On a full filesystem the put replacing a small entry failed, and so
    did LMDB's delete of the old copy (deletes need pages too): the index
    forgot the key, but small.mdb kept the old value, served again after a
    clean restart (and at once, when the new value was a file). The copy is
    deleted as soon as LMDB can now; a stop that cannot exits 1."""
    fs = tmpfs("4m")
    d = make_daemon("--set", "memory.max_size=0", cache_dir=fs / "cache")
    conn = NativeClient(d.socket)
    old = {b"k%02d" % i: b"A" * 900 for i in range(30)}
    conn.put_many("pgo", old)
    drain_disk_queue(conn)
    filler = fill(fs)
    new = {key: (os.urandom(40000) if i % 2 else os.urandom(900))
           for i, key in enumerate(old)}  # files and small entries
    for key, value in new.items():
        assert conn.put("pgo", key, value) == STATUS["ok"]
    drain_disk_queue(conn)
    for key, value in new.items():
        status, got = conn.get("pgo", key)
        assert status == STATUS["miss"] or got == value, key
    filler.unlink()
    time.sleep(2.5)  # the evictor's passes retry the deletes
    assert d.stop() == 0, d.log()[-2000:]
    d.start()
    conn = NativeClient(d.socket)
    wait_for(lambda: conn.stats()["tiers"]["disk"]["scan_complete"], what="the startup scan")
    for key, value in new.items():
        status, got = conn.get("pgo", key)
        assert status == STATUS["miss"] or got == value, (key, got[:8])


# Holds a read transaction on small.mdb from another process: LMDB then
# cannot reuse the pages that transaction sees, so on a full filesystem its
# deletes fail too (they need new pages).
PINNING_READER = r"""
#include <lmdb.h>
#include <stdio.h>
#include <unistd.h>
int main(int argc, char** argv) {
    MDB_env* env;
    MDB_txn* txn;
    (void)argc;
    if (mdb_env_create(&env) || mdb_env_set_maxdbs(env, 4) ||
        mdb_env_open(env, argv[1], MDB_NOSUBDIR | MDB_RDONLY | MDB_NOTLS, 0600) ||
        mdb_txn_begin(env, NULL, MDB_RDONLY, &txn)) {
        return 1;
    }
    printf("holding\n");
    fflush(stdout);
    char byte;
    (void)!read(0, &byte, 1); /* until stdin closes */
    mdb_txn_abort(txn);
    mdb_env_close(env);
    return 0;
}
"""


@pytest.mark.parametrize("pinned_at_stop", [False, True], ids=["deleted-later", "stop-removes"])
def test_replaced_values_whose_delete_fails_are_never_served(make_daemon, tmpfs, tmp_root,
                                                             pinned_at_stop):
    """Puts over small entries failed on a full filesystem, and so did the
    deletes of the old copies. The index forgot the keys, but every read
    that did not ask it (a store with a remote tier configured, export,
    ls) served the old values, and a restart indexed them again. They are
    misses everywhere now, and a stop that cannot delete them removes
    small.mdb (exit 1)."""
    reader_bin = tmp_root / "pin"
    (tmp_root / "pin.c").write_text(PINNING_READER)
    subprocess.run(["cc", "-O1", "-o", str(reader_bin), str(tmp_root / "pin.c"), "-llmdb"],
                   check=True, capture_output=True, timeout=60)
    fs = tmpfs("4m")
    # A remote tier that is never reachable: reads then go through the
    # store's general path, not the index's quick answer.
    d = make_daemon("--set", "memory.max_size=0", "--set", "remote.pgo=true", "--set",
                    "remote.unix_socket=/nonexistent/redis.sock", cache_dir=fs / "cache")
    conn = NativeClient(d.socket)
    old = {b"k%02d" % i: b"OLD%02d" % i * 150 for i in range(30)}
    conn.put_many("pgo", old)
    drain_disk_queue(conn)
    pin = subprocess.Popen([str(reader_bin), str(d.cache_dir / "small.mdb")],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert pin.stdout.readline() == b"holding\n"
        filler = fill(fs)
        new = {key: os.urandom(40000 if i % 2 else 900) for i, key in enumerate(old)}
        for key, value in new.items():
            assert conn.put("pgo", key, value) == STATUS["ok"]
        drain_disk_queue(conn)

        def never_old(label):
            for key, value in new.items():
                status, got = conn.get("pgo", key)
                assert status == STATUS["miss"] or got == value, (label, key, got[:6])

        never_old("full")
        exported = subprocess.run([PT2CACHE_CLI, "--socket", str(d.socket), "export"],
                                  capture_output=True, timeout=60)
        assert exported.returncode == 0
        assert b"OLD" not in subprocess.run(["zstd", "-dc"], input=exported.stdout[8:],
                                            capture_output=True).stdout
        listed = subprocess.run([PT2CACHE_CLI, "--socket", str(d.socket), "ls", "pgo"],
                                capture_output=True, timeout=60)
        assert listed.stdout.count(b"\n") <= sum(1 for v in new.values() if len(v) > 1000)
        if pinned_at_stop:  # the deletes still fail at the stop
            assert d.stop() == 1
            assert "could not be deleted from" in d.log() and "removed it" in d.log()
            assert not (d.cache_dir / "small.mdb").exists()
    finally:
        pin.stdin.close()
        pin.wait(10)
    filler.unlink()
    if not pinned_at_stop:
        time.sleep(2.5)  # with space again, an evictor pass deletes them
        never_old("space again")
        assert d.stop() == 0, d.log()[-1500:]
    d.start()
    conn = NativeClient(d.socket)
    wait_for(lambda: conn.stats()["tiers"]["disk"]["scan_complete"], what="the startup scan")
    never_old("after a restart")
