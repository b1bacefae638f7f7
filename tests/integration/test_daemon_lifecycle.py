"""pt2cached's lifecycle: restarts, locking, socket safety, socket activation and
peer credentials. Configuration and signals: test_daemon_config.py."""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import signal
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest
from integ_helpers import (NativeClient, clean_env, drain_disk_queue, entry_files, stopwatch)
from pt2harness import (OP, PT2CACHE_CLI, PT2CACHED, RawConnection, frame, hello_frame, wait_for)

OK, MISS, USAGE, UNREACHABLE, SERVER = 0, 1, 2, 3, 4


def err(result) -> str:
    return result.stderr.decode(errors="replace")


def out(result) -> str:
    return result.stdout.decode(errors="replace")


# ---------------------------------------------------------------- restarts


def test_entries_survive_sigterm_restart(make_daemon):
    d = make_daemon()
    values = {f"key-{i}": os.urandom(100 + 5000 * i) for i in range(5)}
    for key, value in values.items():
        assert d.cli("put", "fx-graph", key, "-", input=value).returncode == OK
    assert d.cli("put", "pgo", "short-lived", "--ttl", "3600", input=b"ttl").returncode == OK

    assert d.stop(signal.SIGTERM) == 0
    log = d.log()
    assert "SIGTERM: stopping" in log
    assert "stopped" in log
    assert not d.socket.exists(), "the socket file is removed at a clean stop"

    d.start()
    for key, value in values.items():
        r = d.cli("get", "fx-graph", key)
        assert (r.returncode, r.stdout) == (OK, value), key
    assert d.cli("get", "pgo", "short-lived").stdout == b"ttl"
    stats = d.stats()
    assert stats["tiers"]["disk"]["scan_complete"] is True
    assert stats["tiers"]["disk"]["count"] == 6

    assert d.stop(signal.SIGINT) == 0
    assert "SIGINT: stopping" in d.log()


def test_sigterm_with_idle_clients_exits_promptly(make_daemon):
    d = make_daemon()
    conns = [NativeClient(d.socket) for _ in range(5)]
    partial = NativeClient(d.socket)
    partial.send(frame(OP["get"], b"\x03pgo\x01\x00k", rid=9)[:5])  # half a header
    elapsed = stopwatch()
    d.proc.send_signal(signal.SIGTERM)
    assert d.proc.wait(8) == 0
    assert elapsed() < 3, f"idle connections held the stop for {elapsed():.1f} s"
    for c in conns + [partial]:
        assert c.closed_by_peer(timeout=2)
        c.close()


def test_version_flag():
    r = subprocess.run([PT2CACHED, "--version"], capture_output=True, timeout=10)
    assert r.returncode == 0
    assert out(r).startswith("pt2cached ")
    r = subprocess.run([PT2CACHED, "--help"], capture_output=True, timeout=10)
    assert r.returncode == 0
    for flag in ("--socket", "--cache-dir", "--log-level", "--set", "--print-config", "--config"):
        assert flag in out(r), flag


def test_second_daemon_on_same_socket_fails(make_daemon, tmp_root):
    first = make_daemon(sub="one")
    second = make_daemon(start=False, sub="two")
    second.socket = first.socket
    second.start(wait=False)
    rc = second.proc.wait(15)
    assert rc != 0
    log = second.log()
    assert f"pt2cached is already running on {first.socket} (pid {first.proc.pid})" in log, log
    # The first daemon is unaffected and its socket file is still there.
    assert first.proc.poll() is None
    assert first.socket.exists()
    assert first.cli("ping").returncode == OK


