"""``python -m pt2cache``: the CLI's ``stats`` (and ``ping``) for hosts without
the C++ tools. ``stats`` prints what ``pt2cache stats`` prints, table for
table (client/cli/format.cpp), and ``stats --json`` the daemon's STATS object;
exit statuses are the CLI's (docs/operations.md)."""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .client import Client, default_socket_path
from .errors import CacheTimeoutError, Pt2CacheError, UnreachableError

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_SERVER = 4

_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB")

# (title, field, is a byte count), as format.cpp's k_columns.
_COLUMNS: Tuple[Tuple[str, str, bool], ...] = (
    ("HITS", "hits", False),
    ("MISSES", "misses", False),
    ("PUTS", "puts", False),
    ("BYTES IN", "bytes_in", True),
    ("BYTES OUT", "bytes_out", True),
    ("EVICTIONS", "evictions", False),
    ("CORRUPT", "corrupt", False),
    ("ERRORS", "errors", False),
)


def human_bytes(count: int) -> str:
    """``0 B``, ``1023 B``, ``1.5 KiB``, ``12.0 MiB``."""
    if count < 1024:
        return f"{count} B"
    value = count / 1024
    unit = 0
    while value >= 1024 and unit + 1 < len(_UNITS):
        value /= 1024
        unit += 1
    return f"{value:.1f} {_UNITS[unit]}"


