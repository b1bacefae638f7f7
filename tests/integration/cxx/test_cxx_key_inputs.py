"""pt2cache-cxx: inputs that change what g++ produces and that an earlier key
left out. Each test builds twice where a wrong hit would hand the second build
the first one's output, and checks it got what g++ makes (docs/cxx.md, "The
key")."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from cxx_helpers import (GXX, LAUNCHER, RETURN_V, counters, cxx, gxx, launcher_env, ok, run,
                         same_as_gxx, write)


def test_define_and_rpath_keep_their_directories(daemon, tmp_root):
    """Text that ends up in the output (a -D string, a RUNPATH) is keyed as
    given, not with the source or output directory rewritten."""
    env = launcher_env(daemon, tmp_root / "t")
    for name in ("A", "B"):
        d = tmp_root / name
        write(d / "k.cpp", 'extern "C" const char* where() { return DIR; }\n')
        ok(cxx([d / "k.cpp", "-c", f'-DDIR="{d}/data"', "-o", d / "k.o"], d, env))
        assert f"{d}/data".encode() in (d / "k.o").read_bytes()
        ok(cxx([d / "k.cpp", "-shared", "-fPIC", "-DDIR=0", f"-Wl,-rpath,{d}/lib", "-o",
                d / "k.so"], d, env))
        assert f"{d}/lib".encode() in (d / "k.so").read_bytes()
    assert counters(daemon).get("hits", 0) == 0


def test_header_the_source_names_outside_its_directory(daemon, tmp_root):
    """`#include "/abs/A/h.h"` or `"../A/h.h"` in a source copied to B reads
    A's header, not B's: B's build must not hit on A's."""
    env = launcher_env(daemon, tmp_root / "t")
    a, b = tmp_root / "A", tmp_root / "B"
    for include in (f"{a}/h.h", "../A/h.h"):
        for d in (a, b):
            write(d / "h.h", "#define V 1\n")
            write(d / "k.cpp", f'#include "{include}"\n' + RETURN_V)
        ok(cxx(["-c", a / "k.cpp", "-O2", "-o", a / "k.o"], a, env))
        write(a / "h.h", "#define V 2\n")
        args = ["-c", b / "k.cpp", "-O2", "-o", b / "k.o"]
        ok(cxx(args, b, env))
        same_as_gxx(args, b, b / "k.o")


def test_header_that_names_a_rewritten_directory(daemon, tmp_root):
    """The same through a header in the source's directory: A's build, whose
    header names A, is pinned to A (docs/cxx.md, "Directory pins"). B's does
    not hit on it; A's own directory does."""
    env = launcher_env(daemon, tmp_root / "t")
    a, b = tmp_root / "A", tmp_root / "B"
    for d in (a, b):
        write(d / "k.cpp", '#include "h.h"\n' + RETURN_V)
        write(d / "h.h", f'#include "{a}/v.h"\n')
        write(d / "v.h", "#define V 1\n")
    ok(cxx(["-c", a / "k.cpp", "-O2", "-o", a / "k.o"], a, env))
    write(a / "v.h", "#define V 2\n")
    args = ["-c", b / "k.cpp", "-O2", "-o", b / "k.o"]
    ok(cxx(args, b, env))
    same_as_gxx(args, b, b / "k.o")
    c = counters(daemon)
    assert (c.get("hits", 0), c.get("builds", 0)) == (0, 2), c
    # Back in A, A's pinned build (V 1) no longer matches its v.h. B's build
    # read the same files A's does now and names none of B's directories: it
    # is what g++ makes in A too, and A hits on it.
    args = ["-c", a / "k.cpp", "-O2", "-o", a / "k.o"]
    ok(cxx(args, a, env))
    same_as_gxx(args, a, a / "k.o")
    c = counters(daemon)
    assert (c.get("hits", 0), c.get("builds", 0)) == (1, 2), c
    # With v.h at V 1 again, A's own pinned build matches: a hit in A...
    write(a / "v.h", "#define V 1\n")
    ok(cxx(args, a, env))
    same_as_gxx(args, a, a / "k.o")
    # ...and not in B, where A's directory is not the source's.
    ok(cxx(["-c", b / "k.cpp", "-O2", "-o", b / "k.o"], b, env))
    same_as_gxx(["-c", b / "k.cpp", "-O2", "-o", b / "k.o"], b, b / "k.o")
    c = counters(daemon)
    assert (c.get("hits", 0), c.get("builds", 0)) == (2, 3), c


