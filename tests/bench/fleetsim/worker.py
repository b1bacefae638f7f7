"""One fleet-sim worker process: a compile process that replays the trace.

Started by tests/bench/fleet-sim as ``python -m fleetsim.worker CONFIG_JSON``.
It reads one JSON command per line on stdin ({"round": ...} or {"exit": 1}),
replays the trace for that round and answers one JSON line on stdout with
per-second buckets (counts and get latencies).

Per graph, as Inductor does: GET the AOTAutograd entry, GET the FX graph, GET
every kernel's best config (at kernel load or while autotuning). A miss
"compiles" (sleeps), then PUTs what it missed: best configs, the FX graph, the
AOTAutograd entry. A hit is checked byte for byte.

Two kinds of client:
- ``daemon``: pt2cache.Client(strict=True) on the node's pt2cached socket, one
  connection per process (every exception is a client-visible error);
- ``redis``: plain redis-py, a new connection per lookup as Inductor opens one
  (redis.Redis per lookup for a single server; for a cluster, one
  redis.cluster.RedisCluster per process, seeded with every node - topology
  cached, the best a plain client can do - whose connections are closed after
  every lookup).
"""

from __future__ import annotations

import json
import sys
import time
from collections import defaultdict

from . import trace as trace_mod


class Buckets:
    def __init__(self, t0: float):
        self.t0 = t0
        self.rows: dict[int, dict] = defaultdict(lambda: {
            "gets": 0, "hits": 0, "misses": 0, "errors": 0, "wrong": 0, "puts": 0,
            "put_errors": 0, "lat": []})
        self.error_kinds: dict[str, int] = defaultdict(int)

    def row(self) -> dict:
        return self.rows[int(time.time() - self.t0)]

    def dump(self) -> dict:
        return {"buckets": {str(k): v for k, v in self.rows.items()},
                "error_kinds": dict(self.error_kinds)}


class DaemonBackend:
    def __init__(self, cfg: dict):
        sys.path.insert(0, cfg["client_path"])
        import pt2cache
        from pt2cache.keys import from_redis_key
        self.from_redis_key = from_redis_key
        self.client = pt2cache.Client(cfg["socket"], timeout=cfg["client_timeout_s"],
                                      strict=True, client_name="fleet-sim")

    def reset(self):
        self.client.close()

    def get(self, key: str):
        ns, inner = self.from_redis_key(key)
        return self.client.get(ns, inner)

    def put(self, key: str, value: bytes):
        ns, inner = self.from_redis_key(key)
        self.client.put(ns, inner, value)

    def after_error(self):
        self.client.close()


class RedisBackend:
    def __init__(self, cfg: dict):
        import redis
        self.redis = redis
        self.cluster = cfg["cluster"]
        self.host, self.port = cfg["redis_host"], cfg["redis_port"]
        self.all_ports = cfg["redis_ports"]
        self.read_from_replicas = cfg["read_from_replicas"]
        self.timeouts = {"socket_timeout": cfg["op_timeout_s"],
                         "socket_connect_timeout": cfg["connect_timeout_s"]}
        self.rc = None

    def _cluster(self):
        if self.rc is None:
            from redis.cluster import ClusterNode, LoadBalancingStrategy, RedisCluster
            extra = {}
            if self.read_from_replicas:
                extra["load_balancing_strategy"] = LoadBalancingStrategy.ROUND_ROBIN
            self.rc = RedisCluster(startup_nodes=[ClusterNode(self.host, p)
                                                  for p in self.all_ports],
                                   **self.timeouts, **extra)
        return self.rc

    def reset(self):
        pass

    def _once(self, fn):
        if not self.cluster:
            client = self.redis.Redis(host=self.host, port=self.port, **self.timeouts)
            try:
                return fn(client)
            finally:
                client.close()
        rc = self._cluster()
        try:
            return fn(rc)
        finally:
            rc.disconnect_connection_pools()

    def get(self, key: str):
        return self._once(lambda c: c.get(key))

    def put(self, key: str, value: bytes):
        self._once(lambda c: c.set(key, value))

    def after_error(self):
        pass  # RedisCluster refreshes its topology itself after a connection error


class Worker:
    def __init__(self, cfg: dict):
        self.cfg = cfg
        self.model = trace_mod.build(**cfg["trace"])
        self.backend = DaemonBackend(cfg) if cfg["arm"] == "daemon" else RedisBackend(cfg)
        self.compile_s = cfg["compile_ms"] / 1000.0
        self.bench_s = cfg["bench_ms"] / 1000.0

    def lookup(self, entry: trace_mod.Entry, b: Buckets) -> bool:
        started = time.perf_counter()
        row = b.row()
        try:
            value = self.backend.get(entry.redis_key)
            outcome = "hit" if value is not None else "miss"
        except Exception as e:  # noqa: BLE001 - a client-visible error, counted
            outcome = "error"
            b.error_kinds[f"get {type(e).__name__}: {str(e)[:120]}"] += 1
            self.backend.after_error()
        row["lat"].append(round((time.perf_counter() - started) * 1000.0, 3))
        row["gets"] += 1
        if outcome == "hit" and bytes(value) != entry.value():
            outcome = "wrong"
        row[{"hit": "hits", "miss": "misses", "error": "errors", "wrong": "wrong"}[outcome]] += 1
        return outcome == "hit"

    def store(self, entry: trace_mod.Entry, b: Buckets):
        row = b.row()
        row["puts"] += 1
        try:
            self.backend.put(entry.redis_key, entry.value())
        except Exception as e:  # noqa: BLE001 - a client-visible error, counted
            row["put_errors"] += 1
            b.error_kinds[f"put {type(e).__name__}: {str(e)[:120]}"] += 1
            self.backend.after_error()

    def run_round(self, cmd: dict) -> dict:
        b = Buckets(cmd["t0"])
        self.backend.reset()
        graphs = [g for i, g in enumerate(self.model)
                  if i % cmd["split_count"] == cmd["split_index"] % cmd["split_count"]]
        lookups = sum(len(g.entries()) for g in graphs)
        spacing = cmd["pass_s"] / max(1, lookups)
        started = time.monotonic()
        done = 0

        def pace():
            nonlocal done
            done += 1
            ahead = started + done * spacing - time.monotonic()
            if ahead > 0.002:
                time.sleep(ahead)

        for graph in graphs:
            aot_hit = self.lookup(graph.aot, b)
            pace()
            fx_hit = self.lookup(graph.fx, b)
            pace()
            missed = []
            for kernel in graph.kernels:
                if not self.lookup(kernel, b):
                    missed.append(kernel)
                    time.sleep(self.bench_s)
                pace()
            if not fx_hit:
                time.sleep(self.compile_s)
            for kernel in missed:
                self.store(kernel, b)
            if not fx_hit:
                self.store(graph.fx, b)
            if not aot_hit:
                self.store(graph.aot, b)
        return b.dump()


def main() -> int:
    cfg = json.loads(sys.argv[1])
    worker = Worker(cfg)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd.get("exit"):
            break
        print(json.dumps(worker.run_round(cmd)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
