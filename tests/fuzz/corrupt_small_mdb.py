#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Flips random bytes of copies of a real small.mdb and serves each copy with
pt2cached: the daemon must survive every one (docs/architecture.md, "A broken
small.mdb"). Opt-in, not part of tools/test: a few minutes.

    .venv/redis8/bin/python tests/fuzz/corrupt_small_mdb.py [--copies 40] [--flips 20]

It fills one cache (sync writes, seeded values: the same file every run),
then for each copy flips --flips random bytes past the two meta pages,
starts the daemon on it, GETs every key, SETs some, and stops it. A copy
whose daemon dies is kept under /tmp for inspection and counted. Exit status 1
when any died. PT2CACHED names the daemon (default build/daemon/pt2cached).
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parents[2]
PT2CACHED = os.environ.get("PT2CACHED", str(ROOT / "build/daemon/pt2cached"))
KEYS = 5000


def start(directory: Path, *extra: str) -> subprocess.Popen:
    log = open(directory / "log", "ab")
    proc = subprocess.Popen(
        [PT2CACHED, "--socket", str(directory / "s"), "--cache-dir", str(directory / "c"),
         "--log-level", "warn", *extra],
        env={"PATH": os.environ.get("PATH", ""), "XDG_CONFIG_HOME": str(directory / "cfg")},
        stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            redis.Redis(unix_socket_path=str(directory / "s"), socket_timeout=1).ping()
            return proc
        except (redis.ConnectionError, FileNotFoundError):
            time.sleep(0.05)
    return proc


def fill(directory: Path) -> None:
    proc = start(directory, "--set", "disk.write_mode=sync")
    client = redis.Redis(unix_socket_path=str(directory / "s"))
    values = random.Random(1)
    pipe = client.pipeline(transaction=False)
    for i in range(KEYS):
        pipe.set(f"key{i}", values.randbytes(values.randint(100, 3000)))
    pipe.execute()
    proc.terminate()
    proc.wait(15)


def serve(directory: Path) -> tuple[bool, int, str]:
    """Whether the daemon lived through reads and writes, hits, and why not."""
    proc = start(directory)
    client = redis.Redis(unix_socket_path=str(directory / "s"), socket_timeout=10)
    hits, error = 0, ""
    try:
        for i in range(KEYS):
            hits += client.get(f"key{i}") is not None
        for i in range(0, KEYS, 7):
            client.set(f"key{i}", b"y" * 300)
    except redis.RedisError as e:
        error = repr(e)[:100]
    time.sleep(0.3)
    alive = proc.poll() is None
    if alive:
        proc.terminate()
        proc.wait(15)
    else:
        error = f"exit status {proc.returncode}; {error}"
    return alive, hits, error


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=40)
    parser.add_argument("--flips", type=int, default=20, help="bytes flipped per copy")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="p2c-base-"))
    fill(base)
    size = (base / "c/small.mdb").stat().st_size
    print(f"small.mdb: {size} bytes, {KEYS} entries")
    died = 0
    for copy in range(args.copies):
        directory = Path(tempfile.mkdtemp(prefix=f"p2c-{copy}-"))
        shutil.copytree(base / "c", directory / "c")
        flips = random.Random(copy)
        with open(directory / "c/small.mdb", "r+b") as f:
            for _ in range(args.flips):
                f.seek(flips.randrange(2 * 4096, size))
                f.write(bytes([flips.randrange(256)]))
        alive, hits, error = serve(directory)
        broken = (directory / "c/small.mdb.broken").exists()
        if alive:
            shutil.rmtree(directory)
        else:
            died += 1
        print(f"copy {copy}: {'served' if alive else 'DIED'}, {hits} hits,"
              f" {'quarantined' if broken else 'kept'}"
              f"{'' if alive else f' ({error}; kept in {directory})'}")
    shutil.rmtree(base)
    print(f"{died} of {args.copies} copies killed the daemon")
    return 1 if died else 0


if __name__ == "__main__":
    sys.exit(main())