def test_file_macro_naming_the_source_directory_pins_the_build(daemon, tmp_root):
    """assert() expands __FILE__, the source's path: another directory's hit
    would carry it, so the build is pinned to its directory and hits only
    there. Debug information alone does not pin a build."""
    env = launcher_env(daemon, tmp_root / "t")
    for d in (tmp_root / "A", tmp_root / "B", tmp_root / "A"):
        write(d / "k.cpp", '#include <cassert>\nextern "C" void f(int x) { assert(x > 0); }\n')
        args = ["-c", d / "k.cpp", "-O2", "-o", d / "k.o"]
        ok(cxx(args, d, env))
        same_as_gxx(args, d, d / "k.o")
        ok(cxx(["-c", d / "k.cpp", "-O2", "-g1", "-DNDEBUG", "-o", d / "n.o"], d, env))
    # Stored: A's k.o and n.o, B's k.o; hits: B's n.o, A's k.o and n.o again.
    c = counters(daemon)
    assert (c.get("hits", 0), c.get("builds", 0)) == (3, 3), c


def test_file_macro_in_a_precompiled_header_pins_it(daemon, tmp_root):
    """__FILE__ expanded in a precompiled header names the header's
    directory: another directory's hit would hand over a .gch (and every
    object built on it) naming the first one. The header's preprocessed text
    pins it; one without __FILE__ and debug information only still hits in
    another directory."""
    env = launcher_env(daemon, tmp_root / "t")
    for d in (tmp_root / "A", tmp_root / "B", tmp_root / "A"):
        write(d / "f.h", 'inline const char* where() { return __FILE__; }\n')
        write(d / "p.h", "inline int plain() { return 1; }\n")
        for name in ("f", "p"):
            ok(cxx(["-x", "c++-header", d / f"{name}.h", "-O2", "-g1", "-o",
                    d / f"{name}.h.gch"], d, env))
        assert str(d / "f.h").encode() in (d / "f.h.gch").read_bytes()
    # Stored: A's f and p, B's f; hits: B's p, A's f and p again.
    c = counters(daemon)
    assert (c.get("hits", 0), c.get("builds", 0)) == (3, 3), c


def test_dotdot_after_a_symbolic_link(daemon, tmp_root):
    """"link/../h.h" is the header beside the link's target, not beside the
    link."""
    env = launcher_env(daemon, tmp_root / "t")
    w, there = tmp_root / "w", tmp_root / "elsewhere"
    (there / "d").mkdir(parents=True)
    w.mkdir()
    os.symlink(there / "d", w / "link")
    write(w / "h.h", "#define V 1\n")
    write(there / "h.h", "#define V 1\n")
    write(w / "k.cpp", '#include "link/../h.h"\n' + RETURN_V)
    args = ["-c", "k.cpp", "-O2", "-o", "k.o"]
    ok(cxx(args, w, env))
    write(there / "h.h", "#define V 2\n")
    ok(cxx(args, w, env))
    same_as_gxx(args, w, w / "k.o")


def test_relative_include_directory_from_another_working_directory(daemon, tmp_root):
    env = launcher_env(daemon, tmp_root / "t")
    src, out = tmp_root / "S", tmp_root / "O"
    write(src / "k.cpp", '#include "x.h"\n' + RETURN_V)
    out.mkdir()
    for n in (1, 2):
        write(tmp_root / f"W{n}" / "inc" / "x.h", f"#define V {n}\n")
    args = ["-c", src / "k.cpp", "-Iinc", "-O2", "-o", out / "k.o"]
    ok(cxx(args, tmp_root / "W1", env))
    ok(cxx(args, tmp_root / "W2", env))
    same_as_gxx(args, tmp_root / "W2", out / "k.o")


def test_ld_run_path_is_in_the_key(daemon, tmp_root):
    """ld copies LD_RUN_PATH into a shared object that has no -rpath."""
    env = launcher_env(daemon, tmp_root / "t")
    write(tmp_root / "k.cpp", RETURN_V.replace("V", "1"))
    args = ["k.cpp", "-shared", "-fPIC", "-o", "k.so"]
    ok(cxx(args, tmp_root, env))
    env["LD_RUN_PATH"] = "/opt/pt2cache-test"
    ok(cxx(args, tmp_root, env))
    assert b"/opt/pt2cache-test" in (tmp_root / "k.so").read_bytes()
    assert counters(daemon).get("hits", 0) == 0


def test_assembler_found_on_path_is_in_the_key(daemon, tmp_root):
    """g++ runs the `as` it finds on PATH: another one is another compiler."""
    env = launcher_env(daemon, tmp_root / "t")
    write(tmp_root / "k.cpp", RETURN_V.replace("V", "7"))
    args = ["-c", "k.cpp", "-O2", "-o", "k.o"]
    ok(cxx(args, tmp_root, env))
    real_as = subprocess.run(["sh", "-c", "command -v as"], capture_output=True, text=True,
                             check=True).stdout.strip()
    write(tmp_root / "bin" / "as", f'#!/bin/sh\nexec {real_as} --defsym EXTRA_SYM=42 "$@"\n')
    (tmp_root / "bin" / "as").chmod(0o755)
    env["PATH"] = f"{tmp_root / 'bin'}:{env['PATH']}"
    ok(cxx(args, tmp_root, env))
    assert b"EXTRA_SYM" in (tmp_root / "k.o").read_bytes()
    assert counters(daemon).get("hits", 0) == 0


