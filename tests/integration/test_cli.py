"""The pt2cache CLI end to end against a real pt2cached."""

from __future__ import annotations

import datetime
import json
import os
import re
import socket
import subprocess
import time

import pytest
from integ_helpers import NativeClient, clean_env, drain_disk_queue, put_body
from pt2harness import OP, PT2CACHE_CLI, frame, run_cli

OK, MISS, USAGE, UNREACHABLE, SERVER = 0, 1, 2, 3, 4


def err(result) -> str:
    return result.stderr.decode(errors="replace")


def out(result) -> str:
    return result.stdout.decode(errors="replace")


def test_ping(daemon):
    result = daemon.cli("ping")
    assert result.returncode == OK, err(result)
    assert re.fullmatch(r"\d+ µs\n", out(result)), out(result)
    assert result.stderr == b""


SIZES = [0, 1, 1024, 1 << 20, 64 << 20]


@pytest.mark.parametrize("size", SIZES, ids=["0B", "1B", "1KiB", "1MiB", "64MiB"])
def test_put_get_round_trip(daemon, tmp_root, size):
    value = os.urandom(size)
    src = tmp_root / "in.bin"
    src.write_bytes(value)

    # put NS KEY FILE, and put NS KEY - (stdin)
    r = daemon.cli("put", "pgo", f"file-{size}", str(src))
    assert (r.returncode, r.stdout, r.stderr) == (OK, b"", b""), err(r)
    r = daemon.cli("put", "pgo", f"stdin-{size}", "-", input=value)
    assert (r.returncode, r.stdout, r.stderr) == (OK, b"", b""), err(r)

    # get -o FILE, and get to stdout
    dst = tmp_root / "out.bin"
    r = daemon.cli("get", "pgo", f"file-{size}", "-o", str(dst))
    assert (r.returncode, r.stdout, r.stderr) == (OK, b"", b""), err(r)
    assert dst.stat().st_size == size and dst.read_bytes() == value
    r = daemon.cli("get", "pgo", f"stdin-{size}")
    assert (r.returncode, r.stderr) == (OK, b""), err(r)
    assert len(r.stdout) == size and r.stdout == value

    if size <= 1 << 20:  # the other spellings, where they are cheap
        r = daemon.cli("put", "pgo", f"implicit-{size}", input=value)  # no FILE: stdin
        assert r.returncode == OK, err(r)
        r = daemon.cli("get", "pgo", f"implicit-{size}", "-o", "-")
        assert (r.returncode, r.stdout) == (OK, value)
        r = daemon.cli("get", "pgo", f"stdin-{size}", "--output", str(dst))
        assert r.returncode == OK and dst.read_bytes() == value


def test_get_output_overwrites_existing_file(daemon, tmp_root):
    dst = tmp_root / "out.bin"
    dst.write_bytes(b"x" * 100)
    assert daemon.cli("put", "pgo", "k", "-", input=b"short").returncode == OK
    assert daemon.cli("get", "pgo", "k", "-o", str(dst)).returncode == OK
    assert dst.read_bytes() == b"short"


def test_ttl_expiry(daemon):
    r = daemon.cli("put", "pgo", "ttl-key", "--ttl", "1", input=b"expiring")
    assert r.returncode == OK, err(r)
    r = daemon.cli("put", "pgo", "forever", "--ttl", "0", input=b"stays")
    assert r.returncode == OK, err(r)
    put_at = time.monotonic()
    r = daemon.cli("get", "pgo", "ttl-key")
    assert (r.returncode, r.stdout) == (OK, b"expiring"), err(r)

    deadline = put_at + 5.0
    while True:
        r = daemon.cli("get", "pgo", "ttl-key")
        if r.returncode != OK:
            break
        assert time.monotonic() < deadline, "a 1 s TTL entry was still served after 5 s"
        time.sleep(0.1)
    elapsed = time.monotonic() - put_at
    assert r.returncode == MISS, err(r)
    assert elapsed >= 0.9, f"expired after {elapsed:.2f} s, before its 1 s TTL"
    assert "no entry" in err(r)
    r = daemon.cli("get", "pgo", "forever")
    assert (r.returncode, r.stdout) == (OK, b"stays")


