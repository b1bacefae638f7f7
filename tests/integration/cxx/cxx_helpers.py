"""Helpers for the pt2cache-cxx tests: run the launcher against a real daemon
and real g++, and read the daemon's compile counters."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[3]
LAUNCHER = os.environ.get("PT2CACHE_CXX_LAUNCHER", str(_ROOT / "build/client/cxx/pt2cache-cxx"))
CLI = str(Path(os.environ.get("PT2CACHE_CLI", str(_ROOT / "build/client/cli/pt2cache"))).resolve())
GXX = shutil.which("g++")

# Variables of the developer's environment that would change the launcher's
# behaviour or key.
_SCRUB = ("PT2CACHE_", "TORCHINDUCTOR_", "CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH",
          "LIBRARY_PATH", "DEPENDENCIES_OUTPUT", "SUNPRO_DEPENDENCIES", "GCC_")


def clean_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_SCRUB)}
    env.update({k: str(v) for k, v in extra.items()})
    return env


def launcher_env(daemon, tmpdir: Path | None = None, **extra: str) -> dict:
    env = clean_env(PT2CACHE_SOCKET=str(daemon.socket), **extra)
    if tmpdir is not None:
        tmpdir.mkdir(parents=True, exist_ok=True)
        env["TMPDIR"] = str(tmpdir)
    return env


def run(argv: list, cwd: Path, env: dict, timeout: float = 120,
        preexec=None) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True,
                          timeout=timeout, preexec_fn=preexec)


def cxx(args: list, cwd: Path, env: dict, **kw) -> subprocess.CompletedProcess:
    return run([LAUNCHER, *args], cwd, env, **kw)


def gxx(args: list, cwd: Path, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    return run([GXX, *args], cwd, env or clean_env(), **kw)


def counters(daemon) -> dict:
    stats = daemon.stats()
    return stats.get("compile", {}).get("cxx", {})


def ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, (proc.returncode, proc.stderr.decode(errors="replace"))
    return proc


# A source whose object holds V, for tests that build where a wrong hit
# would hand over another V.
RETURN_V = 'extern "C" int f() { return V; }\n'


def same_as_gxx(args: list, cwd: Path, output: Path, env: dict | None = None) -> None:
    """`output`, as the launcher left it, is what g++ makes of `args` now
    (in `env`, a clean environment by default)."""
    got = output.read_bytes()
    ref = output.with_name("ref-" + output.name)
    o = args.index("-o")
    ok(gxx([*args[:o + 1], ref, *args[o + 2:]], cwd, env))
    assert got == ref.read_bytes(), f"{output} is not what g++ builds"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


KERNEL = """
#include "kernel.h"
extern "C" int add(int a, int b) { return a + b + OFFSET; }
extern "C" double scale(double x) { return x * FACTOR; }
"""

KERNEL_H = "#define OFFSET 1\n#define FACTOR 2.5\n"
