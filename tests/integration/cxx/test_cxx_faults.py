"""pt2cache-cxx when things go wrong: no daemon, a daemon that stalls or dies
mid-reply, a failing compiler, a full disk, and 16 identical builds at once.
The compile's outcome is always the real compiler's."""

from __future__ import annotations

import os
import re
import resource
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from cxx_helpers import (CLI, GXX, KERNEL, KERNEL_H, LAUNCHER, clean_env, counters, cxx, gxx,
                         launcher_env, ok, run, write)


def _kernel(root: Path) -> list:
    write(root / "kernel.h", KERNEL_H)
    write(root / "k.cpp", KERNEL)
    return ["-c", "k.cpp", "-O2", "-o", "k.o"]


def test_no_daemon_builds_normally(tmp_root):
    args = _kernel(tmp_root)
    env = clean_env(PT2CACHE_SOCKET=str(tmp_root / "absent.sock"))
    start = time.monotonic()
    ok(cxx(args, tmp_root, env))
    assert time.monotonic() - start < 30
    built = (tmp_root / "k.o").read_bytes()
    ok(gxx(args, tmp_root))
    assert (tmp_root / "k.o").read_bytes() == built


def test_failing_compiler_is_not_cached(daemon, tmp_root):
    write(tmp_root / "bad.cpp", "int f() { return undefined_name; }\n")
    args = ["-c", "bad.cpp", "-o", "bad.o"]
    env = launcher_env(daemon, tmp_root / "t")
    for _ in range(2):
        mine, real = cxx(args, tmp_root, env), gxx(args, tmp_root)
        assert mine.returncode == real.returncode != 0
        assert mine.stderr == real.stderr and b"undefined_name" in mine.stderr
        assert mine.stdout == real.stdout
    c = counters(daemon)
    assert (c["hits"], c["builds"]) == (0, 0), c


def test_stalled_daemon_times_out_into_a_build(daemon, tmp_root):
    args = _kernel(tmp_root)
    env = launcher_env(daemon, tmp_root / "t", PT2CACHE_CXX_TIMEOUT_MS="300")
    daemon.proc.send_signal(signal.SIGSTOP)
    try:
        start = time.monotonic()
        ok(cxx(args, tmp_root, env, timeout=60))
        assert time.monotonic() - start < 20
    finally:
        daemon.proc.send_signal(signal.SIGCONT)
    assert (tmp_root / "k.o").stat().st_size > 0


KILLER = """#!/bin/sh
# The real compiler; the build itself (the launcher adds -MF) first kills the
# daemon: the launcher looked up before this ran and stores after it.
case "$*" in *-MF*) kill -9 {pid};; esac
exec {real} "$@"
"""


def test_daemon_killed_between_lookup_and_store(daemon, tmp_root):
    args = _kernel(tmp_root)
    killer = tmp_root / "killer-g++"
    killer.write_text(KILLER.format(pid=daemon.proc.pid, real=GXX))
    killer.chmod(0o755)
    env = launcher_env(daemon, tmp_root / "t", PT2CACHE_CXX=killer)
    proc = cxx(args, tmp_root, env)
    ok(proc)
    daemon.proc.wait(timeout=10)
    assert daemon.proc.returncode == -signal.SIGKILL
    built = (tmp_root / "k.o").read_bytes()
    ok(gxx(args, tmp_root))
    assert (tmp_root / "k.o").read_bytes() == built


class CuttingProxy:
    """Forwards a Unix socket to the daemon and cuts every connection once the
    daemon has sent `cut_after` bytes on it: a daemon dying mid-reply."""

    def __init__(self, path: Path, target: Path, cut_after: int):
        self.path, self.target, self.cut_after = path, target, cut_after
        self.cuts = 0
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(path))
        self.server.listen(16)
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.connect(str(self.target))
            threading.Thread(target=self._pump, args=(client, upstream, None), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, self.cut_after),
                             daemon=True).start()

    def _pump(self, src, dst, limit):
        sent = 0
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if limit is not None and sent + len(data) > limit:
                    dst.sendall(data[:limit - sent])
                    self.cuts += 1
                    break
                dst.sendall(data)
                sent += len(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self):
        self.server.close()


def test_daemon_dying_mid_reply_gives_a_real_build(daemon, tmp_root):
    # 200 KB of incompressible data: the stored value is far larger than the cut.
    data, x = [], 12345
    for _ in range(200_000):
        x = (x * 1103515245 + 12345) % 2**31
        data.append(str(x >> 23))
    write(tmp_root / "big.cpp", "extern const unsigned char big[];\n"
          "const unsigned char big[] = {" + ",".join(data) + "};\n")
    args = ["-c", "big.cpp", "-o", "big.o"]
    ok(cxx(args, tmp_root, launcher_env(daemon, tmp_root / "t")))
    reference = (tmp_root / "big.o").read_bytes()
    (tmp_root / "big.o").unlink()
    proxy = CuttingProxy(tmp_root / "proxy.sock", daemon.socket, cut_after=16 * 1024)
    try:
        env = launcher_env(daemon, tmp_root / "t")
        env["PT2CACHE_SOCKET"] = str(proxy.path)
        ok(cxx(args, tmp_root, env))
    finally:
        proxy.close()
    assert proxy.cuts >= 1
    assert (tmp_root / "big.o").read_bytes() == reference
    assert not list(tmp_root.glob(".big.o.pt2cache-*"))
    # Only the first run's build was stored: the cut run's build found no daemon.
    assert counters(daemon)["builds"] == 1


