"""pt2cached's configuration at run time: --print-config, config files and flags,
PyTorch's cache switches, and signals (SIGHUP reload, idle exit)."""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import time
from pathlib import Path

import pytest
from integ_helpers import (NativeClient, clean_env, drain_disk_queue, entry_files, run_daemon_once,
                           stopwatch, wait_for_log)
from pt2harness import (PT2CACHE_CLI, PT2CACHED, STATUS, Daemon, RawConnection, hello_frame, wait_for)

OK, MISS, USAGE, UNREACHABLE, SERVER = 0, 1, 2, 3, 4


def err(result) -> str:
    return result.stderr.decode(errors="replace")


def out(result) -> str:
    return result.stdout.decode(errors="replace")



# ----------------------------------------------------------- configuration


def print_config(tmp_root, *args, **env):
    base = clean_env(HOME=str(tmp_root / "home"), XDG_CONFIG_HOME=str(tmp_root / "cfghome"))
    base.update(env)
    return run_daemon_once("--print-config", *args, env=base)


def config_line(text: str, key: str) -> str:
    for line in text.splitlines():
        if line.startswith(key + " = "):
            return line
    raise AssertionError(f"no {key} line in:\n{text}")


def test_print_config_values_and_sources(tmp_root):
    cfg = tmp_root / "pt2.toml"
    cfg.write_text('[memory]\nmax_size = "64MiB"\n[disk]\ncompress_level = 5\n')
    r = print_config(tmp_root, "--config", str(cfg), "--set", "disk.max_size=2GiB",
                     "--socket", str(tmp_root / "x.sock"),
                     TORCHINDUCTOR_CACHE_DIR=str(tmp_root / "inductor"),
                     PT2CACHE_LOG_LEVEL="debug")
    assert r.returncode == 0, err(r)
    text = out(r)
    assert f"# config file: {cfg}" in text
    assert config_line(text, "disk.cache_dir") == (
        f'disk.cache_dir = "{tmp_root}/inductor/pt2cache"  # default (from TORCHINDUCTOR_CACHE_DIR)')
    assert config_line(text, "daemon.log_level") == \
        'daemon.log_level = "debug"  # env PT2CACHE_LOG_LEVEL'
    assert config_line(text, "memory.max_size") == f"memory.max_size = 67108864  # file {cfg}"
    assert config_line(text, "disk.compress_level") == f"disk.compress_level = 5  # file {cfg}"
    assert config_line(text, "disk.max_size") == "disk.max_size = 2147483648  # flag"
    assert config_line(text, "daemon.socket") == f'daemon.socket = "{tmp_root}/x.sock"  # flag'
    assert config_line(text, "daemon.idle_exit_s") == "daemon.idle_exit_s = 0  # default"
    assert config_line(text, "caches.fx_graph_cache") == "caches.fx_graph_cache = true  # default"
    assert "# warning" not in text
    # A trailing slash does not double up.
    r = print_config(tmp_root, TORCHINDUCTOR_CACHE_DIR=f"{tmp_root}/inductor/")
    assert config_line(out(r), "disk.cache_dir").startswith(
        f'disk.cache_dir = "{tmp_root}/inductor/pt2cache"')
    # --print-config only prints: nothing is created.
    assert not (tmp_root / "x.sock").exists()
    assert not (tmp_root / "inductor").exists()


def test_print_config_env_switches(tmp_root):
    r = print_config(tmp_root, TORCHINDUCTOR_FX_GRAPH_CACHE="0", TORCHINDUCTOR_AUTOGRAD_CACHE="1")
    assert r.returncode == 0, err(r)
    text = out(r)
    assert config_line(text, "caches.fx_graph_cache") == \
        "caches.fx_graph_cache = false  # env TORCHINDUCTOR_FX_GRAPH_CACHE"
    assert config_line(text, "caches.autograd_cache") == \
        "caches.autograd_cache = false  # env TORCHINDUCTOR_FX_GRAPH_CACHE"
    assert ("# warning: autograd_cache is off because fx_graph_cache is off "
            "(TORCHINDUCTOR_FX_GRAPH_CACHE=0): AOTAutograd entries need FX graph entries") in text


