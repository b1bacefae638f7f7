"""Latency histograms, `pt2cache stats --zero` and `pt2cache metrics` (Prometheus text)
against a real pt2cached, the text parsed by the official prometheus_client parser."""

from __future__ import annotations

import json
import time

import pytest
import redis
from integ_helpers import NativeClient
from prometheus_client.parser import text_string_to_metric_families
from pt2harness import STATUS

NS = "fx-graph"


def stats_json(daemon) -> dict:
    result = daemon.cli("stats", "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def metrics(daemon) -> dict:
    """{metric family name: family} from `pt2cache metrics`."""
    result = daemon.cli("metrics")
    assert result.returncode == 0, result.stderr
    return {family.name: family
            for family in text_string_to_metric_families(result.stdout.decode())}


def rows(stats: dict, key: str) -> dict:
    """The "latency" rows by (op, tier, ns), or the "requests" rows by (op, ns, result)."""
    if key == "latency":
        return {(r["op"], r["tier"], r["ns"]): r for r in stats["latency"]}
    return {(r["op"], r["ns"], r["result"]): r["count"] for r in stats["requests"]}


def workload(daemon) -> None:
    """2 puts, 1 NX put refused, 5 memory hits, 3 misses, 1 exists, 1 delete."""
    c = NativeClient(daemon.socket)
    try:
        assert c.put(NS, b"a", b"x" * 100) == STATUS["ok"]
        assert c.put(NS, b"b", b"y" * 5000) == STATUS["ok"]
        assert c.put(NS, b"b", b"z", nx=True) == STATUS["not_stored"]
        for _ in range(5):
            assert c.get(NS, b"a") == (STATUS["ok"], b"x" * 100)
        for i in range(3):
            assert c.get(NS, b"absent%d" % i)[0] == STATUS["miss"]
        assert c.exists(NS, b"a") == STATUS["ok"]
        assert c.delete(NS, b"b") == STATUS["ok"]
    finally:
        c.close()


def test_latency_rows_in_stats(daemon):
    workload(daemon)
    stats = stats_json(daemon)
    latency = rows(stats, "latency")
    assert latency[("get", "memory", NS)]["count"] == 5
    assert latency[("get", "none", NS)]["count"] == 3
    assert latency[("put", "none", NS)]["count"] == 3
    assert latency[("exists", "none", NS)]["count"] == 1
    assert latency[("delete", "none", NS)]["count"] == 1
    assert ("get", "disk", NS) not in latency  # no disk hit happened
    for row in latency.values():
        assert set(row) == {"op", "tier", "ns", "count", "sum_us", "p50_us", "p99_us", "p999_us"}
        assert 0 < row["p50_us"] <= row["p99_us"] <= row["p999_us"] < 10_000_000, row
        assert row["sum_us"] > 0
    requests = rows(stats, "requests")
    assert requests == {("put", NS, "ok"): 2, ("put", NS, "miss"): 1, ("get", NS, "ok"): 5,
                        ("get", NS, "miss"): 3, ("exists", NS, "ok"): 1,
                        ("delete", NS, "ok"): 1}

    text = daemon.cli("stats").stdout.decode()
    assert "latency (from the request's start to its reply being queued)" in text
    assert "P99.9 µs" in text
    line = next(l for l in text.splitlines() if l.startswith(NS) and " memory " in l
                and " get " in l)
    assert line.split()[3] == "5", line


def test_disk_tier_and_resp_are_measured(make_daemon):
    # No memory tier: a hit comes from disk.
    d = make_daemon("--set", "memory.max_size=0")
    c = NativeClient(d.socket)
    try:
        assert c.put(NS, b"k", b"v") == STATUS["ok"]
        assert c.get(NS, b"k") == (STATUS["ok"], b"v")
    finally:
        c.close()
    r = redis.Redis(unix_socket_path=str(d.socket))
    # The RESP front door: GET/SET of Inductor's Redis keys (namespace "redis" for
    # unmapped keys, see docs/torch.md).
    assert r.set("plain-key", b"1")
    assert r.get("plain-key") == b"1"
    assert r.get("no-such-key") is None
    latency = rows(stats_json(d), "latency")
    assert latency[("get", "disk", NS)]["count"] == 1
    resp_ns = {ns for (op, tier, ns) in latency if op == "put" and ns != NS}
    assert len(resp_ns) == 1, latency.keys()
    (ns,) = resp_ns
    assert latency[("get", "disk", ns)]["count"] == 1
    assert latency[("get", "none", ns)]["count"] == 1

    info = r.info("latencystats")
    key = f"latency_percentiles_usec_get_disk_{NS}"
    assert key in info, info
    assert info[key]["count"] == 1
    assert 0 < info[key]["p50"] <= info[key]["p99"] <= info[key]["p99.9"]
    r.close()


def test_stats_zero(daemon):
    workload(daemon)
    before = daemon.cli("stats", "--zero", "--json")
    assert before.returncode == 0, before.stderr
    snapshot = json.loads(before.stdout)
    assert rows(snapshot, "requests")[("get", NS, "ok")] == 5  # counts from before the reset

    keep = NativeClient(daemon.socket)  # a connection open across the reset
    try:
        stats = stats_json(daemon)
        assert stats["latency"] == []
        assert stats["requests"] == []
        for tiers in stats["namespaces"].values():
            for counters in tiers.values():
                assert set(counters.values()) == {0}, counters
        assert stats["daemon"]["connections_active"] >= 2  # a gauge: kept
        assert stats["daemon"]["connections_accepted"] <= 2  # this cli and `keep`
        assert stats["tiers"]["memory"]["count"] == 1  # entries stay
        assert stats["since_reset_s"] < stats["uptime_s"]

        assert keep.get(NS, b"a")[0] == STATUS["ok"]
        stats = stats_json(daemon)
        assert rows(stats, "latency")[("get", "memory", NS)]["count"] == 1
    finally:
        keep.close()

    plain = daemon.cli("stats", "--zero")
    assert plain.returncode == 0
    assert plain.stdout.decode() == "statistics zeroed\n"
    assert stats_json(daemon)["latency"] == []


def sample_value(family, name: str, **labels) -> float:
    found = [s.value for s in family.samples
             if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, (name, labels, family.samples)
    return found[0]


def test_metrics_parse_and_match_stats(daemon):
    workload(daemon)
    families = metrics(daemon)
    stats = stats_json(daemon)

    # Counters of cache requests, by op, ns and result.
    requests = families["pt2cache_requests"]
    assert requests.type == "counter"
    got = {(s.labels["op"], s.labels["ns"], s.labels["result"]): s.value
           for s in requests.samples if s.name == "pt2cache_requests_total"}
    assert got == rows(stats, "requests")

    # Native histograms: cumulative buckets ending in +Inf == _count.
    duration = families["pt2cache_request_duration_seconds"]
    assert duration.type == "histogram"
    latency = rows(stats, "latency")
    series = {(s.labels["op"], s.labels["tier"], s.labels["ns"])
              for s in duration.samples}
    assert series == set(latency)
    for (op, tier, ns), row in latency.items():
        labels = dict(op=op, tier=tier, ns=ns)
        buckets = [(float(s.labels["le"]), s.value) for s in duration.samples
                   if s.name.endswith("_bucket") and
                   all(s.labels[k] == v for k, v in labels.items())]
        assert len(buckets) == 28  # 2^10 .. 2^36 ns, and +Inf
        assert [le for le, _ in buckets] == sorted(le for le, _ in buckets)
        counts = [count for _, count in buckets]
        assert counts == sorted(counts), counts
        assert buckets[-1] == (float("inf"), row["count"])
        assert sample_value(duration, "pt2cache_request_duration_seconds_count",
                            **labels) == row["count"]
        assert sample_value(duration, "pt2cache_request_duration_seconds_sum",
                            **labels) == pytest.approx(row["sum_us"] / 1e6, rel=1e-6)
        # The p50 bucket's bound: at least half the observations at or below it.
        p50_bucket = next(le for le, count in buckets if count >= row["count"] / 2)
        assert row["p50_us"] / 1e6 <= p50_bucket

    # Tier counters, per namespace and tier.
    for field, name in [("hits", "pt2cache_tier_hits"), ("misses", "pt2cache_tier_misses"),
                        ("puts", "pt2cache_tier_puts"),
                        ("bytes_in", "pt2cache_tier_stored_bytes"),
                        ("bytes_out", "pt2cache_tier_served_bytes")]:
        family = families[name]
        assert family.type == "counter"
        for ns, tiers in stats["namespaces"].items():
            for tier, counters in tiers.items():
                assert sample_value(family, name + "_total", ns=ns, tier=tier) == counters[field]
    assert sample_value(families["pt2cache_tier_hits"], "pt2cache_tier_hits_total", ns=NS,
                        tier="memory") == 5

    # Gauges of the local tiers.
    for tier in ("memory", "disk"):
        assert sample_value(families["pt2cache_tier_entries"], "pt2cache_tier_entries",
                            tier=tier) == stats["tiers"][tier]["count"]
        assert sample_value(families["pt2cache_tier_size_bytes"], "pt2cache_tier_size_bytes",
                            tier=tier) == stats["tiers"][tier]["bytes"]
        assert sample_value(families["pt2cache_tier_capacity_bytes"],
                            "pt2cache_tier_capacity_bytes",
                            tier=tier) == stats["tiers"][tier]["capacity"]
    assert families["pt2cache_connections_active"].type == "gauge"
    assert sample_value(families["pt2cache_remote_state"], "pt2cache_remote_state",
                        state="disabled") == 1
    assert sample_value(families["pt2cache_remote_state"], "pt2cache_remote_state",
                        state="connected") == 0
    info = families["pt2cache_info"].samples[0]
    assert info.labels["version"] == stats["version"]
    assert info.labels["pid"] == str(stats["pid"])
    # Every family carries HELP text.
    assert all(family.documentation for family in families.values())


def test_small_store_write_times_in_stats_metrics_and_zero(make_daemon):
    """Each transaction writing put entries into small.mdb is timed: STATS'
    tiers.disk.small_store_writes, `pt2cache stats`, the
    pt2cache_small_store_write_seconds histogram; ZERO clears it."""
    d = make_daemon("--set", "disk.write_mode=sync", sub="sync")
    c = NativeClient(d.socket)
    try:
        for i in range(3):  # sync: one transaction per put
            assert c.put(NS, b"k%d" % i, b"v" * 200) == STATUS["ok"]
        assert c.put(NS, b"large", b"w" * 40000) == STATUS["ok"]  # a file: not counted
    finally:
        c.close()
    writes = stats_json(d)["tiers"]["disk"]["small_store_writes"]
    assert writes["count"] == 3
    assert 0 < writes["p50_ms"] <= writes["p99_ms"] <= writes["max_ms"]
    assert writes["sum_ms"] <= 3 * writes["max_ms"] * 1.125
    assert "small.mdb 3 writes, p50 " in d.cli("stats", check=True).stdout.decode()

    family = metrics(d)["pt2cache_small_store_write_seconds"]
    assert family.type == "histogram"
    assert sample_value(family, "pt2cache_small_store_write_seconds_count") == 3
    assert sample_value(family, "pt2cache_small_store_write_seconds_sum") == \
        pytest.approx(writes["sum_ms"] / 1e3, rel=1e-6)
    assert sample_value(family, "pt2cache_small_store_write_seconds_bucket", le="+Inf") == 3

    assert d.cli("stats", "--zero").returncode == 0
    assert stats_json(d)["tiers"]["disk"]["small_store_writes"]["count"] == 0
    assert "small.mdb" not in d.cli("stats", check=True).stdout.decode()

    files_only = make_daemon("--set", "disk.small_entry_max=0", sub="files")
    assert "small_store_writes" not in stats_json(files_only)["tiers"]["disk"]
    assert "pt2cache_small_store_write_seconds" not in metrics(files_only)


def test_idle_time_between_requests_is_not_latency(daemon):
    """A request's latency starts when its batch is read: the second between two
    requests on one connection, spent waiting for the client, is not counted."""
    c = NativeClient(daemon.socket)
    r = redis.Redis(unix_socket_path=str(daemon.socket))
    try:
        assert c.put(NS, b"idle", b"v") == STATUS["ok"]
        assert r.set("idle-key", b"v")
        assert r.ping()  # not measured: the next request starts after its reply
        time.sleep(1.0)
        assert c.get(NS, b"idle") == (STATUS["ok"], b"v")
        assert r.get("idle-key") == b"v"
        with r.pipeline(transaction=False) as pipe:
            pipe.get("idle-key").get("idle-key").get("absent-key")
            time.sleep(0.5)  # before the pipeline is sent: not counted either
            assert pipe.execute() == [b"v", b"v", None]
    finally:
        c.close()
        r.close()
    latency = rows(stats_json(daemon), "latency")
    gets = {ns: row for (op, tier, ns), row in latency.items() if op == "get"}
    assert NS in gets and len(gets) == 2, latency.keys()
    for row in latency.values():
        assert row["p999_us"] < 300_000, row