def _tiny_tmpfs(path: Path) -> bool:
    path.mkdir()
    return subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(path)],
                          capture_output=True).returncode == 0


def test_full_disk_gives_the_compilers_error(daemon, tmp_root):
    write(tmp_root / "big.cpp", "extern const char big[200000];\n"
                                "const char big[200000] = {1};\n")
    env = launcher_env(daemon, tmp_root / "t")
    full = tmp_root / "full"
    mounted = _tiny_tmpfs(full)
    out = full / "big.o"
    args = ["-c", tmp_root / "big.cpp", "-o", out]
    # Store the result first (written elsewhere, then the same command).
    ok(cxx(["-c", tmp_root / "big.cpp", "-o", tmp_root / "big.o"], tmp_root, env))
    preexec = None
    if not mounted:
        # No tmpfs (no privileges): a file-size limit makes writes fail alike.
        def preexec():
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))
    try:
        real = gxx(args, tmp_root, env, preexec=preexec)
        if out.exists():
            out.unlink()
        mine = cxx(args, tmp_root, env, preexec=preexec)
        assert real.returncode != 0
        assert mine.returncode == real.returncode, mine.stderr
        # The same error, up to the name of the assembler's temporary file.
        temp = re.compile(rb"cc\w{6}\.s")
        assert temp.sub(b"cc.s", mine.stderr) == temp.sub(b"cc.s", real.stderr)
        assert not [p for p in full.iterdir() if p.name.startswith(".big.o.pt2cache")]
    finally:
        if mounted:
            subprocess.run(["umount", str(full)], check=False)


def test_sixteen_identical_builds_at_once(daemon, tmp_root):
    args = _kernel(tmp_root)
    write(tmp_root / "k.cpp", KERNEL + "".join(
        f"extern \"C\" int f{i}(int x) {{ return x * {i} + {i % 7}; }}\n" for i in range(300)))
    env = launcher_env(daemon, tmp_root / "t")
    # Learn the compiler's facts first, so that all 16 race on the build itself.
    write(tmp_root / "warm.cpp", "int warm;\n")
    ok(cxx(["-c", "warm.cpp", "-o", "warm.o"], tmp_root, env))
    base = counters(daemon)
    procs = [subprocess.Popen([LAUNCHER, *args], cwd=tmp_root, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE) for _ in range(16)]
    results = [(p.wait(timeout=300), p.stdout.read(), p.stderr.read()) for p in procs]
    assert all(rc == 0 for rc, _, _ in results), results
    built = (tmp_root / "k.o").read_bytes()
    c = counters(daemon)
    assert c["builds"] - base["builds"] == 1, c
    assert c["hits"] - base["hits"] == 15, c
    ok(gxx(args, tmp_root))
    assert (tmp_root / "k.o").read_bytes() == built
    assert not list(tmp_root.glob(".k.o.pt2cache-*"))


def test_a_fifo_source_is_left_to_the_compiler(daemon, tmp_root):
    """The launcher opened a FIFO source to read it: with no writer yet the
    build waited forever, and with one it let the writer in, closed, and the
    writer's bytes were gone before the compiler came (it then waited for a
    writer that had left). A source that is not a regular file is the
    compiler's alone now, in the build and in `cxx --explain`."""
    write(tmp_root / "kernel.h", KERNEL_H)
    source = tmp_root / "k.cpp"
    os.mkfifo(source)
    env = launcher_env(daemon, tmp_root / "t")
    args = ["-c", "k.cpp", "-O2", "-o", "k.o"]

    def feed():  # blocks until a reader opens the FIFO, as a generator would
        with open(source, "w") as fifo:
            fifo.write(KERNEL)

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    ok(cxx(args, tmp_root, env, timeout=30))
    writer.join(timeout=10)
    assert not writer.is_alive()
    built = (tmp_root / "k.o").read_bytes()
    assert counters(daemon).get("builds", 0) == 0  # passed through, not cached
    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    ok(gxx(args, tmp_root, timeout=30))
    writer.join(timeout=10)
    assert (tmp_root / "k.o").read_bytes() == built
    # --explain says why, without opening the FIFO (no writer waits now).
    explain = run([CLI, "--socket", daemon.socket, "cxx", "--explain", "--", "g++", *args],
                  tmp_root, env, timeout=30)
    assert b"cannot be read as a regular file" in explain.stdout, explain
