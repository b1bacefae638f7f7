#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Flips random bytes of copies of a real small.mdb and serves each copy with
pt2cached: the daemon must survive every one (docs/architecture.md, "A broken
small.mdb"). Opt-in, not part of tools/test: a few minutes.

    .venv/redis8/bin/python tests/fuzz/corrupt_small_mdb.py [--copies 40] [--flips 20] \
        [--erase-half]

It fills one cache (sync writes, seeded values: the same file every run),
then for each copy flips --flips random bytes past the two meta pages,
starts the daemon on it, GETs every key, SETs some, and stops it. A copy
whose daemon dies, or that answers a GET with bytes other than the key's
(a deleted key's included), is kept under /tmp for inspection and counted.
Exit status 1 when any did. --erase-half deletes every other key before the copies are
made: the file is then mostly free pages, and each daemon compacts its copy
as it starts (the copy walks the corrupt trees). PT2CACHED names the daemon
(default build/daemon/pt2cached).
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import time
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parents[2]
os.environ.setdefault("PT2CACHED", str(ROOT / "build/daemon/pt2cached"))
sys.path.insert(0, str(ROOT / "tests/pyharness"))
from pt2harness import Daemon, TempDir  # noqa: E402  (needs PT2CACHED set first)

KEYS = 5000


def fill(root: Path, erase_half: bool) -> tuple[Path, list]:
    """A cache of KEYS seeded small entries (the odd ones only, when
    `erase_half`); its directory and each key's value (None: deleted)."""
    daemon = Daemon(root, "--set", "disk.write_mode=sync").start()
    client = redis.Redis(unix_socket_path=str(daemon.socket))
    values = random.Random(1)
    expected = [values.randbytes(values.randint(100, 3000)) for _ in range(KEYS)]
    pipe = client.pipeline(transaction=False)
    for i, value in enumerate(expected):
        pipe.set(f"key{i}", value)
    pipe.execute()
    if erase_half:
        client.delete(*(f"key{i}" for i in range(0, KEYS, 2)))
        expected[0::2] = [None] * len(expected[0::2])
    daemon.stop()
    return daemon.cache_dir, expected


def serve(daemon: Daemon, expected: list) -> tuple[bool, int, int, str]:
    """Whether the daemon lived through reads and writes, hits, hits with
    wrong bytes, and why it died."""
    hits, wrong, error = 0, 0, ""
    try:
        daemon.start()
        client = redis.Redis(unix_socket_path=str(daemon.socket), socket_timeout=10)
        for i in range(KEYS):
            got = client.get(f"key{i}")
            hits += got is not None
            wrong += got is not None and got != expected[i]
        for i in range(0, KEYS, 7):
            client.set(f"key{i}", b"y" * 300)
    except (redis.RedisError, RuntimeError) as e:  # RuntimeError: died starting
        error = (str(e).splitlines() or [type(e).__name__])[0][:100]
    time.sleep(0.3)
    alive = daemon.proc.poll() is None
    if alive:
        daemon.stop()
    else:
        error = f"exit status {daemon.proc.returncode}; {error}"
    return alive, hits, wrong, error


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=40)
    parser.add_argument("--flips", type=int, default=20, help="bytes flipped per copy")
    parser.add_argument("--erase-half", action="store_true",
                        help="delete every other key first: each daemon compacts its copy")
    args = parser.parse_args()
    base = TempDir("p2c-base-")
    cache, expected = fill(base.path, args.erase_half)
    size = (cache / "small.mdb").stat().st_size
    print(f"small.mdb: {size} bytes, {KEYS} entries")
    died = wrong_copies = 0
    for copy in range(args.copies):
        root = TempDir(f"p2c-{copy}-")
        daemon = Daemon(root.path)
        shutil.copytree(cache, daemon.cache_dir)
        flips = random.Random(copy)
        with open(daemon.cache_dir / "small.mdb", "r+b") as f:
            for _ in range(args.flips):
                f.seek(flips.randrange(2 * 4096, size))
                f.write(bytes([flips.randrange(256)]))
        alive, hits, wrong, error = serve(daemon, expected)
        broken = (daemon.cache_dir / "small.mdb.broken").exists()
        compacted = (not broken and (daemon.cache_dir / "small.mdb").exists()
                     and (daemon.cache_dir / "small.mdb").stat().st_size < size)
        # Why a copy was not compacted: the daemon's warning, its path left out.
        why_not = [line.split(": ", 2)[-1] for line in daemon.log().splitlines()
                   if "cannot compact" in line]
        salvaged = [line.split("] ", 1)[-1][:60] for line in daemon.log().splitlines()
                    if "salvaged" in line]
        if alive and not wrong:
            root.cleanup()
        died += not alive
        wrong_copies += wrong > 0
        state = "quarantined" if broken else "compacted" if compacted else "kept"
        if why_not:
            state += f" (cannot compact: {why_not[0][-80:]})"
        if salvaged:
            state += f" ({salvaged[0]})"
        print(f"copy {copy}: {'served' if alive else 'DIED'}, {hits} hits"
              f"{f', {wrong} WRONG' if wrong else ''}, {state}"
              f"{'' if alive and not wrong else f' ({error}; kept in {root.path})'}")
    base.cleanup()
    print(f"{died} of {args.copies} copies killed the daemon, "
          f"{wrong_copies} answered with wrong bytes")
    return 1 if died or wrong_copies else 0


if __name__ == "__main__":
    sys.exit(main())
