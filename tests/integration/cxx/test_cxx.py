"""pt2cache-cxx with real g++ and a real daemon: pass-through, hits, and a miss
for every input that changes the output (docs/cxx.md)."""

from __future__ import annotations

import ctypes
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from cxx_helpers import (CLI, GXX, KERNEL, KERNEL_H, LAUNCHER, counters, cxx, gxx, launcher_env, ok,
                         run, write)


@pytest.mark.parametrize("log", [None, "1"], ids=["quiet", "log-on-stderr"])
def test_pass_through_is_byte_identical(daemon, tmp_root, log):
    """Queries print what the compiler prints, even with PT2CACHE_CXX_LOG=1:
    tools parse it (Inductor names its precompiled header and ISA checks
    after `--version` and `-E` output)."""
    env = launcher_env(daemon, **({"PT2CACHE_CXX_LOG": log} if log else {}))
    for args in (["--version"], ["-dumpversion"], ["-v"], ["-dumpmachine"],
                 ["-print-prog-name=cc1plus"]):
        mine, real = cxx(args, tmp_root, env), gxx(args, tmp_root)
        assert (mine.returncode, mine.stdout, mine.stderr) == \
            (real.returncode, real.stdout, real.stderr), args
    write(tmp_root / "m.cpp", "#define X 42\nint x = X;\n")
    mine = cxx(["-E", "m.cpp"], tmp_root, env)
    real = gxx(["-E", "m.cpp"], tmp_root)
    assert mine.returncode == 0 and mine.stdout == real.stdout and b"int x = 42" in mine.stdout
    assert mine.stderr == real.stderr == b""
    # Several sources, stdin: still exactly the compiler's behaviour.
    write(tmp_root / "n.cpp", "int n;\n")
    ok(cxx(["-c", "m.cpp", "n.cpp"], tmp_root, env))
    assert (tmp_root / "m.o").exists() and (tmp_root / "n.o").exists()
    stdin_args = ["-x", "c++", "-c", "-", "-o", "stdin.o"]
    mine = subprocess.run([LAUNCHER, *stdin_args], cwd=tmp_root, env=env, capture_output=True,
                          input=b"int from_stdin() { return 7; }\n", timeout=60)
    assert mine.returncode == 0, mine.stderr
    built = (tmp_root / "stdin.o").read_bytes()
    subprocess.run([GXX, *stdin_args], cwd=tmp_root, input=b"int from_stdin() { return 7; }\n",
                   check=True, timeout=60)
    assert (tmp_root / "stdin.o").read_bytes() == built
    assert counters(daemon).get("lookups", 0) == 0


def test_log_to_a_file(daemon, tmp_root):
    """PT2CACHE_CXX_LOG=/path appends the decisions there, with the process
    id (Inductor discards a successful compiler's stderr), and leaves stdout
    and stderr as the compiler's; a log that cannot be opened is said on
    stderr and the compile goes on."""
    log = tmp_root / "cxx.log"
    env = launcher_env(daemon, tmp_root / "t", PT2CACHE_CXX_LOG=str(log))
    write(tmp_root / "kernel.h", KERNEL_H)
    write(tmp_root / "k.cpp", KERNEL)
    args = ["-c", "k.cpp", "-O1", "-o", "k.o"]
    miss = ok(cxx(args, tmp_root, env))
    (tmp_root / "k.o").unlink()
    hit = ok(cxx(args, tmp_root, env))
    query = ok(cxx(["--version"], tmp_root, env))
    assert (miss.stdout, miss.stderr, hit.stdout, hit.stderr) == (b"", b"", b"", b"")
    assert query.stdout == gxx(["--version"], tmp_root).stdout and query.stderr == b""
    lines = log.read_text().splitlines()
    assert re.fullmatch(r"pt2cache-cxx\[\d+\]: miss: no manifest m-[0-9a-f]{32}", lines[0]), lines
    assert re.fullmatch(r"pt2cache-cxx\[\d+\]: stored r-[0-9a-f]{32} \(\d+ bytes, built in \d+ ms\)",
                        lines[1]), lines
    assert re.fullmatch(r"pt2cache-cxx\[\d+\]: hit \(CXX_LOOKUP\) under m-[0-9a-f]{32} in \d+ ms",
                        lines[2]), lines
    assert re.fullmatch(r"pt2cache-cxx\[\d+\]: not cached: option --version", lines[3]), lines
    assert len(lines) == 4 and lines[0].split(":")[0] == lines[1].split(":")[0] != \
        lines[2].split(":")[0]
    assert oct(log.stat().st_mode & 0o777) == "0o600"

    (tmp_root / "k.o").unlink()
    env["PT2CACHE_CXX_LOG"] = str(tmp_root)  # a directory
    unopenable = ok(cxx(args, tmp_root, env))
    assert unopenable.stderr.decode() == \
        f"pt2cache-cxx: PT2CACHE_CXX_LOG: cannot open {tmp_root}: Is a directory\n"
    assert (tmp_root / "k.o").exists()