def test_print_config_is_valid_toml(tmp_root):
    import tomllib
    r = print_config(tmp_root)
    assert r.returncode == 0
    parsed = tomllib.loads(out(r))
    assert parsed["disk"]["max_size"] == 10 << 30
    assert parsed["memory"]["max_size"] == 256 << 20
    assert parsed["daemon"]["max_value_size"] == 512 << 20
    assert parsed["disk"]["cache_dir"] == f"{tmp_root}/home/.cache/pt2cache"


@pytest.mark.parametrize("content,key", [
    ("[disk]\nmax_sizee = 5\n", "disk.max_sizee"),
    ("[disk]\nmax_size = \"lots\"\n", "disk.max_size"),
    ("[daemon]\nio_threads = 0\n", "daemon.io_threads"),
    ("[nosuch]\nx = 1\n", "nosuch"),
], ids=["unknown-key", "bad-size", "out-of-range", "unknown-section"])
def test_bad_config_file_exits_2(tmp_root, content, key):
    cfg = tmp_root / "bad.toml"
    cfg.write_text(content)
    base = clean_env(HOME=str(tmp_root / "home"))
    for extra in ([], ["--print-config"]):
        r = run_daemon_once("--config", str(cfg), "--socket", str(tmp_root / "s"), *extra,
                            env=base)
        assert r.returncode == 2, err(r)
        lines = err(r).splitlines()
        assert len(lines) == 1, err(r)
        assert lines[0].startswith(f"pt2cached: {cfg}: {key}"), lines[0]
        assert not (tmp_root / "s").exists()


def test_bad_set_flag_exits_2(tmp_root):
    base = clean_env(HOME=str(tmp_root / "home"))
    for bad in (["--set", "disk.max_size"], ["--set", "disk.nope=1"],
                ["--set", "memory.max_size=-3"], ["--log-level", "chatty"], ["--bogus"],
                ["--set", "daemon.max_value_size=0"], ["--set", "daemon.io_threads=65"],
                ["--set", "disk.max_size=12parsecs"]):
        r = run_daemon_once("--socket", str(tmp_root / "s"), *bad, env=base)
        assert r.returncode == 2, (bad, err(r))
        assert err(r).strip(), bad
    assert not (tmp_root / "s").exists()


def test_missing_config_file_exits_2(tmp_root):
    r = run_daemon_once("--config", str(tmp_root / "absent.toml"), "--print-config",
                        env=clean_env(HOME=str(tmp_root)))
    assert r.returncode == 2
    assert str(tmp_root / "absent.toml") in err(r)


def run_in(cwd: Path, *args: str, timeout=10) -> subprocess.Popen:
    return subprocess.Popen([os.path.abspath(PT2CACHED), *args], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env=clean_env(HOME=str(cwd), XDG_CONFIG_HOME=str(cwd / "cfg")))


def test_relative_socket_with_dot_slash(tmp_root):
    proc = run_in(tmp_root, "--socket", "./rel.sock", "--cache-dir", "cache")
    try:
        wait_for(lambda: (tmp_root / "rel.sock").exists() or proc.poll() is not None)
        assert proc.poll() is None, proc.stdout.read().decode()
        r = subprocess.run([PT2CACHE_CLI, "--socket", str(tmp_root / "rel.sock"), "ping"],
                           capture_output=True, timeout=30)
        assert r.returncode == OK, err(r)
    finally:
        proc.terminate()
        proc.wait(10)


def test_relative_socket_in_current_directory(tmp_root):
    proc = run_in(tmp_root, "--socket", "rel.sock", "--cache-dir", "cache")
    try:
        wait_for(lambda: (tmp_root / "rel.sock").exists() or proc.poll() is not None)
        assert proc.poll() is None, proc.stdout.read().decode()
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(10)


def test_socket_path_too_long_exits_2(tmp_root):
    long_path = "/tmp/" + "d" * 110 + "/s"
    r = run_daemon_once("--socket", long_path, env=clean_env(HOME=str(tmp_root)))
    assert r.returncode == 2, err(r)
    assert "at most 107 bytes" in err(r) and "daemon.socket" in err(r), err(r)


