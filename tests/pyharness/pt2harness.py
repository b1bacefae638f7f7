"""Test harness: the real pt2cached, redis-server and pt2cache CLI as subprocesses.

Paths come from the environment that meson's test() sets:
  PT2CACHED      the daemon binary
  PT2CACHE_CLI   the pt2cache CLI binary
Everything runs in short /tmp paths (Unix socket paths are limited to 107 bytes).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
from pathlib import Path

PT2CACHED = os.environ.get("PT2CACHED", "build/daemon/pt2cached")
PT2CACHE_CLI = os.environ.get("PT2CACHE_CLI", "build/client/cli/pt2cache")


def wait_for(predicate, timeout=10.0, interval=0.01, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout} s waiting for {what}")


def can_connect(path) -> bool:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        s.close()


class TempDir:
    def __init__(self, prefix="p2t-"):
        self.path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
        os.chmod(self.path, 0o700)

    def cleanup(self):
        shutil.rmtree(self.path, ignore_errors=True)


def drain_disk_queue(source, timeout: float = 20.0) -> None:
    """Waits until the disk tier's write queue (`disk.write_mode = "async"`,
    the default) is empty, so that every acknowledged put is a file.
    `source`: anything whose `stats()` returns the STATS object (a Daemon,
    a test client, a pt2cache.Client)."""
    def drained():
        disk = source.stats()["tiers"]["disk"] or {}
        return (disk.get("write_queue") or {}).get("entries", 0) == 0

    wait_for(drained, timeout=timeout, what="the disk write queue to drain")


class Daemon:
    """A real pt2cached on a private socket and cache directory."""

    def __init__(self, root: Path, *args: str, env: dict | None = None, cache_dir=None):
        self.root = Path(root)
        self.socket = self.root / "s"
        self.cache_dir = Path(cache_dir) if cache_dir else self.root / "cache"
        self.log_path = self.root / "daemon.log"
        self.args = list(args)
        self.env = env
        self.proc: subprocess.Popen | None = None

    def command(self) -> list[str]:
        return [PT2CACHED, "--socket", str(self.socket), "--cache-dir", str(self.cache_dir),
                "--log-level", "info", *self.args]

    def start(self, wait=True) -> "Daemon":
        env = dict(os.environ)
        # A developer's own settings must not leak into tests.
        for name in list(env):
            if name.startswith(("TORCHINDUCTOR_", "TORCH_COMPILE_", "PT2CACHE_")) and \
                    name not in ("PT2CACHE_CLI",):
                del env[name]
        env["XDG_CONFIG_HOME"] = str(self.root / "config")
        if self.env:
            env.update(self.env)
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.command(), stdout=self._log, stderr=subprocess.STDOUT,
                                     env=env)
        if wait:
            wait_for(lambda: can_connect(self.socket) or self.proc.poll() is not None,
                     what="pt2cached to listen")
            if self.proc.poll() is not None:
                raise RuntimeError(f"pt2cached exited with {self.proc.returncode}:\n{self.log()}")
        return self

    def stop(self, sig=signal.SIGTERM, timeout=15.0) -> int:
        if not self.proc or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def restart(self) -> "Daemon":
        self.stop()
        return self.start()

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def cli(self, *args: str, input: bytes | None = None, check=False,
            timeout=30) -> subprocess.CompletedProcess:
        return run_cli("--socket", str(self.socket), *args, input=input, check=check,
                       timeout=timeout)

    def stats(self) -> dict:
        import json
        out = self.cli("stats", "--json", check=True)
        return json.loads(out.stdout)

    def wait_remote(self, prefix: str = "connected", timeout=20.0):
        """Waits until the remote tier's state starts with `prefix`. A fresh
        daemon answers remote reads locally (a miss) until its first
        connection to Redis has succeeded, in the background."""
        wait_for(lambda: self.stats()["remote"]["state"].startswith(prefix), timeout=timeout,
                 interval=0.05, what=f"remote state {prefix!r}")


def run_cli(*args: str, input: bytes | None = None, check=False, timeout=30):
    return subprocess.run([PT2CACHE_CLI, *args], input=input, capture_output=True, check=check,
                          timeout=timeout)


class RedisServer:
    """A real redis-server on a Unix socket (and optionally a loopback port)."""

    def __init__(self, root: Path, *extra: str, port: int = 0):
        self.root = Path(root)
        self.socket = self.root / "redis.sock"
        self.port = port
        self.extra = list(extra)
        self.proc: subprocess.Popen | None = None

    def start(self) -> "RedisServer":
        cmd = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
               "--unixsocket", str(self.socket), "--unixsocketperm", "700",
               "--save", "", "--appendonly", "no", "--dir", str(self.root), *self.extra]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: can_connect(self.socket), what="redis-server")
        return self

    def cli(self, *args: str) -> str:
        out = subprocess.run(["redis-cli", "-s", str(self.socket), *args], capture_output=True,
                             check=True, timeout=30)
        return out.stdout.decode()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# ---- the native protocol, spelled out for hostile-input tests ----

MAGIC = b"\xf2P"
HEADER = struct.Struct("<2sBBII")
OP = dict(hello=1, ping=2, get=3, put=4, exists=5, delete=6, stats=7, list=8, clear=9)
STATUS = dict(ok=0, miss=1, not_stored=2, malformed=0x10, version_mismatch=0x11, unknown_op=0x12,
              key_too_long=0x13, value_too_large=0x14, bad_namespace=0x15,
              handshake_required=0x16, storage_error=0x17, unknown_token=0x18,
              internal=0x19, busy=0x1A)


def frame(op: int, body: bytes = b"", flags: int = 0, rid: int = 1) -> bytes:
    return HEADER.pack(MAGIC, op, flags, rid, len(body)) + body


def key_body(ns: str | bytes, key: bytes) -> bytes:
    ns = ns.encode() if isinstance(ns, str) else ns
    return struct.pack("<B", len(ns)) + ns + struct.pack("<H", len(key)) + key


def hello_frame(version=1, rid=1) -> bytes:
    name = b"pytest"
    return frame(OP["hello"], struct.pack("<HIB", version, 1, len(name)) + name, rid=rid)


class RawConnection:
    """A native-protocol connection that sends exactly the bytes it is given."""

    def __init__(self, path, timeout=10.0):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.settimeout(timeout)
        self.sock.connect(str(path))

    def send(self, data: bytes):
        self.sock.sendall(data)

    def recv_exact(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise EOFError(f"connection closed after {len(data)} of {n} bytes")
            data += chunk
        return data

    def reply(self) -> tuple[int, int, int, bytes]:
        """(op, status, id, body) of the next reply frame."""
        magic, op, status, rid, length = HEADER.unpack(self.recv_exact(HEADER.size))
        assert magic == MAGIC, magic
        return op, status, rid, self.recv_exact(length)

    def hello(self):
        self.send(hello_frame())
        op, status, _, _ = self.reply()
        assert (op, status) == (OP["hello"], 0)
        return self

    def closed_by_peer(self, timeout=5.0) -> bool:
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def close(self):
        self.sock.close()


def error_message(body: bytes) -> str:
    (length,) = struct.unpack_from("<H", body)
    return body[2:2 + length].decode()