def test_second_daemon_touches_nothing_of_the_first(make_daemon):
    """A second daemon, refused for the socket or for the cache directory,
    opened the cache before it checked its lock: its startup compaction
    replaced the first daemon's small.mdb, whose later writes all went into
    the unlinked file (lost at the first restart). Both locks come first
    now, and a cache directory serves one daemon, whatever its socket."""
    first = make_daemon("--set", "memory.max_size=0", "--set", "disk.write_mode=sync", sub="one")
    conn = NativeClient(first.socket)
    # Free pages over a quarter of the file: what a start compacts.
    for i in range(400):
        assert conn.put("autotune", b"k%03d" % i, os.urandom(2000)) == 0
    assert first.cli("clear", "autotune", "--yes").returncode == OK
    small = first.cache_dir / "small.mdb"
    inode = small.stat().st_ino
    for same in ("socket", "cache"):
        second = make_daemon(start=False, sub=f"two-{same}",
                             cache_dir=first.cache_dir if same == "cache" else None)
        if same == "socket":
            second.socket = first.socket
            second.cache_dir = first.cache_dir
        second.start(wait=False)
        assert second.proc.wait(15) != 0
        log = second.log()
        holder = f"(pid {first.proc.pid})"
        if same == "socket":
            assert f"already running on {first.socket} {holder}" in log, log
        else:
            assert f"cache directory {first.cache_dir} is in use by another pt2cached {holder}" \
                in log, log
        assert "compacted" not in log and "disk cache scan" not in log, log
        assert small.stat().st_ino == inode
    assert conn.put("autotune", b"after", b"kept") == 0
    assert first.stop() == 0
    first.start()
    conn = NativeClient(first.socket)
    assert conn.get("autotune", b"after") == (0, b"kept")


def test_the_locks_are_held_until_the_queue_is_written(make_daemon):
    """The socket and its lock went away before the write queue was
    written: a daemon started meanwhile served the cache beside the late
    writes (an older value could land after a newer one). Now a start is
    refused until the first daemon has written its queue and exited."""
    first = make_daemon("--set", "memory.max_size=0", "--set", "disk.write_queue_size=256MiB")
    # 120 MB of 40 KB files, acknowledged from memory: a queue to write.
    subprocess.run(["redis-benchmark", "-s", str(first.socket), "-t", "set", "-n", "3000", "-d",
                    "40000", "-r", "100000000", "-P", "32", "-c", "4", "-q"], check=True,
                   capture_output=True, timeout=120)
    queued = NativeClient(first.socket).stats()["tiers"]["disk"]
    first.proc.send_signal(signal.SIGTERM)
    refused = 0
    for _ in range(400):
        if first.proc.poll() is not None:
            break
        second = subprocess.Popen([PT2CACHED, "--socket", str(first.socket), "--cache-dir",
                                   str(first.cache_dir)], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE)
        try:
            rc = second.wait(1)
        except subprocess.TimeoutExpired:
            rc = None
        alive = first.proc.poll() is None
        if rc is None:
            second.kill()
            second.wait()
        assert rc is not None or not alive, f"a second daemon ran beside the first ({queued})"
        refused += rc is not None and rc != 0
    assert first.proc.wait(90) == 0
    assert refused >= 1, queued
    log = first.log()
    assert log.rindex("stopped") > log.rindex("disk"), log[-2000:]


def test_stale_socket_after_kill_9_is_taken_over(make_daemon):
    d = make_daemon()
    assert d.cli("put", "pgo", "k", input=b"before the crash").returncode == OK
    drain_disk_queue(d)  # written: kill -9 loses only what is still queued
    d.proc.send_signal(signal.SIGKILL)
    d.proc.wait(10)
    assert stat.S_ISSOCK(d.socket.lstat().st_mode), "kill -9 leaves the socket file behind"
    assert d.cli("ping").returncode == UNREACHABLE

    d.start()
    assert d.cli("ping").returncode == OK
    assert d.cli("get", "pgo", "k").stdout == b"before the crash"


def test_refuses_to_replace_a_regular_file(make_daemon):
    d = make_daemon(start=False)
    d.socket.write_text("precious")
    d.start(wait=False)
    assert d.proc.wait(15) != 0
    assert f"refusing to replace {d.socket}: it is not a socket" in d.log()
    assert d.socket.read_text() == "precious"


# ---------------------------------------------------------- socket directory


def start_must_fail(make_daemon, sock_dir: Path, sub: str) -> str:
    d = make_daemon(start=False, sub=sub)
    d.socket = sock_dir / "pt2cached.sock"
    d.start(wait=False)
    rc = d.proc.wait(15)
    assert rc != 0
    assert not (sock_dir / "pt2cached.sock").exists()
    return d.log()


def test_socket_dir_symlink_refused(make_daemon, tmp_root):
    real = tmp_root / "real"
    real.mkdir(mode=0o700)
    link = tmp_root / "link"
    link.symlink_to(real)
    log = start_must_fail(make_daemon, link, "a")
    assert f"refusing socket directory {link}: it is a symbolic link" in log, log


