"""The hostile-Redis cases (tests/support/hostile_redis.py) run through a real
pt2cached: one GET per case, timed, with a bystander client doing local puts
and gets meanwhile. Shared by test_remote_hostile.py and
tests/bench/hostile-redis-bench."""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "support"))

from hostile_redis import HostileRedis  # noqa: E402,F401
from remote_helpers import MISS, OK, Native, fx_key, remote_stats, wait_remote_state  # noqa: E402

# Behaviour -> the remote counter that must move.
CASES: dict[str, str] = {
    "normal": "hits",
    "lying_length": "protocol_errors",
    "int64_max_length": "protocol_errors",
    "announce_much_send_little": "timeouts",
    "truncated": "protocol_errors",
    "drip": "timeouts",
    "silence": "timeouts",
    "close_before_reply": "errors",
    "close_mid_reply": "protocol_errors",
    "resp3_map": "protocol_errors",
    "resp3_push": "protocol_errors",
    "resp3_attribute": "protocol_errors",
    "resp3_double": "protocol_errors",
    "resp3_null": "protocol_errors",
    "error_reply": "errors",
    "huge_array": "protocol_errors",
    "garbage": "protocol_errors",
    "negative_length": "protocol_errors",
    "endless_line": "protocol_errors",
    "integer_reply": "protocol_errors",
    "extra_reply": "protocol_errors",
}

COUNTERS = ("hits", "protocol_errors", "timeouts", "errors", "suspensions")


class Bystander:
    """Another client doing local puts and gets (a namespace that never goes
    remote) while a case runs; records latencies and failures."""

    def __init__(self, socket_path, limit_s: float = 30.0, limit_ops: int = 100_000):
        self.client = Native(socket_path)
        self.stop_flag = threading.Event()
        self.latencies: list[float] = []
        self.failures: list[str] = []
        self.limit_s = limit_s
        self.limit_ops = limit_ops
        self.thread = threading.Thread(target=self.run)

    def run(self):
        ends = time.monotonic() + self.limit_s
        i = 0
        while not self.stop_flag.is_set() and i < self.limit_ops and time.monotonic() < ends:
            key, value = f"local-{i % 50}", b"v%d" % (i % 50)
            started = time.monotonic()
            try:
                if i < 50:
                    status = self.client.put("bystander", key, value)
                    if status != OK:
                        self.failures.append(f"put {key}: status {status}")
                else:
                    got = self.client.get("bystander", key)
                    if got != (OK, value):
                        self.failures.append(f"get {key}: {got!r}")
            except Exception as e:  # noqa: BLE001 - recorded and asserted on
                self.failures.append(f"{type(e).__name__}: {e}")
                return
            self.latencies.append(time.monotonic() - started)
            i += 1

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop_flag.set()
        self.thread.join()
        self.client.close()


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


@dataclass
class Result:
    behaviour: str
    status: object = None
    latency_s: float = 0.0
    alive: bool = False
    reached: bool = False  # the GET reached the hostile server
    deltas: dict = field(default_factory=dict)
    bystander_ops: int = 0
    bystander_max_s: float = 0.0
    bystander_failures: list = field(default_factory=list)
    rss_growth_kib: int = 0

    @property
    def expected_counter(self) -> str:
        return CASES[self.behaviour]


def run_case(daemon, server: HostileRedis, behaviour: str) -> Result:
    """One GET through `daemon` while `server` answers it with `behaviour`."""
    wait_remote_state(daemon, "connected")
    result = Result(behaviour)
    before = remote_stats(daemon)
    gets_before = server.count("GET")
    rss_before = rss_kib(daemon.proc.pid)
    redis_key, inner = fx_key(f"hostile-{behaviour}-{time.monotonic_ns()}")
    if behaviour == "normal":
        server.values[redis_key.encode()] = b"remote value"
    server.behaviour = behaviour
    client = Native(daemon.socket)
    try:
        with Bystander(daemon.socket) as bystander:
            time.sleep(0.05)  # the bystander is busy before the GET starts
            started = time.monotonic()
            try:
                result.status = client.get("fx-graph", inner)[0]
            except Exception as e:  # noqa: BLE001 - reported in the result
                result.status = f"{type(e).__name__}: {e}"
            result.latency_s = time.monotonic() - started
            time.sleep(0.05)
    finally:
        server.behaviour = "normal"
        client.close()
    result.alive = daemon.proc.poll() is None
    result.reached = server.count("GET") > gets_before
    result.rss_growth_kib = rss_kib(daemon.proc.pid) - rss_before if result.alive else 0
    after = remote_stats(daemon) if result.alive else before
    result.deltas = {name: after[name] - before[name] for name in COUNTERS}
    result.bystander_ops = len(bystander.latencies)
    result.bystander_max_s = max(bystander.latencies, default=0.0)
    result.bystander_failures = bystander.failures
    return result


def status_text(status) -> str:
    return {OK: "hit", MISS: "miss"}.get(status, str(status))


def table(results: list[Result], op_ms: int) -> str:
    """A markdown table of `results`."""
    lines = [
        f"| case | GET answer | GET latency (op timeout {op_ms} ms) | daemon alive | counter "
        "| bystander ops, max latency | RSS growth |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        counter = f"{r.expected_counter} +{r.deltas.get(r.expected_counter, 0)}"
        lines.append(
            f"| {r.behaviour} | {status_text(r.status)} | {r.latency_s * 1000:.0f} ms "
            f"| {'yes' if r.alive else 'NO'} | {counter} "
            f"| {r.bystander_ops}, {r.bystander_max_s * 1000:.1f} ms "
            f"| {r.rss_growth_kib} KiB |")
    return "\n".join(lines)
