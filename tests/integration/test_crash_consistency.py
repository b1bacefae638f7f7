"""kill -9 under a 16-client write load, through both protocols: after a
restart every acknowledged key reads back with exactly its bytes or, in the
default `async` write mode, as a miss (it was still queued). Wrong bytes are
never acceptable; in `sync` mode neither is a missing acknowledged key."""

from __future__ import annotations

import hashlib
import threading
import time

import pytest
import redis

from integ_helpers import NativeClient, temp_files
from pt2harness import STATUS

NATIVE_WRITERS = 8
RESP_WRITERS = 8
MAX_KEYS_PER_WRITER = 400
LOAD_SECONDS = 2.0


@pytest.fixture
def make_daemon(make_daemon_two_loops):
    """These tests are about threads: two I/O loops."""
    return make_daemon_two_loops


def value_of(key: bytes) -> bytes:
    """Mixed sizes, derived from the key alone, so that any other bytes are wrong."""
    digest = hashlib.sha256(key).digest()
    pick = digest[0]
    if pick < 180:
        size = 100 + int.from_bytes(digest[1:3], "little") % 4000
    elif pick < 245:
        size = 4096 + int.from_bytes(digest[1:3], "little") % (60 << 10)
    else:
        size = (64 << 10) + int.from_bytes(digest[1:4], "little") % (448 << 10)
    return (digest * (size // len(digest) + 1))[:size]


class Writer(threading.Thread):
    """Puts fresh keys until the daemon dies or the key budget is spent;
    remembers each key whose put was acknowledged."""

    def __init__(self, daemon, index: int, resp: bool):
        super().__init__(name=f"writer-{index}", daemon=True)
        self.socket = daemon.socket
        self.index = index
        self.resp = resp
        self.acked: list[bytes] = []

    def key(self, seq: int) -> bytes:
        return b"crash-%s-%02d-%05d" % (b"resp" if self.resp else b"native", self.index, seq)

    def run(self) -> None:
        try:
            if self.resp:
                client = redis.Redis(unix_socket_path=str(self.socket), socket_timeout=10)
                for seq in range(MAX_KEYS_PER_WRITER):
                    key = self.key(seq)
                    if client.set(key, value_of(key)):
                        self.acked.append(key)
            else:
                conn = NativeClient(self.socket, timeout=10)
                for seq in range(MAX_KEYS_PER_WRITER):
                    key = self.key(seq)
                    if conn.put("fx-graph", key, value_of(key)) == STATUS["ok"]:
                        self.acked.append(key)
        except (OSError, EOFError, redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
            pass  # the daemon was killed mid-request: that put was never acknowledged


def load_then_kill(d) -> list[Writer]:
    writers = [Writer(d, i, resp=False) for i in range(NATIVE_WRITERS)]
    writers += [Writer(d, i, resp=True) for i in range(RESP_WRITERS)]
    for w in writers:
        w.start()
    deadline = time.monotonic() + LOAD_SECONDS
    while time.monotonic() < deadline and any(w.is_alive() for w in writers):
        time.sleep(0.05)
    d.kill()  # SIGKILL, mid-load
    for w in writers:
        w.join(timeout=20)
        assert not w.is_alive(), f"{w.name} still blocked after the daemon died"
    return writers


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_kill9_under_write_load(make_daemon, mode):
    d = make_daemon("--set", f"disk.write_mode={mode}")
    writers = load_then_kill(d)
    acked = sum(len(w.acked) for w in writers)
    assert acked > 0, "no put was acknowledged before the kill"

    d.start()
    native = NativeClient(d.socket)
    client = redis.Redis(unix_socket_path=str(d.socket), socket_timeout=10)
    wrong, missing, present = [], 0, 0
    for w in writers:
        for key in w.acked:
            if w.resp:
                got = client.get(key)
                found = got is not None
            else:
                status, got = native.get("fx-graph", key)
                assert status in (STATUS["ok"], STATUS["miss"]), (key, status)
                found = status == STATUS["ok"]
            if not found:
                missing += 1
            elif got != value_of(key):
                wrong.append(key)
            else:
                present += 1
    native.close()

    assert wrong == [], f"{len(wrong)} acknowledged keys read back with wrong bytes"
    if mode == "sync":
        assert missing == 0, f"{missing} of {acked} acknowledged keys lost in sync mode"
    assert present > 0
    # Whatever the kill interrupted is cleaned up by the startup scan.
    d.cli("ping", check=True)
    stats = d.stats()
    assert stats["namespaces"].get("fx-graph", {}).get("disk", {}).get("corrupt", 0) == 0
    assert d.stop() == 0
    assert temp_files(d.cache_dir) == []
