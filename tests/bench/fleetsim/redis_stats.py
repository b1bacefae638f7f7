"""Requests that reached Redis: INFO commandstats deltas on every node.

Sampled once a second by tests/bench/fleet-sim. What is counted:
- every command a client sent (GET, SET, HELLO, CLIENT, CLUSTER, READONLY,
  COMMAND, ...), on masters and replicas;
- not the sampler's own INFO calls, nor the launcher's (cluster polls: the
  caller passes them as `exclude`), and not replication traffic: REPLCONF,
  PSYNC, SYNC anywhere, and on a replica the writes and PINGs its master
  streams to it (SET, DEL, PING, SELECT, MULTI, EXEC, ...).
Rejected calls (a MOVED redirection, a wrong arity) count too: they reached
Redis all the same. Unknown commands and subcommands (CLIENT SETINFO, which
redis-py 5+ sends and Redis 7.0 does not know) are in no commandstats row and
are not counted: the plain client's figures are, if anything, low.
A node restarted mid-run starts its counters from zero; the sampler counts
from there (what it served between its last sample and its death is lost:
at most one second of one node).
"""

from __future__ import annotations

import time

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

_NEVER = {"info", "replconf", "psync", "sync"}
_REPLICATED = {"set", "del", "unlink", "ping", "select", "multi", "exec", "expire", "pexpire",
               "pexpireat", "expireat", "flushall", "flushdb", "setex", "psetex", "getset"}


def _parse(info: dict) -> dict[str, int]:
    out = {}
    for name, fields in info.items():
        if not name.startswith("cmdstat_") or not isinstance(fields, dict):
            continue
        cmd = name[len("cmdstat_"):]
        calls = int(fields.get("calls", 0)) + int(fields.get("rejected_calls", 0))
        out[cmd] = calls
    # Not commands: the node's CPU time (ms) and bytes sent to clients (Redis
    # 7 keeps replication traffic out of total_net_output_bytes).
    out["~cpu_ms"] = int(1000 * (float(info.get("used_cpu_sys", 0)) +
                                 float(info.get("used_cpu_user", 0))))
    out["~net_out"] = int(info.get("total_net_output_bytes", 0))
    return out


class CommandStats:
    def __init__(self, ports: list[int], host: str = "127.0.0.1"):
        self.host = host
        self.ports = list(ports)
        self.clients = {p: redis.Redis(host=host, port=p, socket_timeout=0.5,
                                       socket_connect_timeout=0.3, protocol=2,
                                       retry=Retry(NoBackoff(), 0))
                        for p in self.ports}
        self.last: dict[int, dict[str, int]] = {}
        self.totals: dict[str, int] = {}

    def _sample_node(self, port: int):
        try:
            client = self.clients[port]
            info = client.info("all")
        except (redis.RedisError, OSError):
            return None
        role = info.get("role", "master")
        return role, _parse(info)

    def sample(self, exclude: dict[str, int] | None = None) -> dict[str, int]:
        """Adds what each node counted since the last sample, less `exclude`
        (commands the harness itself sent); returns this sample's deltas by
        command."""
        delta: dict[str, int] = {k: -v for k, v in (exclude or {}).items()
                                 if k.split("|")[0] not in _NEVER}
        for port in self.ports:
            got = self._sample_node(port)
            if got is None:
                continue
            role, now = got
            before = self.last.get(port, {})
            for cmd, calls in now.items():
                base = cmd.split("|")[0]
                if base in _NEVER or (role == "slave" and base in _REPLICATED):
                    continue
                prev = before.get(cmd, 0)
                d = calls - prev if calls >= prev else calls  # restarted: from zero
                if d:
                    delta[cmd] = delta.get(cmd, 0) + d
            self.last[port] = now
        # Negative: the launcher's calls to a node restarted since the last
        # sample, whose counters started again from zero.
        delta = {k: v for k, v in delta.items() if v > 0}
        for cmd, d in delta.items():
            self.totals[cmd] = self.totals.get(cmd, 0) + d
        return delta

    def reset(self):
        """Starts counting from now (no CONFIG RESETSTAT: sampling is enough)."""
        self.last = {}
        self.totals = {}
        for port in self.ports:
            got = self._sample_node(port)
            if got is not None:
                self.last[port] = got[1]

    def close(self):
        for client in self.clients.values():
            client.close()


def summarize(totals: dict[str, int]) -> dict[str, int]:
    """Commands (total, GET, SET, the rest), Redis CPU ms and bytes sent."""
    commands = {k: v for k, v in totals.items() if not k.startswith("~")}
    gets = sum(v for k, v in commands.items() if k in ("get", "mget"))
    sets = sum(v for k, v in commands.items() if k in ("set", "setex", "psetex"))
    return {"total": sum(commands.values()), "get": gets, "set": sets,
            "other": sum(commands.values()) - gets - sets,
            "cpu_ms": totals.get("~cpu_ms", 0), "net_out": totals.get("~net_out", 0)}


def wait_until(predicate, timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False
