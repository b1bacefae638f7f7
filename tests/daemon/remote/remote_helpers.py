"""Helpers of the remote-tier (Redis) tests: Inductor's key and value formats, a
native-protocol client for concurrent gets, daemons configured for a Redis,
and Redis's own counters (INFO commandstats)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import struct
import threading
import time

from pt2harness import HEADER, MAGIC, OP, STATUS, RawConnection, frame, key_body

OK = STATUS["ok"]
MISS = STATUS["miss"]


def inductor_key(cache_id: str, prefix: str, seed: bytes | str) -> tuple[str, str]:
    """(redis key, inner key) as Inductor builds them: prefix + 51 base32 chars."""
    if isinstance(seed, str):
        seed = seed.encode()
    inner = prefix + base64.b32encode(hashlib.sha256(seed).digest()).decode().lower()[:51]
    return f"pt2:{cache_id}::{inner}:c1", inner


def fx_key(seed) -> tuple[str, str]:
    return inductor_key("fx-graph-v1", "f", seed)


def inductor_value(size: int, time_taken_ms: int = 1234) -> bytes:
    """What RemoteCacheJsonSerde stores: ASCII JSON of base64 data."""
    data = base64.b64encode(os.urandom(size)).decode("ascii")
    return bytes(json.dumps({"data": data, "time_taken_ms": time_taken_ms}), "ascii")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def redis_env(redis, *switches: str, **settings) -> dict:
    """Environment for a daemon using `redis` (a RedisServer) over its Unix
    socket, with the seed switches named (default: the FX graph cache)."""
    env = {"TORCHINDUCTOR_REDIS_URL": f"unix://{redis.socket}"}
    for name in switches or ("FX_GRAPH",):
        env[f"TORCHINDUCTOR_{name}_REMOTE_CACHE"] = "1"
    env.update({k: str(v) for k, v in settings.items()})
    return env


def redis_args(op_ms=300, connect_ms=200, **more) -> list[str]:
    args = ["--set", f"remote.op_timeout_ms={op_ms}", "--set",
            f"remote.connect_timeout_ms={connect_ms}"]
    for key, value in more.items():
        args += ["--set", f"remote.{key}={value}"]
    return args


def redis_client(redis, **kwargs):
    import redis as redis_py
    return redis_py.Redis(unix_socket_path=str(redis.socket), **kwargs)


def command_calls(client, command: str) -> int:
    """calls of `command` in Redis's INFO commandstats (0 before the first)."""
    stats = client.info("commandstats")
    return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))


def remote_stats(daemon) -> dict:
    return daemon.stats()["remote"]


def cooldown_left(state: str) -> float:
    """Seconds left of the suspension a remote state text names ("suspended
    until 2026-11-22T13:04:05.250Z"); 0 for any other state."""
    import datetime
    prefix = "suspended until "
    if not state.startswith(prefix):
        return 0.0
    until = datetime.datetime.strptime(state[len(prefix):], "%Y-%m-%dT%H:%M:%S.%fZ")
    until = until.replace(tzinfo=datetime.timezone.utc)
    return max(0.0, until.timestamp() - time.time())


def time_to_recover(daemon, timeout=30.0) -> tuple[float, float]:
    """Call right after Redis is back: (seconds until the tier is connected
    again, seconds of cool-down that were left when Redis came back)."""
    started = time.monotonic()
    left = cooldown_left(remote_stats(daemon)["state"])
    wait_remote_state(daemon, "connected", timeout=timeout)
    return time.monotonic() - started, left


def wait_remote_state(daemon, prefix: str, timeout=20.0):
    daemon.wait_remote(prefix, timeout=timeout)


class Native:
    """A native-protocol client connection (HELLO done)."""

    def __init__(self, path, timeout=10.0):
        self.conn = RawConnection(path, timeout=timeout).hello()
        self.rid = 1

    def get(self, ns: str, key: str | bytes) -> tuple[int, bytes]:
        key = key.encode() if isinstance(key, str) else key
        self.rid += 1
        self.conn.send(frame(OP["get"], key_body(ns, key), rid=self.rid))
        op, status, rid, body = self.reply()
        assert (op, rid) == (OP["get"], self.rid)
        return status, body

    def reply(self) -> tuple[int, int, int, bytes]:
        """Like RawConnection.reply, reading large bodies without copies (the
        benchmark times multi-MiB values)."""
        magic, op, status, rid, length = HEADER.unpack(self.conn.recv_exact(HEADER.size))
        assert magic == MAGIC, magic
        body = bytearray(length)
        view = memoryview(body)
        got = 0
        while got < length:
            n = self.conn.sock.recv_into(view[got:], length - got)
            if n == 0:
                raise EOFError(f"connection closed after {got} of {length} bytes")
            got += n
        return op, status, rid, bytes(body)

    def put(self, ns: str, key: str | bytes, value: bytes, ttl_ms: int = 0) -> int:
        key = key.encode() if isinstance(key, str) else key
        self.rid += 1
        body = key_body(ns, key) + struct.pack("<Q", ttl_ms) + value
        self.conn.send(frame(OP["put"], body, rid=self.rid))
        op, status, rid, _ = self.conn.reply()
        assert (op, rid) == (OP["put"], self.rid)
        return status

    def delete(self, ns: str, key: str | bytes) -> tuple[int, bytes]:
        key = key.encode() if isinstance(key, str) else key
        self.rid += 1
        self.conn.send(frame(OP["delete"], key_body(ns, key), rid=self.rid))
        op, status, rid, body = self.conn.reply()
        assert (op, rid) == (OP["delete"], self.rid)
        return status, body

    def close(self):
        self.conn.close()


class Load:
    """`threads` clients doing native gets in a loop until stopped; records
    (latency in seconds, status or exception text) of every request."""

    def __init__(self, path, keys_for, threads=8):
        self.path = path
        self.keys_for = keys_for  # (thread index, iteration) -> (ns, key)
        self.stop_flag = threading.Event()
        self.results: list[tuple[float, object]] = []
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run, args=(i,)) for i in range(threads)]

    def run(self, index):
        client = Native(self.path)
        i = 0
        local = []
        while not self.stop_flag.is_set():
            ns, key = self.keys_for(index, i)
            i += 1
            started = time.monotonic()
            try:
                status, _ = client.get(ns, key)
                outcome = status
            except Exception as e:  # noqa: BLE001 - recorded and asserted on
                outcome = f"{type(e).__name__}: {e}"
                client = Native(self.path)
            local.append((time.monotonic() - started, outcome))
        client.close()
        with self.lock:
            self.results.extend(local)

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop_flag.set()
        for t in self.threads:
            t.join()

    def latencies(self) -> list[float]:
        return sorted(latency for latency, _ in self.results)

    def percentile(self, p: float) -> float:
        values = self.latencies()
        return values[min(len(values) - 1, int(len(values) * p))]

    def outcomes(self) -> set:
        return {outcome for _, outcome in self.results}
