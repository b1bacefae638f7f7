"""The disk tier with `disk.write_mode = "async"`: puts are answered once
queued, written behind, and everything queued is on disk after a SIGTERM."""

from __future__ import annotations

import os
import threading

import pytest

from integ_helpers import (NativeClient, clean_env, entry_files, run_daemon_once, temp_files,
                           wait_for_log)
from pt2harness import STATUS

ASYNC = ("--set", "disk.write_mode=async")


@pytest.fixture
def make_daemon(make_daemon):
    """These tests count entry files: every entry a file."""
    def make(*args, **kwargs):
        return make_daemon("--set", "disk.small_entry_max=0", *args, **kwargs)
    return make


def test_async_puts_survive_sigterm_and_restart(make_daemon):
    # No memory tier: every get below is answered by the disk tier (its queue
    # or its files).
    d = make_daemon(*ASYNC, "--set", "memory.max_size=0")
    wait_for_log(d, r"disk tier: asynchronous writes")
    conn = NativeClient(d.socket)
    count = 2000
    values = {b"key-%05d" % i: os.urandom(64 + i % 512) for i in range(count)}
    conn.put_many("fx-graph", values)

    # Read your writes, whether still queued or already written.
    for key in list(values)[-50:]:
        assert conn.get("fx-graph", key) == (STATUS["ok"], values[key])
    assert conn.exists("fx-graph", b"key-01999") == STATUS["ok"]
    disk = conn.stats()["namespaces"]["fx-graph"]["disk"]
    assert disk["puts"] == count
    assert disk["bytes_in"] == sum(len(v) for v in values.values())
    conn.close()

    assert d.stop() == 0  # SIGTERM: the queue is written before exit
    assert len(entry_files(d.cache_dir, "fx-graph")) == count
    assert temp_files(d.cache_dir) == []

    d.start()
    conn = NativeClient(d.socket)
    for key, value in values.items():
        assert conn.get("fx-graph", key) == (STATUS["ok"], value), key
    stats = conn.stats()
    assert stats["namespaces"]["fx-graph"]["disk"]["hits"] == count
    assert stats["namespaces"]["fx-graph"]["disk"]["errors"] == 0
    conn.close()


def test_async_delete_of_a_queued_entry_is_final(make_daemon):
    d = make_daemon(*ASYNC, "--set", "memory.max_size=0")
    conn = NativeClient(d.socket)
    for i in range(200):
        key = b"k%03d" % i
        assert conn.put("autotune", key, b"v" * 100) == STATUS["ok"]
        assert conn.delete("autotune", key) == STATUS["ok"]
        assert conn.get("autotune", key) == (STATUS["miss"], b"")
    conn.close()
    assert d.stop() == 0
    assert entry_files(d.cache_dir, "autotune") == []


def test_print_config_shows_write_mode(tmp_root):
    env = clean_env(HOME=str(tmp_root / "home"), XDG_CONFIG_HOME=str(tmp_root / "cfghome"))
    default = run_daemon_once("--print-config", env=env)
    assert default.returncode == 0
    lines = default.stdout.decode().splitlines()
    assert 'disk.write_mode = "async"  # default' in lines
    assert 'disk.write_queue_size = 67108864  # default' in lines

    chosen = run_daemon_once("--print-config", "--set", "disk.write_mode=sync", env=env)
    assert chosen.returncode == 0
    assert 'disk.write_mode = "sync"  # flag' in chosen.stdout.decode().splitlines()

    bad = run_daemon_once("--print-config", "--set", "disk.write_mode=later", env=env)
    assert bad.returncode == 2
    assert bad.stderr.decode().strip() == (
        'pt2cached: command line: disk.write_mode: expected one of sync, async; got "later"')


def test_a_full_queue_slows_writers_and_drops_nothing(make_daemon):
    # 16 writers push 48 MiB through a 1 MiB queue: puts wait for room.
    d = make_daemon("--set", "disk.write_queue_size=1MiB", "--set", "memory.max_size=0")
    values = {b"w%02d-%02d" % (w, i): os.urandom(192 << 10) for w in range(16) for i in range(16)}
    errors = []

    def writer(w):
        conn = NativeClient(d.socket)
        for i in range(16):
            key = b"w%02d-%02d" % (w, i)
            if conn.put("fx-graph", key, values[key]) != STATUS["ok"]:
                errors.append(key)
        conn.close()

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    conn = NativeClient(d.socket)
    queue = conn.stats()["tiers"]["disk"]["write_queue"]
    assert queue["bytes"] <= 1 << 20 or queue["entries"] == 1
    for key, value in values.items():
        assert conn.get("fx-graph", key) == (STATUS["ok"], value), key
    conn.close()
    assert d.stop() == 0
    assert len(entry_files(d.cache_dir, "fx-graph")) == len(values)