def test_cache_dir_that_is_a_file_fails(make_daemon, tmp_root):
    blocker = tmp_root / "blocker"
    blocker.write_text("not a directory")
    d = make_daemon(start=False, cache_dir=blocker)
    d.start(wait=False)
    assert d.proc.wait(15) == 1
    assert f"cannot create cache directory {blocker}" in d.log(), d.log()
    assert not d.socket.exists()


# ------------------------------------------------------- PyTorch switches


def test_force_disable_caches(make_daemon):
    d = make_daemon(env={"TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1"})
    for ns in ("fx-graph", "pgo"):
        r = d.cli("put", ns, "k", input=b"value")
        assert r.returncode == OK, err(r)
        r = d.cli("get", ns, "k")
        assert r.returncode == MISS, err(r)
        assert d.cli("put", ns, "k", "--nx", input=b"value").returncode == OK
    conn = NativeClient(d.socket)
    assert conn.exists("pgo", b"k") == STATUS["miss"]
    stats = conn.stats()
    conn.close()
    assert entry_files(d.cache_dir) == []
    assert d.cli("ls", "pgo").stdout == b""
    assert d.cli("ls", "fx-graph").stdout == b""
    assert stats["force_disable_caches"] is True
    for ns in ("fx-graph", "pgo"):
        for tier in ("memory", "disk"):
            counters = stats["namespaces"][ns][tier]
            assert (counters["puts"], counters["misses"], counters["hits"]) == (2, 1, 0), (ns, tier)
    assert stats["tiers"]["disk"]["count"] == 0
    assert stats["tiers"]["memory"]["count"] == 0


def test_force_disable_alias(make_daemon):
    d = make_daemon(env={"TORCH_COMPILE_FORCE_DISABLE_CACHES": "1"})
    assert d.cli("put", "pgo", "k", input=b"v").returncode == OK
    assert d.cli("get", "pgo", "k").returncode == MISS


def test_fx_graph_cache_off_keeps_other_namespaces(make_daemon):
    d = make_daemon(env={"TORCHINDUCTOR_FX_GRAPH_CACHE": "0"})
    assert d.cli("put", "fx-graph", "g", input=b"graph").returncode == OK
    assert d.cli("get", "fx-graph", "g").returncode == MISS
    for ns in ("pgo", "autotune"):
        assert d.cli("put", ns, "k", input=b"kept").returncode == OK
        assert d.cli("get", ns, "k").stdout == b"kept"
    drain_disk_queue(d)
    # `ls` lists the disk tier: entry files and small.mdb.
    assert d.cli("ls", "fx-graph").stdout == b""
    assert len(d.cli("ls", "pgo").stdout.splitlines()) == 1
    # With FX off, AOTAutograd is off too (it needs FX entries), with a warning.
    assert d.cli("put", "aot-autograd", "a", input=b"aot").returncode == OK
    assert d.cli("get", "aot-autograd", "a").returncode == MISS
    assert "autograd_cache is off because fx_graph_cache is off" in d.log()


def test_autograd_on_with_fx_off_warns_and_is_off(make_daemon, tmp_root):
    env = {"TORCHINDUCTOR_FX_GRAPH_CACHE": "0", "TORCHINDUCTOR_AUTOGRAD_CACHE": "1"}
    d = make_daemon(env=env)
    wait_for_log(d, r"warn.*autograd_cache is off because fx_graph_cache is off "
                    r"\(TORCHINDUCTOR_FX_GRAPH_CACHE=0\)")
    assert d.cli("put", "aot-autograd", "a", input=b"aot").returncode == OK
    assert d.cli("get", "aot-autograd", "a").returncode == MISS
    assert d.cli("ls", "aot-autograd").stdout == b""
    assert d.cli("put", "autotune", "t", input=b"x").returncode == OK
    assert d.cli("get", "autotune", "t").stdout == b"x"


# ---------------------------------------------------------------- signals


def test_idle_exit(make_daemon):
    d = make_daemon("--set", "daemon.idle_exit_s=1")
    # An open connection keeps it alive past the idle time.
    conn = NativeClient(d.socket)
    time.sleep(2.5)
    assert d.proc.poll() is None, "exited while a client was connected"
    conn.ping()
    conn.close()
    elapsed = stopwatch()
    assert d.proc.wait(8) == 0
    assert elapsed() < 6
    assert "idle for 1 s: stopping" in d.log()
    assert not d.socket.exists()