def test_put_nx(daemon):
    r = daemon.cli("put", "autotune", "nx-key", "--nx", input=b"first")
    assert r.returncode == OK, err(r)
    r = daemon.cli("put", "autotune", "nx-key", "--nx", input=b"second")
    assert r.returncode == MISS, err(r)
    assert err(r).startswith("pt2cache: not stored"), err(r)
    assert "nx-key" in err(r)
    r = daemon.cli("get", "autotune", "nx-key")
    assert (r.returncode, r.stdout) == (OK, b"first")
    # Without --nx it overwrites.
    assert daemon.cli("put", "autotune", "nx-key", input=b"third").returncode == OK
    assert daemon.cli("get", "autotune", "nx-key").stdout == b"third"


def test_rm(daemon):
    assert daemon.cli("put", "pgo", "doomed", input=b"v").returncode == OK
    r = daemon.cli("rm", "pgo", "doomed")
    assert (r.returncode, r.stdout, r.stderr) == (OK, b"", b""), err(r)
    r = daemon.cli("get", "pgo", "doomed")
    assert r.returncode == MISS
    r = daemon.cli("rm", "pgo", "doomed")
    assert r.returncode == MISS
    assert 'no entry "doomed" in pgo' in err(r), err(r)


def test_ls_pages(daemon):
    # More than the CLI's 1000-entry page, written in one pipelined burst.
    keys = {f"key-{i:05d}".encode(): b"v%d" % i for i in range(1500)}
    with_conn = NativeClient(daemon.socket)
    with_conn.put_many("lsns", keys)
    # The daemon pages too: a 1000-entry page is not the last.
    cursor, page = with_conn.list_page("lsns", b"", 1000)
    assert len(page) == 1000 and cursor != b""
    cursor2, page2 = with_conn.list_page("lsns", cursor, 1000)
    assert len(page2) == 500 and cursor2 == b""
    assert {k for k, _, _ in page + page2} == set(keys)
    with_conn.close()

    r = daemon.cli("ls", "lsns")
    assert r.returncode == OK, err(r)
    lines = out(r).splitlines()
    assert len(lines) == 1500
    assert set(lines) == {k.decode() for k in keys}

    r = daemon.cli("ls", "lsns", "--limit", "1200")
    assert r.returncode == OK, err(r)
    limited = out(r).splitlines()
    assert len(limited) == 1200 and len(set(limited)) == 1200
    assert limited == lines[:1200], "--limit must show a prefix of the same order"

    r = daemon.cli("ls", "lsns", "--limit", "3")
    assert out(r).splitlines() == lines[:3]

    r = daemon.cli("ls", "empty-ns")
    assert (r.returncode, r.stdout) == (OK, b"")


def test_ls_long(daemon):
    sizes = {"zero": 0, "ten": 10, "page": 4096, "big": 100_000}
    for key, size in sizes.items():
        assert daemon.cli("put", "fx-graph", key, input=b"z" * size).returncode == OK
    now = datetime.datetime.now()
    r = daemon.cli("ls", "fx-graph", "--long")
    assert r.returncode == OK, err(r)
    seen = {}
    for line in out(r).splitlines():
        m = re.fullmatch(r" *(\d+)  (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)  (\S+)", line)
        assert m, f"unexpected ls --long line {line!r}"
        mtime = datetime.datetime.strptime(m[2], "%Y-%m-%d %H:%M:%S")
        assert abs((mtime - now).total_seconds()) < 120, line
        seen[m[3]] = int(m[1])
    assert seen == sizes
    r = daemon.cli("ls", "fx-graph", "-l")
    assert r.stdout == out(daemon.cli("ls", "fx-graph", "--long")).encode()


def test_ls_escapes_binary_keys(daemon):
    conn = NativeClient(daemon.socket)
    conn.put_many("pgo", {b"a\nb\\c\xff": b"v"})
    conn.close()
    r = daemon.cli("ls", "pgo")
    assert out(r) == "a\\x0ab\\x5cc\\xff\n"