def _relocated_gxx(root: Path) -> tuple[Path, Path]:
    """A copy of the g++ driver in root/bin, which looks for its programs in
    root/lib/gcc/<machine>/<version>/ first; returns it and that directory."""
    root.mkdir(parents=True)
    machine = gxx(["-dumpmachine"], root).stdout.decode().strip()
    version = gxx(["-dumpversion"], root).stdout.decode().strip()
    cc1plus = Path(gxx(["-print-prog-name=cc1plus"], root).stdout.decode().strip())
    libexec = root / "lib" / "gcc" / machine / version
    libexec.mkdir(parents=True)
    (root / "bin").mkdir(parents=True)
    driver = root / "bin" / "g++"
    driver.write_bytes(Path(os.path.realpath(GXX)).read_bytes())
    driver.chmod(0o755)
    for program in ("cc1", "collect2", "lto-wrapper", "liblto_plugin.so"):
        if (cc1plus.parent / program).exists():
            os.symlink(cc1plus.parent / program, libexec / program)
    return driver, libexec


def test_cc1plus_and_specs_behind_the_driver_are_in_the_key(daemon, tmp_root):
    driver, libexec = _relocated_gxx(tmp_root / "tc")
    real_cc1plus = gxx(["-print-prog-name=cc1plus"], tmp_root).stdout.decode().strip()
    wrapper = libexec / "cc1plus"

    def cc1plus(extra: str) -> None:
        wrapper.write_text(f'#!/bin/sh\nexec {real_cc1plus} {extra} "$@"\n')
        wrapper.chmod(0o755)

    cc1plus("")
    probe = subprocess.run([driver, "-print-prog-name=cc1plus"], capture_output=True, text=True)
    if probe.stdout.strip() != str(wrapper) and \
            os.path.realpath(probe.stdout.strip()) != os.path.realpath(wrapper):
        pytest.skip(f"this g++ does not relocate: {probe.stdout.strip()}")
    env = launcher_env(daemon, tmp_root / "t", PT2CACHE_CXX=driver)
    write(tmp_root / "k.cpp", "#ifndef V\n#define V 1\n#endif\n" + RETURN_V)
    args = ["-c", "k.cpp", "-O2", "-o", "k.o"]
    ok(cxx(args, tmp_root, env))
    # Another cc1plus behind the same driver.
    cc1plus("-DV=3")
    ok(cxx(args, tmp_root, env))
    # A specs file appears where the driver looks for one.
    cc1plus("")
    write(libexec / "specs", "*cc1plus:\n-DV=2\n\n")
    ok(cxx(args, tmp_root, env))
    assert counters(daemon).get("hits", 0) == 0
    ref = subprocess.run([driver, *args[:-1], "ref.o"], cwd=tmp_root, capture_output=True)
    assert ref.returncode == 0, ref.stderr
    assert (tmp_root / "k.o").read_bytes() == (tmp_root / "ref.o").read_bytes()


@pytest.mark.parametrize("extra", [
    ["-Wl,-L{lib}", "-lfoo"],
    ["-Xlinker", "{lib}/libfoo.so"],
    ["-L{lib}", "-Wl,-Bstatic", "-lfoo", "-Wl,-Bdynamic"],
    ["-L={lib}", "-lfoo"],
], ids=["wl-L", "xlinker-file", "bstatic", "sysroot-L"])
def test_linker_inputs_the_key_does_not_follow_pass_through(daemon, tmp_root, extra):
    lib = tmp_root / "lib"
    write(lib / "foo.cpp", "int foo() { return 1; }\n")
    ok(gxx(["-shared", "-fPIC", "foo.cpp", "-o", "libfoo.so"], lib))
    ok(gxx(["-c", "-fPIC", "foo.cpp", "-o", "foo.o"], lib))
    ok(subprocess.run(["ar", "rc", "libfoo.a", "foo.o"], cwd=lib, capture_output=True))
    write(tmp_root / "k.cpp", 'int foo();\nextern "C" int f() { return foo(); }\n')
    env = launcher_env(daemon, tmp_root / "t")
    args = ["k.cpp", "-shared", "-fPIC", *[a.format(lib=lib) for a in extra], "-o", "k.so"]
    ok(cxx(args, tmp_root, env))
    assert (tmp_root / "k.so").exists()
    assert counters(daemon).get("lookups", 0) == 0


def _can_unshare_mounts() -> bool:
    unshare = shutil.which("unshare")
    return unshare is not None and subprocess.run(
        [unshare, "-m", "--propagation", "private", "true"], capture_output=True,
        timeout=10).returncode == 0


