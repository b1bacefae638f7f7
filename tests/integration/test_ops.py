"""Operability (issue 12): `pt2cache top` (under tmux, and its plain lines
through a pipe), `pt2cache ping --wait`, the disk write queue in STATS, and the
systemd watchdog pings (WATCHDOG=1 on a NOTIFY_SOCKET the test owns) stopping
while the I/O loop is stalled by the debug hook PT2CACHED_DEBUG_STALL_LOOP."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import threading
import time

import pytest

from integ_helpers import NativeClient
from pt2harness import PT2CACHE_CLI, Daemon, run_cli, wait_for

ASYNC = ("--set", "disk.write_mode=async")
PLAIN_LINE = re.compile(
    r"^\d\d:\d\d:\d\d ops/s=(?P<ops>[-0-9.]+) hit=(?P<hit>[-0-9.%]+) get_p50=\S+ get_p99=\S+ "
    r"saved=[0-9.]+s clients=(?P<clients>\d+) disk=\S+( disk_queue=(?P<queue>\d+) "
    r"disk_queue_age=[0-9.]+s)? remote=(?P<remote>\S+)")


def traffic(path, stop: threading.Event, ns="fx-graph"):
    """Puts and gets (half of them hits) until `stop` is set, at most 20 s."""
    conn = NativeClient(path)
    deadline = time.monotonic() + 20
    i = 0
    try:
        while not stop.is_set() and time.monotonic() < deadline:
            key = f"k{i % 50}".encode()
            conn.put(ns, key, b"v" * 100)
            conn.get(ns, key)
            conn.get(ns, b"absent-" + key)
            i += 1
            time.sleep(0.002)
    finally:
        conn.close()


# ---- ping --wait ----

def test_ping_wait_returns_once_a_late_daemon_answers(tmp_root):
    d = Daemon(tmp_root)
    starter = threading.Timer(1.0, lambda: d.start(wait=False))
    started = time.monotonic()
    starter.start()
    try:
        out = run_cli("--socket", str(d.socket), "ping", "--wait", "20s", timeout=30)
        took = time.monotonic() - started
    finally:
        starter.join()
        d.kill()
    assert out.returncode == 0, out.stderr
    assert re.fullmatch(rb"\d+ \xc2\xb5s\n", out.stdout)
    assert 0.9 <= took < 15


def test_ping_wait_gives_up_with_a_clear_message(tmp_root):
    started = time.monotonic()
    out = run_cli("--socket", str(tmp_root / "nobody"), "ping", "--wait", "700ms")
    took = time.monotonic() - started
    assert out.returncode == 3
    err = out.stderr.decode()
    assert err.startswith("pt2cache: pt2cached did not answer within 700ms (")
    assert "last error: cannot connect to pt2cached at" in err
    assert 0.6 <= took < 5


def test_ping_wait_rejects_a_bad_duration(daemon):
    for bad in ("5x", "", "-1s", "s", "40d"):
        out = daemon.cli("ping", "--wait", bad)
        assert out.returncode == 2, bad
        assert b"--wait: " in out.stderr, bad


def test_ping_without_wait_fails_at_once(tmp_root):
    out = run_cli("--socket", str(tmp_root / "nobody"), "ping")
    assert out.returncode == 3
    assert b"cannot connect to pt2cached" in out.stderr


# ---- the disk write queue in STATS ----

def test_stats_show_the_disk_write_queue_only_in_async_mode(make_daemon):
    sync = make_daemon("--set", "disk.write_mode=sync", sub="sync")
    assert "write_queue" not in sync.stats()["tiers"]["disk"]
    assert "write queue" not in sync.cli("stats", check=True).stdout.decode()
    d = make_daemon(*ASYNC, sub="async")
    queue = d.stats()["tiers"]["disk"]["write_queue"]
    assert queue["entries"] == 0 and queue["bytes"] == 0 and queue["oldest_age_s"] == 0
    assert queue["capacity"] > 0
    assert "write queue 0 entries, 0 B of 64.0 MiB, oldest 0.0 s" in \
        d.cli("stats", check=True).stdout.decode()


# ---- top, plain lines ----

def test_top_prints_plain_lines_through_a_pipe(make_daemon):
    d = make_daemon(*ASYNC)
    stop = threading.Event()
    worker = threading.Thread(target=traffic, args=(d.socket, stop))
    worker.start()
    try:
        out = d.cli("top", "--interval", "0.3", "--iterations", "5", timeout=30)
    finally:
        stop.set()
        worker.join()
    assert out.returncode == 0, out.stderr
    lines = out.stdout.decode().splitlines()
    assert len(lines) == 5, lines
    parsed = [PLAIN_LINE.match(line) for line in lines]
    assert all(parsed), lines
    busy = [m for m in parsed if m["ops"] != "-" and float(m["ops"]) > 0]
    assert busy, lines
    # A third of the lookups miss (the "absent-" keys), half hit.
    assert any(m["hit"].endswith("%") and 20 < float(m["hit"][:-1]) < 80 for m in busy), lines
    assert all(m["queue"] is not None for m in parsed)  # async: the queue is shown
    assert all(m["remote"] == "off" for m in parsed)
    assert all(int(m["clients"]) >= 1 for m in busy)  # the traffic connection


def test_top_fails_fast_without_a_daemon(tmp_root):
    out = run_cli("--socket", str(tmp_root / "nobody"), "top", "--iterations", "1")
    assert out.returncode == 3
    assert b"cannot connect to pt2cached" in out.stderr


def test_top_keeps_going_when_the_daemon_goes_away(daemon):
    proc = subprocess.Popen([PT2CACHE_CLI, "--socket", str(daemon.socket), "top", "--interval",
                             "0.2", "--iterations", "6"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    time.sleep(0.5)
    daemon.kill()
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    lines = out.decode().splitlines()
    assert len(lines) == 6
    assert PLAIN_LINE.match(lines[0])
    assert "unreachable: cannot connect to pt2cached" in lines[-1]


# ---- top under tmux ----

class Tmux:
    """A private tmux server (its own -L socket) with one fixed-size session."""

    def __init__(self, root):
        self.name = f"p2t-{os.getpid()}-{int(time.monotonic() * 1000)}"
        self.root = root

    def run(self, *args: str, check=True) -> str:
        out = subprocess.run(["tmux", "-L", self.name, "-f", "/dev/null", *args],
                             capture_output=True, timeout=20)
        if check and out.returncode != 0:
            raise AssertionError(f"tmux {args}: {out.stderr.decode()}")
        return out.stdout.decode()

    def start(self, *argv: str):
        """Runs argv in the pane; its exit status goes to a file (tmux 3.3a
        now and then leaves a dead pane's status unreaped). The shell ignores
        SIGINT, so Ctrl-C is top's to handle (it installs its own handler)."""
        self.status_file = self.root / f"status-{self.name}"
        script = f'trap "" INT; "$@"; echo $? > {self.status_file}'
        self.run("new-session", "-d", "-s", "top", "-x", "100", "-y", "30", "sh", "-c", script,
                 "sh", *argv)
        self.run("set-option", "-t", "top", "remain-on-exit", "on")

    def screen(self) -> str:
        return self.run("capture-pane", "-p", "-t", "top")

    def pane(self, fmt: str) -> str:
        return self.run("display-message", "-p", "-t", "top", fmt).strip()

    def wait_screen(self, pattern: str, timeout=15.0) -> str:
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            text = self.screen()
            if re.search(pattern, text, re.M):
                return text
            time.sleep(0.1)
        raise AssertionError(f"no /{pattern}/ on the screen after {timeout} s:\n{text}")

    def wait_exit(self, timeout=10.0) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.status_file.exists():
                text = self.status_file.read_text().strip()
                if text:
                    return int(text)
            time.sleep(0.05)
        raise AssertionError(f"top did not exit within {timeout} s:\n{self.screen()}")

    def wait_restored(self):
        """The terminal left curses mode (endwin: the alternate screen is off)."""
        wait_for(lambda: self.pane("#{alternate_on}") == "0", timeout=5, interval=0.05,
                 what="top to restore the terminal")

    def kill(self):
        self.run("kill-server", check=False)


@pytest.fixture
def tmux(tmp_root):
    if shutil.which("tmux") is None:
        pytest.fail("tmux is not installed (tools/install-deps installs it)")
    t = Tmux(tmp_root)
    yield t
    t.kill()


def top_command(d) -> list[str]:
    return ["env", "TERM=screen", PT2CACHE_CLI, "--socket", str(d.socket), "top", "--interval",
            "0.2"]


def test_top_draws_the_live_view_and_quits_on_q(make_daemon, redis_server, tmux):
    d = make_daemon(*ASYNC, env={"TORCHINDUCTOR_REDIS_URL": f"unix://{redis_server.socket}",
                                 "TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE": "1"})
    tmux.start(*top_command(d))
    text = tmux.wait_screen(r"^NAMESPACE +GET/S +PUT/S +HIT +GET P50 +GET P99")
    assert re.search(r"^pt2cached \S+  pid \d+  up \S+  every 0\.2 s", text, re.M), text
    assert re.search(r"^disk +\S+ \S+ of \S+ \S+ \(\S+\), \d+ entries", text, re.M), text
    assert re.search(r"^  write queue \d+ entries, .* oldest [0-9.]+ s", text, re.M), text
    assert re.search(r"^remote +(connected|connecting)  unix:", text, re.M), text
    assert "errors " in text and "write-behind queue" in text
    assert tmux.pane("#{alternate_on}") == "1"  # curses took the screen

    stop = threading.Event()
    worker = threading.Thread(target=traffic, args=(d.socket, stop))
    worker.start()
    try:
        text = tmux.wait_screen(r"^fx-graph +[0-9]+\.[0-9] +[0-9]+\.[0-9] +[0-9.]+%")
        assert re.search(r"^ops/s [0-9]+\.[0-9]   hit [0-9.]+%", text, re.M), text
        assert re.search(r"^clients [1-9]", text, re.M), text
    finally:
        stop.set()
        worker.join()

    tmux.run("send-keys", "-t", "top", "q")
    assert tmux.wait_exit() == 0
    tmux.wait_restored()


def test_top_exits_cleanly_on_ctrl_c(daemon, tmux):
    tmux.start(*top_command(daemon))
    tmux.wait_screen(r"^NAMESPACE")
    tmux.run("send-keys", "-t", "top", "C-c")
    assert tmux.wait_exit() == 0
    tmux.wait_restored()


def test_top_shows_an_unreachable_daemon_and_recovers(make_daemon, tmux):
    d = make_daemon()
    tmux.start(*top_command(d))
    tmux.wait_screen(r"^NAMESPACE")
    d.stop()
    tmux.wait_screen(r"^pt2cached unreachable: cannot connect to pt2cached")
    d.start()
    wait_for(lambda: "unreachable" not in tmux.screen(), timeout=15, interval=0.1,
             what="top to reach the restarted daemon")
    assert re.search(r"^NAMESPACE", tmux.screen(), re.M)
    tmux.run("send-keys", "-t", "top", "q")
    assert tmux.wait_exit() == 0


# ---- the systemd watchdog ----

class NotifySocket:
    """A datagram socket standing in for systemd's NOTIFY_SOCKET."""

    def __init__(self, path):
        self.path = str(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.messages: list[tuple[float, str]] = []

    def collect(self, seconds: float):
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(4096)
            except socket.timeout:
                return
            self.messages.append((time.monotonic(), data.decode(errors="replace")))

    def pings(self) -> list[float]:
        return [t for t, text in self.messages if "WATCHDOG=1" in text.split("\n")]

    def close(self):
        self.sock.close()


def test_watchdog_pings_from_the_io_loop_and_stop_while_it_is_stalled(make_daemon, tmp_root):
    notify = NotifySocket(tmp_root / "notify")
    try:
        d = make_daemon("--set", "daemon.io_threads=2", env={
            "NOTIFY_SOCKET": notify.path, "WATCHDOG_USEC": "400000",
            "PT2CACHED_DEBUG_STALL_LOOP": "2,2.5"})
        notify.collect(7.0)
    finally:
        notify.close()
    log = d.log()
    assert "systemd watchdog: 400 ms, pinging every 200 ms" in log, log
    assert any(text.startswith("READY=1") for _, text in notify.messages)
    pings = notify.pings()
    if "is ignored: this pt2cached is a release build" in log:
        assert len(pings) >= 20
        pytest.skip("the loop-stall hook is compiled out of release builds")
    assert "stalling 2 I/O loops for 2500 ms" in log, log
    gaps = [(b - a, a) for a, b in zip(pings, pings[1:])]
    stall_gap, stall_start = max(gaps)
    # The stall silenced the pings for its length...
    assert 2.2 <= stall_gap <= 5.0, gaps
    # ...and only then: before and after it they came every ~200 ms.
    before = [g for g, at in gaps if at < stall_start]
    after = [g for g, at in gaps if at > stall_start]
    assert len(before) >= 5 and len(after) >= 5, gaps
    assert max(before) < 1.5 and max(after) < 1.5, gaps
    assert 0.1 < sorted(before)[len(before) // 2] < 0.4, gaps


def test_watchdog_stops_pinging_when_any_one_io_loop_is_stalled(make_daemon, tmp_root):
    """Each I/O thread runs its own loop: the pings come from the first, and
    only while every other loop answers its heartbeats."""
    notify = NotifySocket(tmp_root / "notify")
    try:
        d = make_daemon("--set", "daemon.io_threads=2", env={
            "NOTIFY_SOCKET": notify.path, "WATCHDOG_USEC": "400000",
            "PT2CACHED_DEBUG_STALL_LOOP": "1.5,2.5,1"})
        notify.collect(5.5)
    finally:
        notify.close()
    log = d.log()
    if "is ignored: this pt2cached is a release build" in log:
        pytest.skip("the loop-stall hook is compiled out of release builds")
    assert "stalling I/O loop 1 for 2500 ms" in log, log
    pings = notify.pings()
    gaps = [(b - a, a) for a, b in zip(pings, pings[1:])]
    stall_gap, _ = max(gaps)
    # The first loop went on pinging... until the second one missed a round.
    assert 2.0 <= stall_gap <= 5.0, gaps
    assert len(pings) >= 10


def test_no_watchdog_pings_unless_systemd_asks(make_daemon, tmp_root):
    notify = NotifySocket(tmp_root / "notify")
    try:
        d = make_daemon(env={"NOTIFY_SOCKET": notify.path})
        notify.collect(1.5)
    finally:
        notify.close()
    assert any(text.startswith("READY=1") for _, text in notify.messages)
    assert notify.pings() == []
    assert "systemd watchdog" not in d.log()
