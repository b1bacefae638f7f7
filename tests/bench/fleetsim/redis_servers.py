"""The Redis side of fleet-sim: one redis-server, or a Redis Cluster of
masters + replicas on loopback ports. Both offer the same small interface:
ports, seed, fail_one() (kill a master; for a cluster, wait for its replica
to take over) and recover() (bring it back), stop().
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import redis

from .redis_stats import wait_until


def _node_client(port: int) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=port, socket_timeout=0.5, socket_connect_timeout=0.3,
                       protocol=2)


class _Node:
    def __init__(self, root: Path, port: int, *extra: str):
        self.port = port
        self.dir = root / f"redis-{port}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.extra = list(extra)
        self.proc: subprocess.Popen | None = None

    def start(self):
        cmd = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no", "--dir", str(self.dir), "--maxclients", "4000", *self.extra]
        log = open(self.dir / "log", "ab")
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        log.close()
        if not wait_until(self.ping, 10):
            raise RuntimeError(f"redis-server on port {self.port} did not start "
                               f"(see {self.dir / 'log'})")

    def ping(self) -> bool:
        try:
            return bool(_node_client(self.port).ping())
        except (redis.RedisError, OSError):
            return False

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.kill()


class SingleRedis:
    """One redis-server; fail_one() freezes it (SIGSTOP: connections hang,
    the worst case for a client), recover() thaws it (SIGCONT)."""

    cluster = False

    def __init__(self, root: Path, port: int):
        self.node = _Node(root, port)
        self.ports = [port]
        self.seed = port
        self.events: list[tuple[float, str]] = []

    def start(self) -> "SingleRedis":
        self.node.start()
        return self

    def fail_one(self) -> int:
        self.node.proc.send_signal(signal.SIGSTOP)
        self.events.append((time.time(), f"froze redis-server :{self.node.port} (SIGSTOP)"))
        return self.node.port

    def recover(self, port: int):
        self.node.proc.send_signal(signal.SIGCONT)
        self.events.append((time.time(), f"redis-server :{port} thawed (SIGCONT)"))

    def stop(self):
        self.node.stop()


class RedisClusterNodes:
    """`masters` masters with one replica each, node timeout `node_timeout_ms`.

    fail_one() SIGKILLs the master of slot 0's shard and returns when its
    replica is a master with cluster_state ok; recover() restarts the old
    master, which rejoins as a replica of its old replica.
    """

    cluster = True

    def __init__(self, root: Path, ports: list[int], node_timeout_ms: int = 1000):
        self.root = root
        self.ports = list(ports)
        self.seed = ports[0]
        cluster_args = ("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                        "--cluster-node-timeout", str(node_timeout_ms),
                        "--cluster-replica-validity-factor", "0")
        self.nodes = {p: _Node(root, p, *cluster_args) for p in self.ports}
        self.events: list[tuple[float, str]] = []

    def start(self) -> "RedisClusterNodes":
        for node in self.nodes.values():
            node.start()
        addresses = [f"127.0.0.1:{p}" for p in self.ports]
        out = subprocess.run(["redis-cli", "--cluster", "create", *addresses,
                              "--cluster-replicas", "1", "--cluster-yes"],
                             capture_output=True, timeout=60)
        if out.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed: {out.stdout[-2000:]!r}")
        if not wait_until(self.healthy, 30, 0.1):
            raise RuntimeError("the cluster did not reach cluster_state:ok with all replicas")
        return self

    def _info(self, port: int, section: str):
        try:
            return _node_client(port).info(section)
        except (redis.RedisError, OSError):
            return None

    def healthy(self) -> bool:
        masters = replicas = 0
        for port in self.ports:
            try:
                state = _node_client(port).execute_command("CLUSTER", "INFO")
            except (redis.RedisError, OSError):
                return False
            text = state.decode() if isinstance(state, bytes) else str(state)
            if "cluster_state:ok" not in text:
                return False
            info = self._info(port, "replication")
            if info is None:
                return False
            if info["role"] == "master":
                masters += 1
            elif info.get("master_link_status") == "up":
                replicas += 1
        return masters + replicas == len(self.ports) and replicas >= 1

    def master_of_slot0(self) -> tuple[int, int]:
        slots = _node_client(self.seed).execute_command("CLUSTER", "SLOTS")
        for start, _end, master, *replicas in slots:
            if int(start) == 0:
                return int(master[1]), int(replicas[0][1])
        raise RuntimeError("no shard serves slot 0")

    def fail_one(self) -> int:
        master, replica = self.master_of_slot0()
        self.nodes[master].kill()
        self.events.append((time.time(), f"killed master :{master}"))
        promoted = wait_until(lambda: (self._info(replica, "replication") or {})
                              .get("role") == "master", 30, 0.05)
        self.events.append((time.time(), f"replica :{replica} promoted" if promoted
                            else f"replica :{replica} NOT promoted within 30 s"))
        wait_until(lambda: all("cluster_state:ok" in _node_client(p)
                               .execute_command("CLUSTER", "INFO").decode()
                               for p in self.ports if p != master), 30, 0.05)
        self.events.append((time.time(), "cluster_state ok on every live node"))
        return master

    def recover(self, port: int):
        self.nodes[port].start()
        self.events.append((time.time(), f"old master :{port} restarted"))
        rejoined = wait_until(lambda: (self._info(port, "replication") or {})
                              .get("master_link_status") == "up", 30, 0.1)
        self.events.append((time.time(), f":{port} rejoined as a replica" if rejoined
                            else f":{port} did not rejoin within 30 s"))

    def stop(self):
        for node in self.nodes.values():
            node.stop()