def test_socket_dir_mode_0755_refused(make_daemon, tmp_root):
    loose = tmp_root / "loose"
    loose.mkdir()
    os.chmod(loose, 0o755)
    log = start_must_fail(make_daemon, loose, "a")
    assert (f"refusing socket directory {loose}: mode 0755 lets group or others in "
            f"(expected 0700; run chmod 700 {loose})") in log, log


def test_socket_dir_not_a_directory_refused(make_daemon, tmp_root):
    plain = tmp_root / "plain"
    plain.write_text("")
    log = start_must_fail(make_daemon, plain, "a")
    assert str(plain) in log and ("not a directory" in log), log


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown a directory to another uid")
def test_socket_dir_owned_by_other_uid_refused(make_daemon, tmp_root):
    foreign = tmp_root / "foreign"
    foreign.mkdir(mode=0o700)
    os.chown(foreign, 65534, 65534)
    log = start_must_fail(make_daemon, foreign, "a")
    assert (f"refusing socket directory {foreign}: owned by uid 65534, not by uid "
            f"{os.geteuid()}") in log, log


def test_socket_and_dir_modes_after_start(make_daemon, tmp_root):
    d = make_daemon(start=False)
    d.socket = tmp_root / "fresh" / "deeper" / "pt2cached.sock"
    old = os.umask(0o022)  # a permissive umask must not leak into the modes
    try:
        d.start()
    finally:
        os.umask(old)
    assert stat.S_IMODE(d.socket.parent.stat().st_mode) == 0o700
    st = d.socket.lstat()
    assert stat.S_ISSOCK(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o600
    assert st.st_uid == os.geteuid()
    assert stat.S_IMODE(d.cache_dir.stat().st_mode) == 0o700
    assert d.cli("put", "pgo", "k", input=b"v").returncode == OK  # small.mdb
    assert d.cli("put", "pgo", "big", input=os.urandom(64 << 10)).returncode == OK  # a file
    drain_disk_queue(d)
    assert stat.S_IMODE((d.cache_dir / "small.mdb").stat().st_mode) == 0o600
    assert len(entry_files(d.cache_dir)) == 1
    for path in entry_files(d.cache_dir):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        for parent in (path.parent, path.parent.parent, path.parent.parent.parent):
            assert stat.S_IMODE(parent.stat().st_mode) == 0o700, parent


# ---------------------------------------------------------- socket activation


def find_socket_activate() -> str | None:
    for candidate in (shutil.which("systemd-socket-activate"),
                      "/lib/systemd/systemd-socket-activate",
                      "/usr/lib/systemd/systemd-socket-activate"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def test_socket_activation(tmp_root):
    activate = find_socket_activate()
    if activate is None:
        pytest.skip("systemd-socket-activate is not installed (Debian package systemd)")
    sock_dir = tmp_root / "run"
    sock_dir.mkdir(mode=0o700)
    sock = sock_dir / "pt2cached.sock"
    log_path = tmp_root / "activated.log"
    env = clean_env(HOME=str(tmp_root), XDG_CONFIG_HOME=str(tmp_root / "cfg"))
    cmd = [activate, "-l", str(sock), "-E", f"XDG_CONFIG_HOME={tmp_root / 'cfg'}",
           PT2CACHED, "--socket", str(sock), "--cache-dir", str(tmp_root / "cache"),
           "--log-level", "info"]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        wait_for(lambda: sock.exists() or proc.poll() is not None, what="the activation socket")
        assert proc.poll() is None, log_path.read_text()
        # The first client starts the daemon, which inherits the socket.
        r = subprocess.run([PT2CACHE_CLI, "--socket", str(sock), "--timeout", "10000", "put",
                            "pgo", "k", "-"], input=b"activated", capture_output=True, timeout=30)
        assert r.returncode == OK, err(r) + log_path.read_text()
        r = subprocess.run([PT2CACHE_CLI, "--socket", str(sock), "get", "pgo", "k"],
                           capture_output=True, timeout=30)
        assert (r.returncode, r.stdout) == (OK, b"activated")
        text = log_path.read_text()
        assert "using the socket passed by systemd" in text, text
        assert f"ready on {sock}" in text
        # A daemon started by hand on the same socket (another cache) is
        # refused: it unlinked the activated daemon's socket and took over.
        manual = subprocess.run([PT2CACHED, "--socket", str(sock), "--cache-dir",
                                 str(tmp_root / "other-cache")], capture_output=True, env=env,
                                timeout=30)
        assert manual.returncode != 0
        assert f"pt2cached is already running on {sock}" in err(manual), err(manual)
        assert sock.exists()
        r = subprocess.run([PT2CACHE_CLI, "--socket", str(sock), "get", "pgo", "k"],
                           capture_output=True, timeout=30)
        assert (r.returncode, r.stdout) == (OK, b"activated")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# ------------------------------------------------------------ peer credentials


@pytest.fixture
def throwaway_user():
    if os.geteuid() != 0:
        pytest.skip("needs root to create a user and run the daemon as it")
    if not shutil.which("useradd") or not shutil.which("setpriv"):
        pytest.skip("useradd or setpriv is missing")
    name = f"pt2test-{secrets.token_hex(3)}"
    subprocess.run(["useradd", "-M", "-r", "-s", "/usr/sbin/nologin", name], check=True,
                   capture_output=True, timeout=30)
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", name], capture_output=True, timeout=30)


def test_refuses_peer_with_other_uid(throwaway_user):
    user = throwaway_user
    uid, gid = user.pw_uid, user.pw_gid
    home = Path(tempfile.mkdtemp(prefix="p2t-peer-", dir="/tmp"))
    os.chown(home, uid, gid)
    os.chmod(home, 0o700)
    as_user = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups"]
    sock = home / "run" / "pt2cached.sock"
    log_path = Path(tempfile.mkdtemp(prefix="p2t-log-", dir="/tmp")) / "daemon.log"
    env = clean_env(HOME=str(home), XDG_CONFIG_HOME=str(home / "cfg"))
    with open(log_path, "ab") as log:
        proc = subprocess.Popen([*as_user, PT2CACHED, "--socket", str(sock), "--cache-dir",
                                 str(home / "cache"), "--log-level", "info"],
                                stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        # Not the harness's connect-to-wait: that would be a refused peer too.
        wait_for(lambda: "ready on" in log_path.read_text() or proc.poll() is not None,
                 what="the daemon to be ready")
        assert proc.poll() is None, log_path.read_text()
        assert sock.stat().st_uid == uid

        conn = RawConnection(sock)  # root: the 0600 mode does not stop it, the daemon must
        try:
            conn.send(hello_frame())
        except (BrokenPipeError, ConnectionResetError):
            pass
        assert conn.closed_by_peer(timeout=5), "the refused connection got a reply"
        conn.close()

        wait_for(lambda: "refused a connection from uid 0" in log_path.read_text(),
                 what="the refusal in the log")
        text = log_path.read_text()
        assert f"pt2cached serves only uid {uid}" in text, text

        r = subprocess.run([*as_user, PT2CACHE_CLI, "--socket", str(sock), "stats", "--json"],
                           capture_output=True, env=env, timeout=30)
        assert r.returncode == OK, err(r)
        stats = json.loads(r.stdout)
        assert stats["daemon"]["peers_refused"] == 1
        assert stats["daemon"]["connections_accepted"] == 1  # the CLI's own
        r = subprocess.run([*as_user, PT2CACHE_CLI, "--socket", str(sock), "put", "pgo", "k",
                            "-"], input=b"mine", capture_output=True, env=env, timeout=30)
        assert r.returncode == OK, err(r)
        # And root's CLI gets no service: the connection closes without a reply.
        r = subprocess.run([PT2CACHE_CLI, "--socket", str(sock), "get", "pgo", "k"],
                           capture_output=True, timeout=30)
        assert r.returncode in (UNREACHABLE, SERVER), err(r)
        assert r.stdout == b""
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(log_path.parent, ignore_errors=True)


def test_a_descriptor_limit_too_low_is_refused(tmp_root):
    """Under `ulimit -n 16` the daemon served 8 connections and acknowledged
    puts whose disk writes all failed (no descriptor left for the file)."""
    import resource

    def limit(n):
        return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))

    root = tmp_root / "d"
    root.mkdir(mode=0o700)
    r = subprocess.run([PT2CACHED, "--socket", str(root / "s"), "--cache-dir", str(root / "c")],
                       preexec_fn=limit(16), capture_output=True, timeout=30)
    assert r.returncode != 0
    assert "the descriptor limit (16, ulimit -n) is too low: pt2cached needs at least 32" \
        in err(r), err(r)
    assert not (root / "c").exists()