def test_launcher_loads_no_shared_library_but_libc():
    """The launcher starts on every compile: libstdc++, fmt, zstd and xxHash are
    linked in, so the dynamic loader maps libc alone (and names itself) (docs/cxx.md, "Benchmark")."""
    dynamic = subprocess.run(["readelf", "-d", LAUNCHER], capture_output=True, check=True,
                             timeout=30).stdout.decode()
    needed = [line.split("[", 1)[1].rstrip("]") for line in dynamic.splitlines()
              if "(NEEDED)" in line]
    # The loader itself may be named (static libstdc++ uses its __tls_get_addr).
    assert "libc.so.6" in needed and all(name == "libc.so.6" or name.startswith("ld-linux")
                                         for name in needed), needed


def test_object_hit_is_byte_identical_to_the_compiler(daemon, tmp_root):
    env = launcher_env(daemon, tmp_root / "t")
    write(tmp_root / "kernel.h", KERNEL_H)
    write(tmp_root / "k.cpp", KERNEL)
    args = ["-c", "k.cpp", "-O2", "-fPIC", "-o", "k.o"]
    ok(cxx(args, tmp_root, env))
    assert counters(daemon) == {"lookups": 1, "hits": 0, "misses": 1, "builds": 1,
                                "saved_ms": counters(daemon)["saved_ms"]}
    (tmp_root / "k.o").unlink()
    hit = ok(cxx(args, tmp_root, env))
    assert hit.stdout == b"" and hit.stderr == b""
    cached = (tmp_root / "k.o").read_bytes()
    assert counters(daemon)["hits"] == 1 and counters(daemon)["builds"] == 1
    ok(gxx(args, tmp_root))
    assert (tmp_root / "k.o").read_bytes() == cached
    assert oct((tmp_root / "k.o").stat().st_mode & 0o777) == oct(0o666 & ~_umask())


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _shared_build(root: Path, daemon, extra=()) -> tuple:
    """k.cpp in root/ab with its header, built into root/ab/k.so with TMPDIR
    and TORCHINDUCTOR_CACHE_DIR under root, as Inductor does."""
    src = root / "cache" / "ab"
    write(src / "kernel.h", KERNEL_H)
    write(src / "k.cpp", KERNEL)
    env = launcher_env(daemon, root / "tmp", TORCHINDUCTOR_CACHE_DIR=root / "cache")
    args = [src / "k.cpp", "-shared", "-fPIC", "-O2", f"-I{src}", "-Wall", *extra,
            "-o", src / "k.so"]
    return src, env, args


@pytest.mark.parametrize("debug", [[], ["-g1"]], ids=["plain", "g1"])
def test_shared_object_hit_from_another_directory_loads(daemon, tmp_root, debug):
    # Inductor always passes -g1: debug information must not stop the hit.
    src_a, env_a, args_a = _shared_build(tmp_root / "machine-a", daemon, extra=debug)
    ok(cxx(args_a, tmp_root, env_a))
    src_b, env_b, args_b = _shared_build(tmp_root / "machine-b", daemon, extra=debug)
    ok(cxx(args_b, tmp_root / "machine-b", env_b))
    c = counters(daemon)
    assert (c["hits"], c["builds"]) == (1, 1), c
    so = src_b / "k.so"
    assert os.access(so, os.X_OK)
    assert oct(so.stat().st_mode & 0o777) == oct(0o777 & ~_umask())
    lib = ctypes.CDLL(str(so))
    lib.scale.restype = ctypes.c_double
    lib.scale.argtypes = [ctypes.c_double]
    assert lib.add(2, 3) == 6
    assert lib.scale(4.0) == 10.0
    ref = ctypes.CDLL(str(src_a / "k.so"))
    assert ref.add(40, 2) == lib.add(40, 2)


def _variant_miss(daemon, root: Path, change) -> None:
    """Builds once, applies `change(src, env, args)`, builds again: a miss.
    Then the unchanged build again: a hit."""
    src, env, args = _shared_build(root, daemon)
    ok(cxx(args, root, env))
    before = counters(daemon)
    env2, args2 = change(src, dict(env), list(args))
    ok(cxx(args2, root, env2))
    after = counters(daemon)
    assert after["hits"] == before["hits"], f"a changed input hit: {after}"
    assert after["builds"] == before["builds"] + 1