def human_duration(seconds: float) -> str:
    """``42s``, ``3m 07s``, ``2h 03m 07s``, ``4d 02h 03m``."""
    total = int(max(0.0, math.floor(seconds)))
    days, hours, minutes, secs = total // 86400, total // 3600 % 24, total // 60 % 60, total % 60
    if days > 0:
        return f"{days}d {hours:02}h {minutes:02}m"
    if hours > 0:
        return f"{hours}h {minutes:02}m {secs:02}s"
    if minutes > 0:
        return f"{minutes}m {secs:02}s"
    return f"{secs}s"


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _dump(value: Any) -> str:
    """A JSON value as nlohmann::json::dump writes it (compact)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True)


def _counter(obj: Any, field: str) -> int:
    value: Any = obj.get(field) if isinstance(obj, dict) else None
    return int(value) if _is_number(value) else 0


def _real(obj: Any, field: str) -> float:
    value: Any = obj.get(field) if isinstance(obj, dict) else None
    return float(value) if _is_number(value) else 0.0


def _field_text(obj: Dict[str, Any], field: str, fallback: str = "?") -> str:
    value = obj.get(field)
    if value is None:
        return fallback
    return value if isinstance(value, str) else _dump(value)


def _items(obj: Dict[str, Any]) -> List[Tuple[str, Any]]:
    # nlohmann::json keeps object members sorted by key.
    return sorted(obj.items())


def _render_header(stats: Dict[str, Any]) -> str:
    out = f"pt2cached {_field_text(stats, 'version')}, pid {_field_text(stats, 'pid')}"
    uptime: Any = stats.get("uptime_s")
    if _is_number(uptime):
        out += f", up {human_duration(float(uptime))}"
    out += "\n"
    for field, title in (("socket", "socket   "), ("cache_dir", "cache dir")):
        if field in stats:
            out += f"{title}  {_field_text(stats, field)}\n"
    if stats.get("force_disable_caches") is True:
        out += "caches force-disabled (TORCHINDUCTOR_FORCE_DISABLE_CACHES)\n"
    return out


def _render_tiers(stats: Dict[str, Any]) -> str:
    tiers = stats.get("tiers")
    if not isinstance(tiers, dict):
        return ""
    out = f"\n{'TIER':<8}  {'ENTRIES':>9}  {'SIZE':>10}  {'CAPACITY':>10}\n"
    for name, tier in _items(tiers):
        if not isinstance(tier, dict):
            out += f"{name:<8}  {'off':>9}\n"
            continue
        if "endpoint" in tier:
            read_only = ", read-only" if tier.get("read_only") is True else ""
            out += (f"{name:<8}  {_field_text(tier, 'state')} ({_field_text(tier, 'endpoint')}"
                    f"{read_only}), write-behind queue {_counter(tier, 'count')} entries, "
                    f"{human_bytes(_counter(tier, 'bytes'))} of "
                    f"{human_bytes(_counter(tier, 'capacity'))}\n")
            continue
        out += (f"{name:<8}  {_counter(tier, 'count'):>9}  "
                f"{human_bytes(_counter(tier, 'bytes')):>10}  "
                f"{human_bytes(_counter(tier, 'capacity')):>10}\n")
        queue = tier.get("write_queue")
        if isinstance(queue, dict):  # the disk tier's asynchronous write queue
            out += (f"{'':<8}  write queue {_counter(queue, 'entries')} entries, "
                    f"{human_bytes(_counter(queue, 'bytes'))} of "
                    f"{human_bytes(_counter(queue, 'capacity'))}, "
                    f"oldest {_real(queue, 'oldest_age_s'):.1f} s\n")
        writes = tier.get("small_store_writes")  # small.mdb's write transactions
        if isinstance(writes, dict) and _counter(writes, "count") > 0:
            out += (f"{'':<8}  small.mdb {_counter(writes, 'count')} writes, "
                    f"p50 {_real(writes, 'p50_ms'):.1f} ms, p99 {_real(writes, 'p99_ms'):.1f} ms, "
                    f"slowest {_real(writes, 'max_ms'):.1f} ms\n")
    return out


def _render_daemon(stats: Dict[str, Any]) -> str:
    daemon = stats.get("daemon")
    if not isinstance(daemon, dict):
        return ""
    width = max((len(name) for name in daemon), default=0)
    out = "\ndaemon\n"
    for name, value in _items(daemon):
        out += f"  {name:<{width}}  {_dump(value)}\n"
    return out


def _render_remote(stats: Dict[str, Any]) -> str:
    remote = stats.get("remote")
    if not isinstance(remote, dict) or "hits" not in remote:
        return ""
    state = remote.get("state", "disabled")
    if state == "disabled":
        return ""
    out = f"\nremote {_field_text(remote, 'state')}\n"
    line = ""
    for name, value in _items(remote):
        if name == "state":
            continue
        shown = human_bytes(int(value)) if name == "queue_bytes" else _dump(value)
        cell = f"  {name} {shown}"
        if len(line.encode()) + len(cell.encode()) > 88:
            out += line + "\n"
            line = ""
        line += cell
    return out + line + "\n"


def _render_compile(stats: Dict[str, Any]) -> str:
    compile_stats = stats.get("compile")
    if not isinstance(compile_stats, dict) or not compile_stats:
        return ""
    out = "\ncompile cache\n"
    out += (f"  {'NAMESPACE':<12}  {'LOOKUPS':>8}  {'HITS':>8}  {'MISSES':>8}  {'BUILDS':>8}  "
            f"{'SAVED':>12}\n")
    for ns, row in _items(compile_stats):
        if not isinstance(row, dict):
            continue
        saved_s = _counter(row, "saved_ms") / 1000.0
        out += (f"  {ns:<12}  {_counter(row, 'lookups'):>8}  {_counter(row, 'hits'):>8}  "
                f"{_counter(row, 'misses'):>8}  {_counter(row, 'builds'):>8}  {saved_s:>10.1f} s\n")
    return out


def render_stats(stats: Dict[str, Any]) -> str:
    """The STATS object as ``pt2cache stats`` prints it. Raises KeyError or
    TypeError when ``stats`` lacks the documented shape."""
    namespaces = stats["namespaces"]
    if not isinstance(namespaces, dict):
        raise TypeError("\"namespaces\" is not an object")
    out = _render_header(stats) + _render_tiers(stats) + _render_daemon(stats)
    out += _render_remote(stats) + _render_compile(stats)

    rows: List[List[str]] = []
    for ns, tiers in _items(namespaces):
        for tier_name, tier in _items(tiers):
            row = [ns, tier_name]
            active = False
            for _, field, is_bytes in _COLUMNS:
                value = _counter(tier, field)
                active = active or value != 0
                row.append(human_bytes(value) if is_bytes else str(value))
            if active:
                rows.append(row)
    out += "\n"
    if not rows:
        return out + "no cache activity yet\n"
    titles = ["NAMESPACE", "TIER"] + [title for title, _, _ in _COLUMNS]
    widths = [max(len(titles[i]), *(len(row[i]) for row in rows)) for i in range(len(titles))]

    def line(cells: Sequence[str]) -> str:
        text = f"{cells[0]:<{widths[0]}}  {cells[1]:<{widths[1]}}"
        for i in range(2, len(widths)):
            text += f"  {cells[i]:>{widths[i]}}"
        return text + "\n"

    out += line(titles)
    for row in rows:
        out += line(row)
    return out + _render_latency(stats)


def _render_latency(stats: Dict[str, Any]) -> str:
    """The latency table under the counters (``stats["latency"]``), as the CLI prints it."""
    latency = stats.get("latency")
    if not isinstance(latency, list) or not latency:
        return ""
    titles = ["NAMESPACE", "OP", "TIER", "COUNT", "P50 µs", "P99 µs", "P99.9 µs"]
    rows = [[str(row["ns"]), str(row["op"]), str(row["tier"]), str(int(row["count"])),
             f"{float(row['p50_us']):.1f}", f"{float(row['p99_us']):.1f}",
             f"{float(row['p999_us']):.1f}"] for row in latency]
    widths = [max(len(titles[i]), *(len(row[i]) for row in rows)) for i in range(len(titles))]

    def line(cells: Sequence[str]) -> str:
        text = "  ".join(f"{cell:<{widths[i]}}" if i < 3 else f"{cell:>{widths[i]}}"
                         for i, cell in enumerate(cells))
        return text.rstrip(" ") + "\n"

    out = "\nlatency (from the request's start to its reply being queued)\n" + line(titles)
    for row in rows:
        out += line(row)
    return out


def _complain(message: str) -> None:
    print(f"pt2cache: {message}", file=sys.stderr)


def _failure_status(error: Pt2CacheError) -> int:
    _complain(str(error))
    if isinstance(error, (UnreachableError, CacheTimeoutError)):
        return EXIT_UNREACHABLE
    return EXIT_SERVER


def _client(args: argparse.Namespace, timeout_s: Optional[float] = None) -> Client:
    timeout = timeout_s if timeout_s is not None else args.timeout / 1000.0
    return Client(args.socket, timeout=timeout, connect_timeout=timeout, retry_after=0.0,
                  strict=True, client_name="pt2cache-python-cli")


def _run_stats(args: argparse.Namespace) -> int:
    try:
        stats = _client(args).stats(zero=args.zero)
    except Pt2CacheError as e:
        return _failure_status(e)
    if stats is None:  # strict clients raise instead; kept for the type checker
        _complain("no STATS reply")
        return EXIT_SERVER
    if args.json:
        print(_dump_reply(stats))
        return EXIT_OK
    if args.zero:
        print("statistics zeroed")
        return EXIT_OK
    try:
        sys.stdout.write(render_stats(stats))
    except (KeyError, TypeError, ValueError) as e:
        _complain(f"unexpected STATS reply ({e!r}); try --json")
        return EXIT_SERVER
    return EXIT_OK


def _dump_reply(stats: Dict[str, Any]) -> str:
    # Members in the reply's (sorted) order, compact, as the CLI prints it.
    return json.dumps(stats, separators=(",", ":"), ensure_ascii=False)


_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|s|m|h|d)?")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str) -> float:
    """``500ms``, ``5s``, ``2m``, ``1h``, ``1d`` (a bare number: seconds) as
    seconds, as the CLI's --wait reads them; at most 30 days."""
    match = _DURATION.fullmatch(text)
    if match is None:
        raise argparse.ArgumentTypeError(
            f"invalid duration {text!r}: expected a number with a unit, e.g. 500ms, 5s, 2m, 1h, 1d")
    seconds = float(match.group(1)) * _DURATION_UNITS[match.group(2) or "s"]
    if seconds > 30 * 86400:
        raise argparse.ArgumentTypeError(f"duration {text!r} is longer than 30 days")
    return seconds


