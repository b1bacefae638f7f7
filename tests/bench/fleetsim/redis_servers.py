"""The Redis side of fleet-sim: one redis-server (tests/pyharness), or a
Redis Cluster of masters + replicas on loopback ports
(tests/support/redis_cluster.py). Both offer the same small interface: ports,
seed, fail_one() (freeze the server; kill a master and wait for its replica to
take over), recover() (thaw it; bring the master back), take_own_calls(),
stop().
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from pathlib import Path

from .redis_stats import wait_until


class SingleRedis:
    """One redis-server; fail_one() freezes it (SIGSTOP: connections hang,
    the worst case for a client), recover() thaws it (SIGCONT)."""

    cluster = False

    def __init__(self, root: Path, port: int):
        sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "pyharness"))
        from pt2harness import RedisServer
        self.node = RedisServer(root, port=port)
        self.ports = [port]
        self.seed = port
        self.events: list[tuple[float, str]] = []

    def take_own_calls(self) -> dict[str, int]:
        return {}

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
        if self.node.proc and self.node.proc.poll() is None:
            self.node.proc.send_signal(signal.SIGCONT)
        self.node.stop()


class ClusterNodes:
    """tests/support/redis_cluster.py's RedisCluster: `masters` masters with
    one replica each, cluster-node-timeout `node_timeout_ms`.

    fail_one() SIGKILLs the master of slot 0 and returns once its replica has
    taken over and every live node agrees; recover() restarts the old master
    and waits until it has rejoined as a replica with its link up.
    """

    cluster = True

    def __init__(self, root: Path, masters: int = 3, node_timeout_ms: int = 1000):
        sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "support"))
        from redis_cluster import RedisCluster
        self.impl = RedisCluster(root, masters=masters, replicas=1,
                                 node_timeout_ms=node_timeout_ms,
                                 extra_args=["--maxclients", "4000"])
        self.ports: list[int] = []
        self.seed = 0
        self.events: list[tuple[float, str]] = []
        # The launcher's own commands (CLUSTER INFO/SLOTS polls, PINGs), so
        # that the figures count only what the clients sent.
        self._own: dict[str, int] = {}
        self._own_lock = threading.Lock()
        command = self.impl.command

        def counted(node, *args, **kwargs):
            name = str(args[0]).lower()
            if name in ("cluster", "client", "config") and len(args) > 1:
                name += "|" + str(args[1]).lower()
            with self._own_lock:
                self._own[name] = self._own.get(name, 0) + 1
            return command(node, *args, **kwargs)
        self.impl.command = counted

    def take_own_calls(self) -> dict[str, int]:
        with self._own_lock:
            own, self._own = self._own, {}
        return own

    def start(self) -> "ClusterNodes":
        self.impl.start()
        self.ports = [n.port for n in self.impl.nodes()]
        self.seed = self.ports[0]
        self.take_own_calls()
        return self

    def fail_one(self):
        master = self.impl.master_for_slot(0)
        self.impl.kill(master)
        self.events.append((time.time(), f"killed master :{master.port}"))
        promoted = self.impl.wait_for_failover(master)
        self.events.append((time.time(), f"replica :{promoted.port} took over, all nodes agree"))
        return master

    def recover(self, node):
        self.impl.restart(node)
        self.events.append((time.time(), f"old master :{node.port} restarted"))

        def rejoined() -> bool:
            try:
                info = self.impl.command(node, "INFO", "replication", timeout=1.0)
            except OSError:
                return False
            return isinstance(info, bytes) and b"role:slave" in info and \
                b"master_link_status:up" in info
        ok = wait_until(rejoined, 30, 0.1)
        self.events.append((time.time(), f":{node.port} rejoined as a replica" if ok
                            else f":{node.port} had not rejoined after 30 s"))

    def stop(self):
        self.impl.stop()