def test_header_byte_changes_miss(daemon, tmp_root):
    def change(src, env, args):
        write(src / "kernel.h", KERNEL_H.replace("OFFSET 1", "OFFSET 2"))
        return env, args
    _variant_miss(daemon, tmp_root / "h", change)
    # Both header variants now hit, each with its own result.
    src, env, args = _shared_build(tmp_root / "h", daemon)  # writes the OFFSET 1 header back
    hits = counters(daemon)["hits"]
    ok(cxx(args, tmp_root, env))
    assert counters(daemon)["hits"] == hits + 1
    assert ctypes.CDLL(str(src / "k.so")).add(0, 0) == 1


def test_define_changes_miss(daemon, tmp_root):
    _variant_miss(daemon, tmp_root / "d", lambda src, env, args: (env, args[:-2] + ["-DX=1"] +
                                                                  args[-2:]))


def test_march_changes_miss(daemon, tmp_root):
    _variant_miss(daemon, tmp_root / "m", lambda src, env, args: (env, args[:-2] +
                                                                  ["-march=x86-64-v2"] +
                                                                  args[-2:]))


FAKE_GXX = """#!/bin/sh
# A compiler that is g++ but says it is another version, or that
# -march=native means something else: the tags are in files beside it, so
# that its own bytes (an input of every build) stay the same.
case "$*" in
  --version) echo "g++ (pt2cache test) $(cat "$0.version")"; exit 0;;
  *--help=target*) {real} "$@" | sed "s/^/$(cat "$0.native") /"; exit 0;;
esac
exec {real} "$@"
"""


def _fake_compiler(path: Path, version: str, native: str, stamp=None) -> Path:
    path.write_text(FAKE_GXX.format(real=GXX))
    path.chmod(0o755)
    Path(f"{path}.version").write_text(version)
    Path(f"{path}.native").write_text(native)
    if stamp is not None:  # same size and mtime, a new ctime: "replaced"
        os.utime(path, ns=stamp)
    return path


def test_compiler_version_and_native_expansion_are_in_the_key(daemon, tmp_root):
    fake = tmp_root / "bin" / "fake-g++"
    fake.parent.mkdir()
    _fake_compiler(fake, "1.0", "N1")
    stamp = (fake.stat().st_atime_ns, fake.stat().st_mtime_ns)
    src, env, args = _shared_build(tmp_root / "c", daemon)
    env["PT2CACHE_CXX"] = str(fake)
    native_args = args[:-2] + ["-march=native"] + args[-2:]
    ok(cxx(args, tmp_root, env))
    ok(cxx(native_args, tmp_root, env))
    assert counters(daemon)["builds"] == 2

    # Same path, size and mtime; another --version: both miss.
    _fake_compiler(fake, "2.0", "N1", stamp)
    ok(cxx(args, tmp_root, env))
    ok(cxx(native_args, tmp_root, env))
    c = counters(daemon)
    assert (c["hits"], c["builds"]) == (0, 4), c

    # Another -march=native expansion (another CPU): only -march=native misses.
    _fake_compiler(fake, "2.0", "N2", stamp)
    ok(cxx(args, tmp_root, env))
    ok(cxx(native_args, tmp_root, env))
    c = counters(daemon)
    assert (c["hits"], c["builds"]) == (1, 5), c

    # The driver's own bytes, same size, mtime, --version and expansion: both miss.
    text = fake.read_text()
    fake.write_text(text.replace("# A compiler", "# a compiler"))
    os.utime(fake, ns=stamp)
    ok(cxx(args, tmp_root, env))
    ok(cxx(native_args, tmp_root, env))
    c = counters(daemon)
    assert (c["hits"], c["builds"]) == (1, 7), c


def test_linked_library_content_is_in_the_key(daemon, tmp_root):
    libdir = tmp_root / "lib"
    write(libdir / "foo.cpp", "extern \"C\" int foo() { return 7; }\n")
    ok(gxx(["-shared", "-fPIC", "foo.cpp", "-o", "libfoo.so"], libdir))
    src, env, args = _shared_build(tmp_root / "l", daemon, extra=[f"-L{libdir}", "-lfoo"])
    ok(cxx(args, tmp_root, env))
    (src / "k.so").unlink()
    ok(cxx(args, tmp_root, env))
    assert counters(daemon)["hits"] == 1
    write(libdir / "foo.cpp", "extern \"C\" int foo() { return 8; }\n")
    ok(gxx(["-shared", "-fPIC", "foo.cpp", "-o", "libfoo.so"], libdir))
    ok(cxx(args, tmp_root, env))
    c = counters(daemon)
    assert (c["hits"], c["builds"]) == (1, 2), c