def test_clear(daemon):
    for key in ("a", "b", "c"):
        assert daemon.cli("put", "autotune", key, input=b"v").returncode == OK
    assert daemon.cli("put", "pgo", "other", input=b"v").returncode == OK

    r = daemon.cli("clear", "autotune")
    assert r.returncode == USAGE
    assert "pass --yes" in err(r)
    assert daemon.cli("get", "autotune", "a").returncode == OK, "clear without --yes removed data"

    r = daemon.cli("clear", "autotune", "--yes")
    assert r.returncode == OK, err(r)
    assert out(r) == "removed 3 entries from autotune\n"
    for key in ("a", "b", "c"):
        assert daemon.cli("get", "autotune", key).returncode == MISS
    assert daemon.cli("ls", "autotune").stdout == b""
    assert daemon.cli("get", "pgo", "other").returncode == OK, "clear touched another namespace"

    r = daemon.cli("clear", "autotune", "--yes")
    assert out(r) == "removed 0 entries from autotune\n"
    assert daemon.cli("put", "autotune", "solo", input=b"v").returncode == OK
    assert out(daemon.cli("clear", "autotune", "--yes")) == "removed 1 entry from autotune\n"


def test_stats_counts_exactly(make_daemon):
    d = make_daemon()
    value = b"0123456789"
    assert d.cli("put", "fx-graph", "k1", input=value).returncode == OK
    assert d.cli("get", "fx-graph", "k1").returncode == OK          # memory hit
    assert d.cli("get", "fx-graph", "k1").returncode == OK          # memory hit
    for key in ("m1", "m2", "m3"):                                   # memory + disk misses
        assert d.cli("get", "fx-graph", key).returncode == MISS
    assert d.cli("get", "aot-autograd", "nothing").returncode == MISS

    r = d.cli("stats", "--json")
    assert r.returncode == OK, err(r)
    stats = json.loads(r.stdout)
    fx = stats["namespaces"]["fx-graph"]
    assert fx["memory"] == {"hits": 2, "misses": 3, "puts": 1, "bytes_in": 10, "bytes_out": 20,
                            "evictions": 0, "corrupt": 0, "errors": 0}
    assert fx["disk"] == {"hits": 0, "misses": 3, "puts": 1, "bytes_in": 10, "bytes_out": 0,
                          "evictions": 0, "corrupt": 0, "errors": 0}
    assert fx["remote"]["hits"] == 0 and fx["remote"]["misses"] == 0
    aot = stats["namespaces"]["aot-autograd"]
    assert (aot["memory"]["misses"], aot["disk"]["misses"]) == (1, 1)
    assert stats["daemon"]["connections_active"] == 1
    assert stats["daemon"]["protocol_errors"] == 0
    assert stats["daemon"]["peers_refused"] == 0
    assert stats["pid"] == d.proc.pid
    assert stats["socket"] == str(d.socket)
    assert stats["cache_dir"] == str(d.cache_dir)
    assert stats["force_disable_caches"] is False
    assert stats["tiers"]["disk"]["count"] == 1
    assert stats["tiers"]["memory"]["count"] == 1
    assert stats["tiers"]["remote"] is None

    # After a restart the memory tier is empty: a disk hit, then a memory hit.
    assert d.stop() == 0
    d.start()
    assert d.cli("get", "fx-graph", "k1").stdout == value
    assert d.cli("get", "fx-graph", "k1").stdout == value
    fx = d.stats()["namespaces"]["fx-graph"]
    assert (fx["memory"]["hits"], fx["memory"]["misses"]) == (1, 1)
    assert (fx["disk"]["hits"], fx["disk"]["misses"], fx["disk"]["bytes_out"]) == (1, 0, 10)


