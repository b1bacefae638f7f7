"""Aggregating fleet-sim's worker buckets and Redis samples into the tables it
prints: per round, per second around the failover, and the two arms side by
side."""

from __future__ import annotations

from .redis_stats import summarize

COUNTS = ("gets", "hits", "misses", "errors", "wrong", "puts", "put_errors")


def pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    return s[min(len(s) - 1, int(len(s) * q))]


def merge_buckets(results: list[dict], into: dict[int, dict]) -> None:
    for result in results:
        for sec, row in result["buckets"].items():
            dst = into.setdefault(int(sec), {k: 0 for k in COUNTS} | {"lat": []})
            for k in COUNTS:
                dst[k] += row[k]
            dst["lat"].extend(row["lat"])


def round_summary(name: str, seconds: range, timeline: dict[int, dict],
                  redis_per_sec: dict[int, dict[str, int]]) -> dict:
    rows = [timeline[s] for s in seconds if s in timeline]
    lat = [x for r in rows for x in r["lat"]]
    out = {"round": name, "seconds": len(seconds)} | {k: sum(r[k] for r in rows) for k in COUNTS}
    totals: dict[str, int] = {}
    for s in seconds:
        for cmd, n in redis_per_sec.get(s, {}).items():
            totals[cmd] = totals.get(cmd, 0) + n
    out["redis"] = summarize(totals)
    out["redis_commands"] = totals
    out["hit_rate"] = out["hits"] / out["gets"] if out["gets"] else 0.0
    out["p50_ms"], out["p99_ms"] = pct(lat, 0.5), pct(lat, 0.99)
    out["max_ms"] = max(lat) if lat else 0.0
    return out


def recovery(timeline: dict[int, dict], kill_sec: int, end_sec: int) -> dict:
    """Seconds from the kill to the end of the last second, in the failover
    round, whose hit rate was below 100% (0: never below)."""
    last_bad = None
    worst = 1.0
    for s in range(kill_sec, end_sec + 1):
        row = timeline.get(s)
        if not row or not row["gets"]:
            continue
        rate = row["hits"] / row["gets"]
        worst = min(worst, rate)
        if rate < 1.0:
            last_bad = s
    if last_bad is not None and not any(
            timeline.get(s, {}).get("gets") for s in range(last_bad + 1, end_sec + 1)):
        # No lookups after the last bad second: the recovery was not seen.
        return {"seconds_to_full_hit_rate": None, "worst_second_hit_rate": worst}
    return {"seconds_to_full_hit_rate": 0 if last_bad is None else last_bad + 1 - kill_sec,
            "worst_second_hit_rate": worst}


def print_rounds(title: str, rounds: list[dict]) -> None:
    print(f"  {title}")
    print("    round        s   gets   hit%   errors wrong  p50 ms  p99 ms  max ms  "
          "Redis cmds   GET    SET  other  CPU s  MiB out")
    for r in rounds:
        red = r["redis"]
        print(f"    {r['round']:<10} {r['seconds']:3} {r['gets']:6} {100 * r['hit_rate']:6.2f} "
              f"{r['errors'] + r['put_errors']:6} {r['wrong']:5} {r['p50_ms']:7.2f} "
              f"{r['p99_ms']:7.2f} {r['max_ms']:7.1f} {red['total']:8} {red['get']:6} "
              f"{red['set']:6} {red['other']:6} {red['cpu_ms'] / 1000:6.1f} "
              f"{red['net_out'] / 2**20:8.1f}")


def print_timeline(timeline: dict[int, dict], redis_per_sec: dict[int, dict[str, int]],
                   seconds: range, events: dict[int, list[str]]) -> None:
    print("    t(s)   gets   hit%  errors  p99 ms  Redis cmds/s  events")
    for s in seconds:
        row = timeline.get(s, {k: 0 for k in COUNTS} | {"lat": []})
        rate = f"{100 * row['hits'] / row['gets']:6.1f}" if row["gets"] else "     -"
        cmds = sum(v for k, v in redis_per_sec.get(s, {}).items() if not k.startswith("~"))
        print(f"    {s:4} {row['gets']:6} {rate} {row['errors'] + row['put_errors']:7} "
              f"{pct(row['lat'], 0.99):7.2f} {cmds:12}  {'; '.join(events.get(s, []))}")


def print_comparison(arms: dict[str, dict]) -> None:
    print("\nSummary (whole run, every round)")
    print("  arm                 gets    hit%  client errors  wrong  p50 ms  p99 ms  "
          "Redis cmds     GET     SET  CPU s  MiB out  to full hit rate")
    for name, arm in arms.items():
        t = arm["total"]
        rec = arm.get("recovery", {})
        full = "-" if rec.get("seconds_to_full_hit_rate") is None else \
            f"{rec['seconds_to_full_hit_rate']} s"
        print(f"  {name:<18} {t['gets']:6} {100 * t['hit_rate']:7.2f} {t['errors'] + t['put_errors']:14} "
              f"{t['wrong']:6} {t['p50_ms']:7.2f} {t['p99_ms']:7.2f} {t['redis']['total']:11} "
              f"{t['redis']['get']:7} {t['redis']['set']:7} {t['redis']['cpu_ms'] / 1000:6.1f} "
              f"{t['redis']['net_out'] / 2**20:8.1f}  {full}")
    for name, arm in arms.items():
        t = arm["total"]
        lookups = max(1, t["gets"])
        print(f"  {name:<18} per lookup: {t['redis']['total'] / lookups:.3f} Redis commands, "
              f"{t['redis']['cpu_ms'] * 1000 / lookups:.1f} us of Redis CPU, "
              f"{t['redis']['net_out'] / lookups / 1024:.1f} KiB sent by Redis")
    if "pt2cached" in arms and "redis-py" in arms:
        a, b = arms["pt2cached"]["total"]["redis"], arms["redis-py"]["total"]["redis"]
        if a["total"]:
            print(f"  Redis commands, redis-py / pt2cached: {b['total'] / a['total']:.1f}x "
                  f"(GET+SET only: {(b['get'] + b['set']) / max(1, a['get'] + a['set']):.1f}x)")
