"""Helpers shared by the integration tests: a small native-protocol client on top
of pt2harness.RawConnection, cache-directory inspection and process helpers.

Kept here rather than in pt2harness.py so that this suite can grow its helpers
without touching the shared harness.
"""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import time
from pathlib import Path

from pt2harness import (OP, PT2CACHE_CLI, PT2CACHED, STATUS, RawConnection,  # noqa: F401
                        drain_disk_queue, error_message, frame, key_body, wait_for)

ENTRY_NAME = re.compile(r"^[0-9a-f]{32}$")
ENTRY_MAGIC = b"P2CE"


# The most a PUT body adds to its value: namespace (with its length byte),
# key (with its length), TTL, and slack.
PUT_OVERHEAD = 1 + 32 + 2 + 1024 + 8 + 8


def put_body(ns: str, key: bytes, value: bytes, ttl_ms: int = 0) -> bytes:
    return key_body(ns, key) + struct.pack("<Q", ttl_ms) + value


def list_body(ns: str, cursor: bytes = b"", limit: int = 1000) -> bytes:
    nsb = ns.encode()
    return (struct.pack("<B", len(nsb)) + nsb + struct.pack("<H", len(cursor)) + cursor +
            struct.pack("<I", limit))


def parse_list(body: bytes) -> tuple[bytes, list[tuple[bytes, int, int]]]:
    (clen,) = struct.unpack_from("<H", body, 0)
    cursor = body[2:2 + clen]
    pos = 2 + clen
    (count,) = struct.unpack_from("<I", body, pos)
    pos += 4
    entries = []
    for _ in range(count):
        (klen,) = struct.unpack_from("<H", body, pos)
        pos += 2
        key = body[pos:pos + klen]
        pos += klen
        size, mtime = struct.unpack_from("<QQ", body, pos)
        pos += 16
        entries.append((key, size, mtime))
    assert pos == len(body), f"LIST reply has {len(body) - pos} trailing bytes"
    return cursor, entries


class NativeClient(RawConnection):
    """A greeted native connection with one method per op (one request at a time)."""

    def __init__(self, path, timeout=20.0, hello=True):
        super().__init__(path, timeout=timeout)
        self._next_id = 100
        if hello:
            self.hello()

    def request(self, op: int, body: bytes = b"", flags: int = 0) -> tuple[int, bytes]:
        self._next_id += 1
        rid = self._next_id
        self.send(frame(op, body, flags=flags, rid=rid))
        rop, status, got_id, reply = self.reply()
        assert (rop, got_id) == (op, rid), f"reply op/id {rop}/{got_id}, sent {op}/{rid}"
        return status, reply

    def ping(self, payload: bytes = b"ping") -> None:
        status, body = self.request(OP["ping"], payload)
        assert (status, body) == (STATUS["ok"], payload)

    def put(self, ns: str, key: bytes, value: bytes, ttl_ms: int = 0, nx=False) -> int:
        status, body = self.request(OP["put"], put_body(ns, key, value, ttl_ms),
                                    flags=1 if nx else 0)
        if status < 0x10:
            assert body == b""
        return status

    def get(self, ns: str, key: bytes) -> tuple[int, bytes]:
        return self.request(OP["get"], key_body(ns, key))

    def exists(self, ns: str, key: bytes) -> int:
        return self.request(OP["exists"], key_body(ns, key))[0]

    def delete(self, ns: str, key: bytes) -> int:
        return self.request(OP["delete"], key_body(ns, key))[0]

    def stats(self) -> dict:
        status, body = self.request(OP["stats"])
        assert status == STATUS["ok"], status
        return json.loads(body)

    def list_page(self, ns: str, cursor: bytes = b"", limit: int = 1000):
        status, body = self.request(OP["list"], list_body(ns, cursor, limit))
        assert status == STATUS["ok"], (status, body)
        return parse_list(body)

    def put_many(self, ns: str, items: dict[bytes, bytes], batch: int = 64) -> None:
        """Pipelined PUTs, `batch` requests per round trip; every one must be OK."""
        pending = list(items.items())
        for start in range(0, len(pending), batch):
            chunk = pending[start:start + batch]
            ids = []
            data = b""
            for key, value in chunk:
                self._next_id += 1
                ids.append(self._next_id)
                data += frame(OP["put"], put_body(ns, key, value), rid=self._next_id)
            self.send(data)
            for rid in ids:
                op, status, got, body = self.reply()
                assert (op, status, got, body) == (OP["put"], STATUS["ok"], rid, b"")


def error_reply(conn: RawConnection) -> tuple[int, int, int, str]:
    """(op, status, id, message) of an error frame."""
    op, status, rid, body = conn.reply()
    assert status >= 0x10, f"expected an error status, got {status:#x}"
    message = error_message(body)
    assert len(body) == 2 + len(message.encode()), "error body has trailing bytes"
    return op, status, rid, message


def entry_files(cache_dir: Path, ns: str | None = None) -> list[Path]:
    """Every entry file (32 hex digits) under cache_dir/v1[/ns]."""
    base = Path(cache_dir) / "v1"
    if ns is not None:
        base = base / ns
    if not base.exists():
        return []
    return sorted(p for p in base.rglob("*") if p.is_file() and ENTRY_NAME.match(p.name))


def temp_files(cache_dir: Path) -> list[Path]:
    base = Path(cache_dir) / "v1"
    if not base.exists():
        return []
    return sorted(p for p in base.rglob("*.tmp"))


def entry_bytes(cache_dir: Path) -> int:
    """The space the disk tier's entries take as `du` counts it, what
    disk.max_size bounds: the allocated blocks of the entry files and of
    small.mdb (directories and the LMDB lock file are not counted)."""
    total = 0
    for path in entry_files(cache_dir) + [Path(cache_dir) / "small.mdb"]:
        try:
            total += path.stat().st_blocks * 512
        except FileNotFoundError:
            pass  # evicted while we looked, or no small.mdb
    return total


def vm_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS line")


def clean_env(**extra: str) -> dict:
    """This process's environment without the settings pt2cached reads."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TORCHINDUCTOR_", "TORCH_COMPILE_", "TORCH_DYNAMO_",
                                "PT2CACHE_", "XDG_"))}
    env["PT2CACHE_CLI"] = PT2CACHE_CLI
    env.update(extra)
    return env


def run_daemon_once(*args: str, env: dict, timeout=15) -> subprocess.CompletedProcess:
    """pt2cached run to completion (e.g. --print-config, or a start that must fail)."""
    return subprocess.run([PT2CACHED, *args], capture_output=True, env=env, timeout=timeout)


def wait_for_log(daemon, pattern: str, timeout=10.0, since: int = 0) -> re.Match:
    """The first match of `pattern` in the daemon log from character `since` on."""
    found: list[re.Match] = []

    def check():
        m = re.search(pattern, daemon.log()[since:])
        if m:
            found.append(m)
        return bool(m)

    wait_for(check, timeout=timeout, what=f"{pattern!r} in the daemon log")
    return found[0]


def stopwatch():
    start = time.monotonic()
    return lambda: time.monotonic() - start