def _run_ping(args: argparse.Namespace) -> int:
    if args.wait is None:
        try:
            rtt = _client(args).ping()
        except Pt2CacheError as e:
            return _failure_status(e)
        print(f"{round((rtt or 0.0) * 1e6)} µs")
        return EXIT_OK
    started = time.monotonic()
    deadline = started + args.wait
    attempts = 0
    while True:
        attempts += 1
        left = deadline - time.monotonic()
        try:
            rtt = _client(args, max(0.001, min(left, args.timeout / 1000.0))).ping()
        except (UnreachableError, CacheTimeoutError) as e:
            # The last attempt is made at the deadline, never before it.
            left = deadline - time.monotonic()
            if left <= 0:
                _complain(f"pt2cached did not answer within {args.wait_text} ({attempts} attempts "
                          f"in {time.monotonic() - started:.1f} s); last error: {e}")
                return EXIT_UNREACHABLE
            time.sleep(min(0.1, left))
            continue
        except Pt2CacheError as e:
            return _failure_status(e)
        print(f"{round((rtt or 0.0) * 1e6)} µs")
        return EXIT_OK


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m pt2cache",
        description="Inspect pt2cached without the C++ tools (the subset of `pt2cache` that "
        "needs only Python).",
        epilog="Exit status: 0 success, 2 usage error, 3 pt2cached unreachable or no answer "
        "within --timeout, 4 pt2cached answered an error or a reply this client does not "
        "understand.")
    parser.add_argument("--socket", default=None, metavar="PATH",
                        help=f"pt2cached's socket (default: {default_socket_path()})")
    parser.add_argument("--timeout", type=int, default=10_000, metavar="MS",
                        help="give up connecting, or waiting for an answer, after MS "
                        "milliseconds (default 10000)")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    stats = commands.add_parser("stats", help="the daemon's counters per namespace and tier")
    stats.add_argument("--json", action="store_true", help="print the raw JSON reply")
    stats.add_argument("-z", "--zero", action="store_true",
                       help="reset the daemon's counters and latency histograms (with --json: "
                            "print the counts from just before the reset)")
    ping = commands.add_parser("ping", help="round-trip time of one request, in µs")
    ping.add_argument("--wait", dest="wait_text", default=None, metavar="DURATION",
                      help="retry until pt2cached answers, for at most DURATION (e.g. 5s, 500ms)")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help exits 0, a usage error 2
        return int(e.code) if isinstance(e.code, int) else EXIT_USAGE
    if args.timeout < 1 or args.timeout > 3_600_000:
        _complain("--timeout: expected 1 to 3600000 milliseconds")
        return EXIT_USAGE
    args.wait = None
    if args.command == "ping" and args.wait_text is not None:
        try:
            args.wait = parse_duration(args.wait_text)
        except argparse.ArgumentTypeError as e:
            _complain(f"--wait: {e}")
            return EXIT_USAGE
    if args.command == "stats":
        return _run_stats(args)
    return _run_ping(args)