def test_stats_table_lists_namespaces(daemon):
    assert daemon.cli("put", "fx-graph", "k", input=b"v" * 2048).returncode == OK
    assert daemon.cli("get", "autotune", "missing").returncode == MISS
    r = daemon.cli("stats")
    assert r.returncode == OK, err(r)
    text = out(r)
    assert f"pid {daemon.proc.pid}" in text
    for name in ("connections_accepted", "peers_refused", "protocol_errors", "requests"):
        assert re.search(rf"^  {name} +\d+$", text, re.M), name
    header = re.search(r"^NAMESPACE +TIER +HITS +MISSES +PUTS +BYTES IN +BYTES OUT +EVICTIONS"
                       r" +CORRUPT +ERRORS$", text, re.M)
    assert header, text
    assert re.search(r"^fx-graph +memory +0 +0 +1 +2\.0 KiB +0 B +0 +0 +0$", text, re.M), text
    assert re.search(r"^fx-graph +disk +0 +0 +1 +2\.0 KiB +0 B +0 +0 +0$", text, re.M), text
    assert re.search(r"^autotune +memory +0 +1 +0 +0 B +0 B +0 +0 +0$", text, re.M), text
    assert re.search(r"^autotune +disk +0 +1 +0 +0 B +0 B +0 +0 +0$", text, re.M), text
    assert not re.search(r"^\S+ +remote +\d", text, re.M), "idle tiers are not listed"


def test_stats_on_fresh_daemon(daemon):
    r = daemon.cli("stats")
    assert r.returncode == OK
    assert "no cache activity yet" in out(r)
    stats = json.loads(daemon.cli("stats", "--json").stdout)
    assert stats["namespaces"] == {}


def test_config_command(daemon, tmp_root):
    cfg = tmp_root / "cfg.toml"
    cfg.write_text('[disk]\nmax_size = "3GiB"\n')
    env = clean_env(XDG_RUNTIME_DIR=str(tmp_root / "run"), HOME=str(tmp_root / "home"))
    import subprocess
    r = subprocess.run([PT2CACHE_CLI, "--config", str(cfg), "config"], capture_output=True,
                       env=env, timeout=30)
    assert r.returncode == OK, err(r)
    text = out(r)
    assert f"# config file: {cfg}" in text
    assert f'disk.max_size = 3221225472  # file {cfg}' in text
    assert "memory.max_size = 268435456  # default" in text
    sock = tmp_root / "run" / "pt2cache" / "pt2cached.sock"
    assert f'daemon.socket = "{sock}"  # default (from XDG_RUNTIME_DIR)' in text
    assert f"# socket used by pt2cache: {sock}" in text
    assert f'disk.cache_dir = "{tmp_root}/home/.cache/pt2cache"  # default (from HOME)' in text

    r = run_cli("--socket", "/tmp/elsewhere.sock", "--config", str(cfg), "config")
    assert "# socket used by pt2cache: /tmp/elsewhere.sock" in out(r)

    bad = tmp_root / "bad.toml"
    bad.write_text("[disk]\nmax_sizee = 1\n")
    r = run_cli("--config", str(bad), "config")
    assert r.returncode == USAGE
    assert f"{bad}: disk.max_sizee: unknown key" in err(r)


def test_cli_finds_the_daemon_like_the_daemon_does(make_daemon, tmp_root):
    import subprocess
    run = tmp_root / "xdg-run"
    run.mkdir(mode=0o700)
    d = make_daemon(start=False)
    d.socket = run / "pt2cache" / "pt2cached.sock"  # the XDG_RUNTIME_DIR default
    d.start()
    env = clean_env(XDG_RUNTIME_DIR=str(run), HOME=str(tmp_root))
    r = subprocess.run([PT2CACHE_CLI, "ping"], capture_output=True, env=env, timeout=30)
    assert r.returncode == OK, err(r)
    # PT2CACHE_SOCKET wins over XDG_RUNTIME_DIR, for the CLI as for the daemon.
    env["PT2CACHE_SOCKET"] = str(tmp_root / "nowhere.sock")
    r = subprocess.run([PT2CACHE_CLI, "ping"], capture_output=True, env=env, timeout=30)
    assert r.returncode == UNREACHABLE
    assert "nowhere.sock" in err(r)
    # --socket wins over everything.
    r = subprocess.run([PT2CACHE_CLI, "--socket", str(d.socket), "ping"], capture_output=True,
                       env=env, timeout=30)
    assert r.returncode == OK, err(r)


