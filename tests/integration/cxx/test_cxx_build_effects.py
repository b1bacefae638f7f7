"""pt2cache-cxx: what a fourth review found outside the key. Builds whose
result depends on the time, files the linker reads beyond its inputs (the
libraries the driver's specs add, linker scripts, thin archives), options
that read or write files of their own, the environment of diagnostics, and a
build that exits 0 without writing its output. Each test fails on the
launcher before the fix: a second build hit and got the first one's result."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from cxx_helpers import GXX, counters, cxx, gxx, launcher_env, ok, same_as_gxx, write

SHARED = ["-shared", "-fPIC", "-O2"]


def hits(daemon) -> int:
    return counters(daemon).get("hits", 0)


def logged(proc: subprocess.CompletedProcess) -> str:
    return proc.stderr.decode(errors="replace")


@pytest.mark.parametrize("case", ["header", "define", "splice", "timestamp", "pragma"])
def test_builds_that_depend_on_the_time_are_not_stored(daemon, tmp_root, case):
    """__TIME__ in a header or a -D, spliced over two lines, __TIMESTAMP__ (a
    header's mtime) and `#pragma GCC dependency` (mtimes compared): each
    build is run again, never replayed."""
    env = launcher_env(daemon, tmp_root / "t", PT2CACHE_CXX_LOG="1")
    d = tmp_root / case
    source = '#include "t.h"\nextern "C" const char* when() { return WHEN; }\n'
    header = {"header": "#define WHEN __TIME__\n",
              "define": "",
              "splice": "#define WHEN __TI\\\nME__\n",
              "timestamp": "#define WHEN __TIMESTAMP__\n",
              "pragma": '#pragma GCC dependency "t.h"\n#define WHEN "x"\n'}[case]
    write(d / "t.h", header)
    write(d / "k.cpp", source)
    args = ["-c", d / "k.cpp", "-O2", "-o", d / "k.o"]
    if case == "define":
        args.append("-DWHEN=__TIME__")
    for _ in range(2):
        proc = ok(cxx(args, d, env))
        assert "not stored:" in logged(proc), logged(proc)
    assert hits(daemon) == 0


def test_libraries_the_specs_add_are_followed(daemon, tmp_root):
    """-fopenmp (Inductor's flag) links -lpthread after -lgomp: a
    libpthread.so appearing later in a -L directory changes the link."""
    env = launcher_env(daemon, tmp_root / "t")
    d = tmp_root / "omp"
    (d / "lib").mkdir(parents=True)
    write(d / "k.cpp", '#include <pthread.h>\nextern "C" long f() { return (long)pthread_self(); }\n')
    args = ["k.cpp", *SHARED, "-fopenmp", "-Llib", "-o", "k.so"]
    ok(cxx(args, d, env))
    write(d / "fake.cpp", 'extern "C" unsigned long pthread_self() { return 0; }\n')
    ok(gxx(["fake.cpp", *SHARED, "-Wl,-soname,libpthread-local.so.0", "-o", "lib/libpthread.so"],
           d))
    ok(cxx(args, d, env))
    same_as_gxx(args, d, d / "k.so")
    assert hits(daemon) == 0


def test_files_a_linker_script_names_are_inputs(daemon, tmp_root):
    """A -l library that is a linker script (as glibc's libc.so and GCC's
    libgcc_s.so are) links the files it names: they are inputs. Every shared
    object links libgcc_s.so, so an unchanged build still hits."""
    env = launcher_env(daemon, tmp_root / "t")
    d = tmp_root / "script"
    (d / "lib").mkdir(parents=True)
    write(d / "k.cpp", 'extern "C" int g(); extern "C" int f() { return g(); }\n')
    write(d / "lib/libfoo.so", f"/* script */ INPUT({d}/lib/impl.o)\n")
    args = ["k.cpp", *SHARED, "-Llib", "-lfoo", "-o", "k.so"]
    for value in (1, 1, 2):
        write(d / "impl.cpp", f'extern "C" int g() {{ return {value}; }}\n')
        ok(gxx(["-O2", "-fPIC", "-c", "impl.cpp", "-o", "lib/impl.o"], d))
        ok(cxx(args, d, env))
        same_as_gxx(args, d, d / "k.so")
    assert hits(daemon) == 1  # the second build; not the third, whose impl.o changed


def test_a_relative_name_in_a_linker_script_is_found_as_ld_finds_it(daemon, tmp_root):
    """GNU ld looks for a script's relative INPUT in the script's own
    directory first, before the working directory and the -L search: the
    launcher records that file, not an earlier -L directory's."""
    env = launcher_env(daemon, tmp_root / "t")
    d = tmp_root / "relative"
    write(d / "k.cpp", 'extern "C" int g(); extern "C" int f() { return g(); }\n')
    write(d / "lib/libfoo.so", "INPUT(impl.a)\n")

    def archive(where: str, value: int):
        write(d / "impl.cpp", f'extern "C" int g() {{ return {value}; }}\n')
        ok(gxx(["-O2", "-fPIC", "-c", "impl.cpp", "-o", "impl.o"], d))
        (d / where).mkdir(exist_ok=True)
        (d / where / "impl.a").unlink(missing_ok=True)
        ok(subprocess.run(["ar", "rcs", f"{where}/impl.a", "impl.o"], cwd=d, capture_output=True))

    archive("first", 1)  # in an earlier -L directory: not the one ld takes
    archive("lib", 2)
    args = ["k.cpp", *SHARED, "-Lfirst", "-Llib", "-lfoo", "-o", "k.so"]
    ok(cxx(args, d, env))
    archive("lib", 3)
    ok(cxx(args, d, env))
    same_as_gxx(args, d, d / "k.so")
    assert hits(daemon) == 0


def test_a_thin_archive_is_not_stored(daemon, tmp_root):
    """A thin archive holds its members' names only: a member rebuilt with
    the same size leaves its bytes as they were."""
    env = launcher_env(daemon, tmp_root / "t", PT2CACHE_CXX_LOG="1")
    d = tmp_root / "thin"
    write(d / "k.cpp", 'extern "C" int g(); extern "C" int f() { return g(); }\n')
    args = ["k.cpp", *SHARED, "libfoo.a", "-o", "k.so"]
    for value in (1, 2):
        write(d / "impl.cpp", f'extern "C" int g() {{ return {value}; }}\n')
        ok(gxx(["-O2", "-fPIC", "-c", "impl.cpp", "-o", "impl.o"], d))
        (d / "libfoo.a").unlink(missing_ok=True)
        ok(subprocess.run(["ar", "rcs", "--thin", "libfoo.a", "impl.o"], cwd=d,
                          capture_output=True))
        proc = ok(cxx(args, d, env))
        assert "is a thin archive" in logged(proc), logged(proc)
        same_as_gxx(args, d, d / "k.so")
    assert hits(daemon) == 0


@pytest.mark.parametrize("extra, shared", [
    (["-Wa,-alh=k.lst"], False),              # the assembler writes a listing
    (["-Wa,@as.rsp"], False),                 # ... reads a response file
    (["-fbranch-probabilities"], False),      # reads k.gcda
    (["-fmacro-prefix-map=/x=."], False),     # names a directory the key rewrites
    (["-ffile-prefix-map=/x=."], False),
    (["-fmodules-ts"], False),                # reads and writes gcm.cache/
    (["-Wmissing-include-dirs", "-Iinc"], False),  # fails once inc/ is gone
    (["-Wl,--mri-script=m.mri"], True),       # ld reads the inputs the script names
    (["-Wl,-cm.mri"], True),
    (["-Wl,--output=other.so"], True),        # ld writes another file
    (["-Wl,-o,other.so"], True),
])
def test_options_with_files_of_their_own_pass_through(daemon, tmp_root, extra, shared):
    env = launcher_env(daemon, tmp_root / "t", PT2CACHE_CXX_LOG="1")
    d = tmp_root / "opt"
    write(d / "k.cpp", 'extern "C" int f() { return 1; }\n')
    args = ["k.cpp", *(SHARED if shared else ["-c", "-O2"]), *extra,
            "-o", "k.so" if shared else "k.o"]
    proc = cxx(args, d, env)
    assert "not cached:" in logged(proc), logged(proc)
    assert counters(daemon).get("lookups", 0) == 0


@pytest.mark.parametrize("variable", ["GCC_COLORS", "GCC_URLS", "GCC_EXTRA_DIAGNOSTIC_OUTPUT",
                                      "COLUMNS", "LD_LIBRARY_PATH"])
def test_environment_of_diagnostics_and_of_ld_is_keyed(daemon, tmp_root, variable):
    """They change what g++ or ld says (colours, links, fix-it output,
    width, libraries of libraries found or not): another value is a miss, the
    same value again a hit."""
    d = tmp_root / "env"
    write(d / "k.cpp", 'extern "C" int f() { int unused; return 1; }\n')
    args = ["k.cpp", *SHARED, "-Wall", "-fdiagnostics-color=always", "-o", "k.so"]
    for value, expected_hits in (("40", 0), ("80", 0), ("40", 1)):
        ok(cxx(args, d, launcher_env(daemon, tmp_root / "t", **{variable: value})))
        assert hits(daemon) == expected_hits, (variable, value)


def test_a_build_that_does_not_write_its_output_is_not_stored(daemon, tmp_root):
    """A compiler that exits 0 and leaves -o as it was (gas given only
    --version does): the file there is an earlier build's, not this one's."""
    d = tmp_root / "unwritten"
    wrapper = write(d / "cc", "#!/usr/bin/env python3\nimport os, sys\nargs = sys.argv[1:]\n"
                    "if '-MD' in args:  # the launcher's build: write elsewhere\n"
                    "    args[args.index('-o') + 1] += '.elsewhere'\n"
                    f"os.execv({GXX!r}, [{GXX!r}, *args])\n")
    wrapper.chmod(0o755)
    write(d / "other.cpp", 'extern "C" int other() { return 7; }\n')
    ok(gxx(["-c", "other.cpp", "-o", "k.o"], d))
    write(d / "k.cpp", 'extern "C" int f() { return 1; }\n')
    env = launcher_env(daemon, tmp_root / "t", PT2CACHE_CXX=str(wrapper), PT2CACHE_CXX_LOG="1")
    for _ in range(2):
        proc = ok(cxx(["-c", "k.cpp", "-o", "k.o"], d, env))
        assert "not stored: the build did not write its output" in logged(proc), logged(proc)
    assert hits(daemon) == 0


def test_an_output_that_is_a_symbolic_link_passes_through(daemon, tmp_root):
    """g++ writes through a dangling link and replaces a link to a file
    (the assembler unlinks it first); a hit replaced it either way. The
    launcher leaves the link to g++: the same files as g++'s, step by step."""
    env = launcher_env(daemon, tmp_root / "t", PT2CACHE_CXX_LOG="1")
    dirs = {}
    for who in ("launcher", "g++"):
        d = dirs[who] = tmp_root / who
        write(d / "k.cpp", 'extern "C" int f() { return 1; }\n')
        (d / "real").mkdir()
        os.symlink("real/k.o", d / "k.o")

    def state(d: Path):
        return ((d / "k.o").is_symlink(), sorted(p.name for p in (d / "real").iterdir()))

    for _ in range(2):
        proc = ok(cxx(["-c", "k.cpp", "-o", "k.o"], dirs["launcher"], env))
        assert "not cached: the output is a symbolic link" in logged(proc), logged(proc)
        ok(gxx(["-c", "k.cpp", "-o", "k.o"], dirs["g++"]))
        assert state(dirs["launcher"]) == state(dirs["g++"])
    assert counters(daemon).get("lookups", 0) == 0