@pytest.mark.skipif(not _can_unshare_mounts(), reason="unshare -m needs root (CI runs as root)")
def test_launcher_in_another_mount_namespace(daemon, tmp_root):
    """A launcher that sees other files under the same paths (a container
    sharing the socket): the daemon hashes nothing for it, and it gets what
    g++ makes there, not the build keyed on the daemon's view."""
    env = launcher_env(daemon, tmp_root / "t")
    w = tmp_root / "w"
    write(w / "k.cpp", '#include "h.h"\n' + RETURN_V)
    write(w / "inc" / "h.h", "#define V 1\n")
    write(w / "alt" / "h.h", "#define V 2\n")
    args = ["-c", w / "k.cpp", "-Iinc", "-O2", "-o", w / "k.o"]
    ok(cxx(args, w, env))
    inside = " ".join(shlex.quote(str(a)) for a in [LAUNCHER, *args])
    script = (f"mount --bind {shlex.quote(str(w / 'alt'))} {shlex.quote(str(w / 'inc'))} && "
              f"{inside} && {shlex.quote(GXX)} -E -P {shlex.quote(str(w / 'inc' / 'h.h'))} "
              f"-dM | grep -q 'define V 2'")
    ok(run(["unshare", "-m", "--propagation", "private", "sh", "-c", script], w, env))
    # What g++ makes with h.h at V 2, built here without the namespace.
    write(w / "inc" / "h.h", "#define V 2\n")
    ref = w / "ref.o"
    ok(gxx(["-c", w / "k.cpp", "-Iinc", "-O2", "-o", ref], w))
    assert (w / "k.o").read_bytes() == ref.read_bytes()
    assert "sees other files" in daemon.log()


def test_file_macro_in_a_wide_string_pins_the_build(daemon, tmp_root):
    """u"" __FILE__ (and L"", U"") stores the source's path as UTF-16 or
    UTF-32 code units: pinned as the narrow one is."""
    env = launcher_env(daemon, tmp_root / "t")
    for prefix, char in (("u", "char16_t"), ("U", "char32_t"), ("L", "wchar_t")):
        for d in (tmp_root / f"A{prefix}", tmp_root / f"B{prefix}"):
            write(d / "k.cpp", f'const {char}* f() {{ return {prefix}"" __FILE__; }}\n')
            args = ["-c", d / "k.cpp", "-O2", "-o", d / "k.o"]
            ok(cxx(args, d, env))
            same_as_gxx(args, d, d / "k.o")
    assert counters(daemon).get("hits", 0) == 0


def test_a_header_quoting_the_temp_directory_itself_does_not_pin(daemon, tmp_root):
    """<cstdio> defines P_tmpdir as "/tmp": a string that is the directory
    itself, through which no #include can open a file. A build whose TMPDIR
    is /tmp still hits where TMPDIR is elsewhere (the cache directory nested
    in it the same way); a header naming a file below it still pins."""
    def machine(tmpdir: Path, cache: Path) -> tuple:
        src = cache / "ab"
        write(src / "k.cpp", f'#include <cstdio>\n#include "h.h"\n{RETURN_V}')
        write(src / "h.h", "#define V 1\n")
        env = launcher_env(daemon, tmpdir, TORCHINDUCTOR_CACHE_DIR=cache)
        return ["-c", src / "k.cpp", "-O2", "-o", src / "k.o"], src, env

    # A: TMPDIR is /tmp itself (tmp_root is below it, and so is A's cache).
    a_args, a_src, a_env = machine(Path("/tmp"), tmp_root / "A" / "cache")
    ok(cxx(a_args, a_src, a_env))
    b_args, b_src, b_env = machine(tmp_root / "B", tmp_root / "B" / "cache")
    ok(cxx(b_args, b_src, b_env))
    same_as_gxx(b_args, b_src, b_src / "k.o")
    c = counters(daemon)
    assert (c.get("hits", 0), c.get("builds", 0)) == (1, 1), c
    # A header naming a file below /tmp pins the build to A's TMPDIR: in B,
    # the same path below B's TMPDIR holds what A's held, but g++ opens A's.
    rel = tmp_root.relative_to("/tmp") / "v" / "v.h"
    for tmpdir in (Path("/tmp"), tmp_root / "B"):
        write(tmpdir / rel, "#define V 1\n")
    for src in (a_src, b_src):
        write(src / "h.h", f'#include "/tmp/{rel}"\n')
    ok(cxx(a_args, a_src, a_env))
    write(Path("/tmp") / rel, "#define V 3\n")
    ok(cxx(b_args, b_src, b_env))
    same_as_gxx(b_args, b_src, b_src / "k.o")
    c = counters(daemon)
    assert (c.get("hits", 0), c.get("builds", 0)) == (1, 3), c