def test_storage_error_exits_4(make_daemon):
    # With disk.write_mode=sync the put waits for its file, so the error is the put's.
    # Every entry a file (disk.small_entry_max=0): a file where the namespace's
    # directory belongs makes every write there fail.
    d = make_daemon("--set", "memory.max_size=0", "--set", "disk.write_mode=sync",
                    "--set", "disk.small_entry_max=0")
    (d.cache_dir / "v1").mkdir(parents=True, exist_ok=True)
    (d.cache_dir / "v1" / "pgo").write_text("in the way")
    r = d.cli("put", "pgo", "k", input=b"value")
    assert r.returncode == SERVER, err(r)
    assert err(r).startswith("pt2cache: ") and "pgo" in err(r), err(r)
    assert d.cli("get", "pgo", "k").returncode == MISS
    assert d.cli("put", "fx-graph", "k", input=b"value").returncode == OK, "other namespaces work"
    disk = d.stats()["namespaces"]["pgo"]["disk"]
    assert disk["errors"] == 1 and disk["puts"] == 0


def test_storage_error_of_a_queued_put_is_counted_and_logged(make_daemon):
    # The default async mode answers the put once queued; the failed write is
    # counted and logged, and the entry is a miss once the queue has moved on.
    d = make_daemon("--set", "memory.max_size=0", "--set", "disk.small_entry_max=0")
    (d.cache_dir / "v1").mkdir(parents=True, exist_ok=True)
    (d.cache_dir / "v1" / "pgo").write_text("in the way")
    assert d.cli("put", "pgo", "k", input=b"value").returncode == OK
    drain_disk_queue(d)
    assert d.cli("get", "pgo", "k").returncode == MISS
    assert d.stats()["namespaces"]["pgo"]["disk"]["errors"] == 1
    assert "queued disk put pgo/" in d.log()


def test_help_and_version():
    r = run_cli("--help")
    assert r.returncode == OK
    text = out(r)
    for word in ("ping", "stats", "get", "put", "rm", "ls", "clear", "config", "Exit status"):
        assert word in text, word
    for sub in ("get", "put", "ls", "clear"):
        r = run_cli(sub, "--help")
        assert r.returncode == OK, sub
    r = run_cli("--version")
    assert r.returncode == OK
    assert re.match(r"pt2cache \S+ \(native protocol version 1\)", out(r)), out(r)


@pytest.mark.parametrize("args", [
    [],                                   # no subcommand
    ["frobnicate"],                       # unknown subcommand
    ["get", "pgo"],                       # missing KEY
    ["get"],                              # missing NS and KEY
    ["put", "pgo", "k", "a", "b"],        # too many arguments
    ["put", "pgo", "k", "--ttl", "-1"],   # negative TTL
    ["ls", "pgo", "--limit", "many"],     # not a number
    ["--timeout", "0", "ping"],           # out of range
    ["get", "pgo", "x" * 1025],           # key too long
    ["ping", "--bogus"],                  # unknown option
], ids=lambda a: " ".join(a)[:30] or "none")
def test_bad_usage_exits_2(daemon, args):
    r = daemon.cli(*args)
    assert r.returncode == USAGE, (args, out(r), err(r))
    assert err(r).startswith("pt2cache: ") or "Usage" in err(r) or "--help" in err(r), err(r)


def test_unreadable_input_and_unwritable_output_exit_2(daemon, tmp_root):
    r = daemon.cli("put", "pgo", "k", str(tmp_root / "does-not-exist"))
    assert r.returncode == USAGE
    assert "cannot open" in err(r) and "does-not-exist" in err(r)
    assert daemon.cli("put", "pgo", "k", input=b"v").returncode == OK
    r = daemon.cli("get", "pgo", "k", "-o", str(tmp_root / "no-dir" / "f"))
    assert r.returncode == USAGE
    assert "cannot open" in err(r)