def test_sighup_disk_max_size_applied_or_warned(make_daemon, tmp_root):
    cfg = tmp_root / "pt2.toml"
    cfg.write_text('[disk]\nmax_size = "10MiB"\n')
    d = make_daemon("--config", str(cfg), "--set", "memory.max_size=0")
    conn = NativeClient(d.socket)
    for i in range(24):  # 1.5 MiB
        assert conn.put("pgo", b"k%d" % i, os.urandom(64 << 10)) == STATUS["ok"]
    cfg.write_text('[disk]\nmax_size = "1MiB"\n')
    since = len(d.log())
    d.proc.send_signal(signal.SIGHUP)
    wait_for_log(d, r"configuration reloaded", since=since)
    conn.put("pgo", b"trigger", b"x")
    time.sleep(0.5)
    capacity = conn.stats()["tiers"]["disk"]["capacity"]
    warned = "disk.max_size" in d.log()[since:]
    conn.close()
    assert capacity == 1 << 20 or warned, \
        f"disk.max_size is still {capacity} after SIGHUP and nothing says it needs a restart"


def test_sighup_applies_cache_switches(make_daemon, tmp_root):
    cfg = tmp_root / "pt2.toml"
    cfg.write_text("[caches]\nfx_graph_cache = true\n")
    d = make_daemon("--config", str(cfg))
    assert d.cli("put", "fx-graph", "before", input=b"v").returncode == OK
    assert d.cli("get", "fx-graph", "before").returncode == OK
    cfg.write_text("[caches]\nfx_graph_cache = false\nforce_disable_caches = false\n")
    since = len(d.log())
    d.proc.send_signal(signal.SIGHUP)
    wait_for_log(d, r"configuration reloaded", since=since)
    wait_for_log(d, r"autograd_cache is off because fx_graph_cache is off", since=since)
    assert d.cli("get", "fx-graph", "before").returncode == MISS
    assert d.cli("put", "fx-graph", "after", input=b"v").returncode == OK
    assert d.cli("get", "fx-graph", "after").returncode == MISS
    assert d.cli("put", "pgo", "k", input=b"v").returncode == OK
    assert d.cli("get", "pgo", "k").returncode == OK

    cfg.write_text("[caches]\nforce_disable_caches = true\n")
    since = len(d.log())
    d.proc.send_signal(signal.SIGHUP)
    wait_for_log(d, r"configuration reloaded", since=since)
    assert d.cli("get", "pgo", "k").returncode == MISS


def test_stats_reports_reloaded_force_disable(make_daemon, tmp_root):
    cfg = tmp_root / "pt2.toml"
    cfg.write_text("[caches]\nforce_disable_caches = false\n")
    d = make_daemon("--config", str(cfg))
    assert d.stats()["force_disable_caches"] is False
    cfg.write_text("[caches]\nforce_disable_caches = true\n")
    since = len(d.log())
    d.proc.send_signal(signal.SIGHUP)
    wait_for_log(d, r"configuration reloaded", since=since)
    assert d.cli("put", "pgo", "k", input=b"v").returncode == OK
    assert d.cli("get", "pgo", "k").returncode == MISS  # the policy did change
    assert d.stats()["force_disable_caches"] is True


class QuietDaemon(Daemon):
    """A Daemon without the harness's --log-level flag, so the file decides."""

    def command(self):
        cmd = super().command()
        i = cmd.index("--log-level")
        return cmd[:i] + cmd[i + 2:]