def test_precompiled_header_hit_is_usable(daemon, tmp_root):
    env = launcher_env(daemon, tmp_root / "t")
    pch_dir = tmp_root / "pch"
    write(pch_dir / "big.h", "#include <vector>\n#include <string>\n#define PCH_VALUE 5\n")
    pch_args = ["-x", "c++-header", pch_dir / "big.h", "-O2", "-fPIC", "-o",
                pch_dir / "big.h.gch"]
    ok(cxx(pch_args, tmp_root, env))
    built = (pch_dir / "big.h.gch").read_bytes()
    (pch_dir / "big.h.gch").unlink()
    ok(cxx(pch_args, tmp_root, env))
    assert counters(daemon)["hits"] == 1
    assert (pch_dir / "big.h.gch").read_bytes() == built
    write(tmp_root / "use.cpp", "int use() { std::vector<int> v{PCH_VALUE}; return v[0]; }\n")
    use_args = ["-include", pch_dir / "big.h", "-Winvalid-pch", "-O2", "-fPIC", "-c",
                "use.cpp", "-o", "use.o"]
    ok(cxx(use_args, tmp_root, env))
    used = gxx(["-H", *use_args[:-2], "-o", "ref.o"], tmp_root)
    assert b"! " + str(pch_dir / "big.h.gch").encode() in used.stderr  # g++ uses the PCH
    assert (tmp_root / "use.o").read_bytes() == (tmp_root / "ref.o").read_bytes()
    # A new precompiled header (same header text, other flags) changes the use's key.
    (tmp_root / "use.o").unlink()
    ok(gxx(["-x", "c++-header", pch_dir / "big.h", "-O2", "-fPIC", "-DOTHER", "-o",
            pch_dir / "big.h.gch"], tmp_root))
    before = counters(daemon)
    ok(cxx(use_args, tmp_root, env))
    after = counters(daemon)
    assert after["hits"] == before["hits"] and after["builds"] == before["builds"] + 1


def test_masquerade_symlink_and_explain(daemon, tmp_root):
    masq = tmp_root / "masq"
    masq.mkdir()
    os.symlink(os.path.abspath(LAUNCHER), masq / "g++")
    env = launcher_env(daemon, tmp_root / "t")
    env["PATH"] = f"{masq}:{env['PATH']}"
    write(tmp_root / "kernel.h", KERNEL_H)
    write(tmp_root / "k.cpp", KERNEL)
    real = gxx(["--version"], tmp_root)
    mine = run(["g++", "--version"], tmp_root, env)
    assert mine.stdout == real.stdout
    args = ["-c", "k.cpp", "-O1", "-o", "k.o"]
    ok(run(["g++", *args], tmp_root, env))
    ok(run(["g++", *args], tmp_root, env))
    assert counters(daemon)["hits"] == 1

    def explain_in(*argv):  # in the build's directory, with the build's environment
        return run([CLI, "--socket", daemon.socket, "cxx", "--explain", "--", *argv], tmp_root,
                   env)

    explain = explain_in("g++", *args)
    text = explain.stdout.decode()
    assert explain.returncode == 0, explain.stderr
    for needle in ("compiler.version", "arg[1]", "source", "common key:", "MATCH", "stored"):
        assert needle in text, text
    write(tmp_root / "kernel.h", KERNEL_H + "// changed\n")
    text = explain_in(*args).stdout.decode()
    assert "no match" in text and "kernel.h: recorded" in text, text
    assert "not cacheable" in explain_in("-E", "k.cpp").stdout.decode()

    stats = daemon.cli("stats").stdout.decode()
    assert "compile cache" in stats and "cxx" in stats


def test_hash_files_op_caches_by_stat(daemon, tmp_root):
    """HASH_FILES through the launcher: the daemon's cache answers the second lookup."""
    env = launcher_env(daemon, tmp_root / "t")
    headers = "".join(f'#include "h{i}.h"\n' for i in range(50))
    for i in range(50):
        write(tmp_root / f"h{i}.h", f"#define H{i} {i}\n")
    time.sleep(2.2)  # older than the daemon's racy window: the hashes may be remembered
    write(tmp_root / "many.cpp", headers + "int f() { return H49; }\n")
    args = ["-c", "many.cpp", "-o", "many.o"]
    ok(cxx(args, tmp_root, env))
    (tmp_root / "many.o").unlink()
    ok(cxx(args, tmp_root, env))
    stats = daemon.stats()
    assert stats["compile"]["cxx"]["hits"] == 1
    assert stats["file_hashes"]["hits"] >= 50, stats["file_hashes"]