def test_missing_key_exits_1(daemon):
    r = daemon.cli("get", "fx-graph", "never-stored")
    assert (r.returncode, r.stdout) == (MISS, b"")
    assert err(r) == 'pt2cache: no entry "never-stored" in fx-graph\n'


def test_daemon_not_running_exits_3(tmp_root):
    missing = tmp_root / "nobody.sock"
    for args in (["ping"], ["stats"], ["get", "pgo", "k"], ["put", "pgo", "k", "-"],
                 ["ls", "pgo"], ["rm", "pgo", "k"], ["clear", "pgo", "--yes"]):
        r = run_cli("--socket", str(missing), *args, input=b"v")
        assert r.returncode == UNREACHABLE, (args, err(r))
        assert str(missing) in err(r), err(r)
        assert "cannot connect to pt2cached" in err(r), err(r)
        assert len(err(r).splitlines()) == 1, err(r)

    # A socket file nobody listens on (a crashed daemon's): refused, still exit 3.
    stale = tmp_root / "stale.sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(stale))
    s.close()
    r = run_cli("--socket", str(stale), "ping")
    assert r.returncode == UNREACHABLE, err(r)
    assert str(stale) in err(r)


def test_timeout_exits_3(tmp_root):
    # Something listens but never answers: --timeout gives up with exit 3.
    path = tmp_root / "mute.sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.listen(4)
    try:
        start = time.monotonic()
        r = run_cli("--socket", str(path), "--timeout", "300", "ping", timeout=20)
        assert r.returncode == UNREACHABLE, err(r)
        assert time.monotonic() - start < 10
    finally:
        s.close()


@pytest.mark.parametrize("ns", ["Bad_NS", "UPPER", "has space", "a" * 33, "dot.ns", ""])
def test_invalid_namespace(daemon, ns):
    for args in (["get", ns, "k"], ["put", ns, "k", "-"], ["rm", ns, "k"], ["ls", ns],
                 ["clear", ns, "--yes"]):
        r = daemon.cli(*args, input=b"v")
        assert r.returncode in (USAGE, SERVER), (args, err(r))
        assert "[a-z0-9-]" in err(r), err(r)
        if ns:
            assert f'invalid namespace "{ns}"' in err(r), err(r)
    assert daemon.stats()["namespaces"] == {}


def _without_fd(fd: int):
    return lambda: os.close(fd)


def test_a_closed_stdout_never_reaches_the_daemon(daemon):
    """With stdout closed, the connection took descriptor 1 and `get` wrote
    the value into it: a value that is a PUT frame then ran as a request and
    overwrote another key (a false hit for every reader of that key)."""
    assert daemon.cli("put", "fx-graph", "victim", input=b"original").returncode == OK
    poison = frame(OP["put"], put_body("fx-graph", b"victim", b"POISONED"), rid=7)
    assert daemon.cli("put", "fx-graph", "carrier", input=poison).returncode == OK
    for closed in (1, 2):
        r = subprocess.run([PT2CACHE_CLI, "--socket", str(daemon.socket), "get", "fx-graph",
                            "carrier"], preexec_fn=_without_fd(closed),
                           stdout=None if closed == 1 else subprocess.PIPE,
                           stderr=subprocess.PIPE if closed == 1 else None, timeout=30)
        if closed == 1:
            assert r.returncode == USAGE, err(r)
            assert "cannot write standard output" in err(r)
        assert daemon.cli("get", "fx-graph", "victim").stdout == b"original"
    assert "bad frame magic" not in daemon.log()