def test_sighup_reloads_max_value_size(make_daemon, tmp_root):
    cfg = tmp_root / "pt2.toml"
    cfg.write_text('[daemon]\nmax_value_size = "1MiB"\n')
    d = make_daemon("--config", str(cfg))
    big = os.urandom(2 << 20)
    r = d.cli("put", "pgo", "big", input=big)
    assert r.returncode == SERVER, err(r)
    assert "max_value 1048576" in err(r), err(r)
    assert d.cli("get", "pgo", "big").returncode == MISS

    cfg.write_text('[daemon]\nmax_value_size = "4MiB"\n')
    d.proc.send_signal(signal.SIGHUP)
    wait_for_log(d, rf"configuration reloaded from {cfg}")
    assert d.proc.poll() is None
    r = d.cli("put", "pgo", "big", input=big)
    assert r.returncode == OK, err(r)
    assert d.cli("get", "pgo", "big").stdout == big
    conn = RawConnection(d.socket)
    conn.send(hello_frame())
    op, status, _, body = conn.reply()
    assert status == STATUS["ok"]
    (_version, _caps, max_value) = struct.unpack_from("<HIQ", body)
    assert max_value == 4 << 20
    conn.close()

    # A broken file at SIGHUP keeps the old settings and the daemon.
    cfg.write_text("[daemon]\nmax_value_size = \"huge\"\n")
    d.proc.send_signal(signal.SIGHUP)
    wait_for_log(d, r"SIGHUP: configuration not reloaded: .*max_value_size")
    assert d.proc.poll() is None
    assert d.cli("put", "pgo", "big2", input=big).returncode == OK
    assert d.stop() == 0


def test_a_hostile_file_at_sighup_keeps_the_daemon_serving(make_daemon, tmp_root):
    """A FIFO in place of the file held the loop that serves clients until
    someone wrote to it; a header of 60,000 dotted parts crashed the daemon
    (toml++'s recursion). Both are refused, the old settings stay, and
    clients are answered meanwhile."""
    cfg = tmp_root / "pt2.toml"
    cfg.write_text('[daemon]\nmax_value_size = "1MiB"\n')
    d = make_daemon("--config", str(cfg))
    cases = {
        "fifo": lambda: os.mkfifo(cfg),
        "deep": lambda: cfg.write_text("[a" + ".a" * 60_000 + "]\n"),
    }
    for name, make in cases.items():
        cfg.unlink()
        make()
        d.proc.send_signal(signal.SIGHUP)
        started = time.monotonic()
        assert d.cli("put", "pgo", name, input=b"v").returncode == OK, name
        assert time.monotonic() - started < 5, name
        wait_for_log(d, r"SIGHUP: configuration not reloaded: .*"
                     + ("not a regular file" if name == "fifo" else "dotted parts"))
        assert d.proc.poll() is None, name
        assert d.cli("get", "pgo", name).stdout == b"v"
    big = os.urandom(2 << 20)
    assert d.cli("put", "pgo", "big", input=big).returncode == SERVER  # still 1 MiB
    assert d.stop() == 0


def test_sighup_reloads_log_level(tmp_root):
    cfg = tmp_root / "pt2.toml"
    cfg.write_text('[daemon]\nlog_level = "info"\n')
    d = QuietDaemon(tmp_root, "--config", str(cfg)).start()
    try:
        conn = NativeClient(d.socket)
        conn.close()
        time.sleep(0.2)
        assert "HELLO from pytest" not in d.log()
        cfg.write_text('[daemon]\nlog_level = "debug"\n')
        d.proc.send_signal(signal.SIGHUP)
        wait_for_log(d, r"configuration reloaded")
        NativeClient(d.socket).close()
        wait_for_log(d, r"HELLO from pytest", timeout=5)
    finally:
        d.kill()


def test_remote_pointing_at_own_socket_is_disabled(tmp_root):
    # The README's PyTorch example exports TORCHINDUCTOR_REDIS_URL=unix://<the
    # daemon's socket>; a daemon started from that shell must not ask itself.
    sock = tmp_root / "s"
    d = Daemon(tmp_root, env={"TORCHINDUCTOR_REDIS_URL": f"unix://{sock}?protocol=2",
                              "TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE": "1"}).start()
    try:
        wait_for_log(d, r"remote tier off: its Redis socket .* is this daemon's own socket")
        elapsed = stopwatch()
        assert d.cli("get", "fx-graph", "missing").returncode == MISS
        assert elapsed() < 0.5
        assert d.cli("put", "fx-graph", "k", input=b"v").returncode == OK
        assert d.cli("get", "fx-graph", "k").stdout == b"v"
    finally:
        d.kill()
