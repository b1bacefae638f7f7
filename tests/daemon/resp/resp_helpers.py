"""Helpers for the RESP front-door tests: a raw RESP client that sends exactly the
bytes it is given and decodes RESP2/RESP3 replies, runners for the redis-py
client script under each test virtual environment, and small process probes.

Kept here rather than in pt2harness.py so that this suite's helpers can grow
without touching the shared harness.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CLIENT_SCRIPT = HERE / "redispy_client.py"
VENVS = Path(os.environ.get("PT2CACHE_VENVS", Path(__file__).resolve().parents[3] / ".venv"))
REDIS_PY_VERSIONS = ("4", "5", "8")


class RespError(Exception):
    """An error reply (-ERR ...), returned, not raised, by RespConnection.reply()."""

    def __eq__(self, other):
        return isinstance(other, RespError) and str(self) == str(other)

    def __hash__(self):
        return hash(str(self))


class Push(list):
    pass


def encode(*args) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        if isinstance(arg, str):
            arg = arg.encode()
        elif isinstance(arg, int):
            arg = str(arg).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(arg), arg))
    return b"".join(out)


class RespConnection:
    """A raw RESP connection: send() bytes, reply() decodes one reply."""

    def __init__(self, path, timeout=10.0):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.settimeout(timeout)
        self.sock.connect(str(path))
        self.buf = b""

    def send(self, data: bytes):
        self.sock.sendall(data)

    def command(self, *args):
        self.send(encode(*args))
        return self.reply()

    def _fill(self):
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise EOFError("connection closed by the daemon")
        self.buf += chunk

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n: int) -> bytes:
        while len(self.buf) < n + 2:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def reply(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            return RespError(rest.decode(errors="replace"))
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n)
        if kind == b"=":
            return self._exact(int(rest))[4:]
        if kind == b"_":
            return None
        if kind in (b"*", b">", b"~"):
            n = int(rest)
            if n < 0:
                return None
            items = [self.reply() for _ in range(n)]
            return Push(items) if kind == b">" else items
        if kind == b"%":
            return {self.reply(): self.reply() for _ in range(int(rest))}
        if kind == b",":
            return float(rest)
        if kind == b"#":
            return rest == b"t"
        raise AssertionError(f"unexpected reply line {line!r}")

    def raw_reply_line(self) -> bytes:
        """The next reply's first line, undecoded (e.g. b'_' or b'$-1')."""
        return self._line()

    def closed_by_peer(self, timeout=5.0) -> bool:
        """True when the daemon closes the connection (after any pending bytes)."""
        self.sock.settimeout(timeout)
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return True
                self.buf += chunk
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False

    def close(self):
        self.sock.close()


def venv_python(version: str) -> str:
    path = VENVS / f"redis{version}" / "bin" / "python"
    assert path.exists(), f"{path} is missing: run tools/python-env"
    return str(path)


def run_redispy(version: str, scenario: str, *args: str, timeout=120) -> dict:
    """Runs redispy_client.py SCENARIO ARGS... under redis-py VERSION; its JSON result."""
    proc = subprocess.run([venv_python(version), str(CLIENT_SCRIPT), scenario, *args],
                          capture_output=True, timeout=timeout)
    assert proc.returncode == 0, (
        f"redis-py {version} {scenario} failed ({proc.returncode}):\n"
        f"{proc.stdout.decode(errors='replace')}\n{proc.stderr.decode(errors='replace')}")
    return json.loads(proc.stdout)


def inductor_key(cache_id: str, prefix: str, seed: bytes) -> tuple[str, str]:
    """(redis key, inner key) as Inductor builds them: prefix + 51 base32 chars."""
    inner = prefix + base64.b32encode(hashlib.sha256(seed).digest()).decode().lower()[:51]
    return f"pt2:{cache_id}::{inner}:c1", inner


def inductor_value(size: int, time_taken_ms: int = 1234) -> bytes:
    """What RemoteCacheJsonSerde stores: ASCII JSON of base64 data."""
    data = base64.b64encode(os.urandom(size)).decode("ascii")
    return bytes(json.dumps({"data": data, "time_taken_ms": time_taken_ms}), "ascii")


def vm_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def this_python() -> str:
    return sys.executable