def test_output_errors_and_bounded_input(daemon, make_daemon):
    """A write error of buffered output fails the command (it exited 0); an
    endless input is read up to max_value + 1, not until memory runs out;
    counts and intervals that CLI11 let through are refused."""
    with open("/dev/full", "wb") as full:
        for args in (("stats",), ("ping",), ("config",)):
            r = subprocess.run([PT2CACHE_CLI, "--socket", str(daemon.socket), *args],
                               stdout=full, stderr=subprocess.PIPE, timeout=30)
            assert r.returncode == USAGE, (args, err(r))
            assert "cannot write standard output: No space left on device" in err(r)
    max_value = 1 << 20
    small = make_daemon("--set", f"daemon.max_value_size={max_value}", sub="small")
    with open("/dev/zero", "rb") as zero:
        r = subprocess.run([PT2CACHE_CLI, "--socket", str(small.socket), "put", "pgo", "z"],
                           stdin=zero, capture_output=True, timeout=30)
    assert r.returncode == SERVER, err(r)
    assert f"larger than pt2cached's max_value {max_value}; nothing stored" in err(r)
    assert small.cli("get", "pgo", "z").returncode == MISS
    for args in (("ls", "--limit", "-1"), ("ls", "--limit", "18446744073709551616"),
                 ("top", "--interval", "nan"), ("top", "--iterations", "-1")):
        r = daemon.cli(*args)
        assert r.returncode == USAGE, (args, err(r))


def test_top_without_a_usable_terminal_prints_plain_lines(daemon):
    """On a terminal curses does not know (TERM unset or unknown), top exited
    with status 1 (initscr's own exit); on one that cannot place the cursor
    (TERM=dumb) it drew nothing; with stdin not a terminal, it spun a CPU.
    All print plain lines now."""
    import resource

    def children_cpu() -> float:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime

    top = f"{PT2CACHE_CLI} --socket {daemon.socket} top --iterations 3 --interval 0.3"
    for term, redirect in (("nosuchterm", ""), ("", ""), ("dumb", ""), ("xterm", " < /dev/null")):
        before = children_cpu()
        r = subprocess.run(["script", "-qec", f"{top}{redirect}; echo rc=$?", "/dev/null"],
                           capture_output=True, env={**os.environ, "TERM": term}, timeout=30)
        text = out(r)
        assert "rc=0" in text, (term, text)
        assert "ops/s=" in text, (term, text)
        assert children_cpu() - before < 0.3, term  # 0.6 s of waiting, not spinning


def test_a_non_blocking_stdout_gets_every_byte(daemon):
    """A pipe another process made O_NONBLOCK filled up and `get` stopped at
    EAGAIN with part of the value written; `export` likewise. Both wait for
    the reader now, as a blocking write would. `ls`, printed through
    stdio, lost lines there and failed at the end."""
    value = os.urandom(1 << 20)  # 16 times a pipe's buffer
    assert daemon.cli("put", "pgo", "big", input=value).returncode == OK
    client = NativeClient(daemon.socket)
    names = [b"k%05d-" % i + b"n" * 100 for i in range(1500)]  # 160 KB of `ls`
    for name in names:
        assert client.put("autotune", name, b"v") == 0
    expected_ls = b"".join(sorted(name + b"\n" for name in names))
    for args in (("get", "pgo", "big"), ("export", "--ns", "pgo"), ("ls", "autotune")):
        read_end, write_end = os.pipe()
        os.set_blocking(write_end, False)
        with subprocess.Popen([PT2CACHE_CLI, "--socket", str(daemon.socket), *args],
                              stdout=write_end, stderr=subprocess.PIPE) as child:
            os.close(write_end)
            time.sleep(0.5)  # the pipe fills while nobody reads
            chunks = []
            with os.fdopen(read_end, "rb") as reader:
                while chunk := reader.read(64 * 1024):
                    chunks.append(chunk)
            stderr = child.stderr.read().decode(errors="replace")
            assert child.wait(timeout=30) == OK, (args, stderr)
        got = b"".join(chunks)
        if args[0] == "export":  # the whole archive: it imports the value back
            assert daemon.cli("rm", "pgo", "big").returncode == OK
            r = daemon.cli("import", "-", input=got)
            assert r.returncode == OK, err(r)
            got = daemon.cli("get", "pgo", "big").stdout
        if args[0] == "ls":
            assert b"".join(sorted(got.splitlines(keepends=True))) == expected_ls, len(got)
        else:
            assert got == value, (args, len(got))
