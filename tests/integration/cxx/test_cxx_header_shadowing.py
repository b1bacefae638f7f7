"""pt2cache-cxx: a header created where the compiler looks before the one a
build used (docs/cxx.md, "Inputs": shadowing candidates). Each test builds,
creates the shadowing file, builds again, and checks the second output is
what g++ makes now: a hit on the first build would be a false hit."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cxx_helpers import (RETURN_V, clean_env, counters, cxx, gxx, launcher_env, ok, same_as_gxx,
                         write)


def _build_twice(daemon, root: Path, args: list, shadow, text: str = "#define V 2\n",
                 **environment: str):
    """Builds `args` in `root` (a miss, stored), builds it again (a hit),
    creates `shadow` (or calls it), builds once more and compares with g++
    (both with `environment` added)."""
    env = launcher_env(daemon, root / "t", **environment)
    ok(cxx(args, root, env))
    ok(cxx(args, root, env))
    before = counters(daemon)
    assert before.get("hits", 0) >= 1, before  # the candidates do not cost the hit
    if callable(shadow):
        shadow()
    else:
        write(shadow, text)
    ok(cxx(args, root, env))
    same_as_gxx(args, root, root / "k.o", clean_env(**environment))
    after = counters(daemon)
    assert after.get("hits", 0) == before.get("hits", 0), after


def test_quoted_include_shadowed_in_the_source_directory(daemon, tmp_root):
    """`#include "h.h"` found through -I: a later h.h beside the source wins."""
    root = tmp_root / "q"
    write(root / "inc/h.h", "#define V 1\n")
    write(root / "k.cpp", '#include "h.h"\n' + RETURN_V)
    _build_twice(daemon, root, ["-c", root / "k.cpp", "-Iinc", "-o", root / "k.o"],
                 root / "h.h")


def test_angle_include_shadowed_by_an_earlier_directory(daemon, tmp_root):
    """`#include <h.h>` found in the second -I directory: one created in the
    first wins, and so does one in a first -I directory that did not exist."""
    for first_exists in (True, False):
        root = tmp_root / f"a{int(first_exists)}"
        if first_exists:
            (root / "first").mkdir(parents=True)
        write(root / "second/h.h", "#define V 1\n")
        write(root / "k.cpp", "#include <h.h>\n" + RETURN_V)
        _build_twice(daemon, root,
                     ["-c", root / "k.cpp", "-Ifirst", "-Isecond", "-o", root / "k.o"],
                     root / "first/h.h", f"#define V {2 + int(first_exists)}\n")


def test_header_in_a_subdirectory_shadowed(daemon, tmp_root):
    """`#include <lib/h.h>`: the first directory had no `lib` at all."""
    root = tmp_root / "subdir"
    (root / "first").mkdir(parents=True)
    write(root / "second/lib/h.h", "#define V 1\n")
    write(root / "k.cpp", "#include <lib/h.h>\n" + RETURN_V)
    _build_twice(daemon, root,
                 ["-c", root / "k.cpp", "-I", "first", "-isystem", "second", "-o", root / "k.o"],
                 root / "first/lib/h.h")


def test_quoted_include_from_a_header_shadowed_beside_it(daemon, tmp_root):
    """A header's own directory comes first for its quoted includes."""
    root = tmp_root / "h"
    write(root / "one/a.h", '#include "b.h"\n')
    write(root / "two/b.h", "#define V 1\n")
    write(root / "k.cpp", "#include <a.h>\n" + RETURN_V)
    _build_twice(daemon, root,
                 ["-c", root / "k.cpp", "-Ione", "-Itwo", "-o", root / "k.o"],
                 root / "one/b.h")


def test_system_header_shadowed_by_an_include_directory(daemon, tmp_root):
    """<climits> comes from the compiler's own directories, after every -I."""
    root = tmp_root / "y"
    (root / "inc").mkdir(parents=True)
    write(root / "k.cpp", "#include <climits>\n#define V (CHAR_BIT - 7)\n" + RETURN_V)
    _build_twice(daemon, root, ["-c", root / "k.cpp", "-Iinc", "-o", root / "k.o"],
                 root / "inc/climits", "#define CHAR_BIT 9\n")


def test_has_include_of_a_missing_header(daemon, tmp_root):
    """`__has_include("opt.h")` was false: a build after opt.h appears is
    another build."""
    root = tmp_root / "x"
    write(root / "k.cpp", '#if __has_include("opt.h")\n#include "opt.h"\n#else\n'
                          "#define V 1\n#endif\n" + RETURN_V)
    _build_twice(daemon, root, ["-c", root / "k.cpp", "-o", root / "k.o"], root / "opt.h")


def test_forced_include_shadowed_in_the_working_directory(daemon, tmp_root):
    """`-include h.h` is looked for in the working directory first, then
    along the quoted chain."""
    root = tmp_root / "f"
    write(root / "inc/h.h", "#define V 1\n")
    write(root / "k.cpp", RETURN_V)
    _build_twice(daemon, root,
                 ["-c", root / "k.cpp", "-Iinc", "-include", "h.h", "-o", root / "k.o"],
                 root / "h.h")


def test_include_next_shadowed_between(daemon, tmp_root):
    """one/h.h's `#include_next <h.h>` took three/h.h: a two/h.h created
    later is the one it takes then."""
    root = tmp_root / "n"
    write(root / "one/h.h", "#include_next <h.h>\n")
    (root / "two").mkdir(parents=True)
    write(root / "three/h.h", "#define V 1\n")
    write(root / "k.cpp", "#include <h.h>\n" + RETURN_V)
    _build_twice(daemon, root,
                 ["-c", root / "k.cpp", "-Ione", "-Itwo", "-Ithree", "-o", root / "k.o"],
                 root / "two/h.h")


def test_include_named_by_a_macro_shadowed(daemon, tmp_root):
    """`#include HEADER`: the name is not in the text, the dependency is."""
    root = tmp_root / "m"
    (root / "first").mkdir(parents=True)
    write(root / "second/h.h", "#define V 1\n")
    write(root / "k.cpp", "#define HEADER <h.h>\n#include HEADER\n" + RETURN_V)
    _build_twice(daemon, root,
                 ["-c", root / "k.cpp", "-Ifirst", "-Isecond", "-o", root / "k.o"],
                 root / "first/h.h")


def test_skipped_include_is_not_a_candidate(daemon, tmp_root):
    """A header in a branch the preprocessor skipped cannot change the
    build: creating one where it would be found keeps the hit (and it is
    right: g++ builds the same)."""
    root = tmp_root / "k"
    (root / "first").mkdir(parents=True)
    write(root / "second/h.h", "#define V 1\n")
    write(root / "k.cpp", "#include <h.h>\n#if 0\n#include <other.h>\n#include <h.h>\n#endif\n"
                          + RETURN_V)
    args = ["-c", root / "k.cpp", "-Ifirst", "-Isecond", "-o", root / "k.o"]
    env = launcher_env(daemon, root / "t")
    ok(cxx(args, root, env))
    write(root / "first/other.h", "#error never read\n")
    ok(cxx(args, root, env))
    same_as_gxx(args, root, root / "k.o")
    c = counters(daemon)
    assert (c.get("hits", 0), c.get("builds", 0)) == (1, 1), c


def _pch(header: Path, gch: Path, cwd: Path) -> None:
    ok(gxx(["-x", "c++-header", header, "-o", gch], cwd))


def test_precompiled_header_in_an_earlier_directory(daemon, tmp_root):
    """g++ takes first/h.h.gch before second/h.h, even with no first/h.h."""
    root = tmp_root / "g"
    (root / "first").mkdir(parents=True)
    write(root / "second/h.h", "#define V 1\n")
    write(root / "k.cpp", '#include "h.h"\n' + RETURN_V)

    def precompile():
        _pch(write(root / "first/h.h", "#define V 2\n"), root / "first/h.h.gch", root)
        (root / "first/h.h").unlink()

    _build_twice(daemon, root, ["-c", root / "k.cpp", "-Ifirst", "-Isecond", "-o", root / "k.o"],
                 precompile)


def test_precompiled_header_taken_through_an_include_is_keyed(daemon, tmp_root):
    """A .gch built without dependency output leaves none in the build's:
    replacing it must still change the key."""
    root = tmp_root / "p"
    write(root / "src/p.h", "#define V 1\n")
    (root / "inc").mkdir(parents=True)
    _pch(root / "src/p.h", root / "inc/p.h.gch", root)
    write(root / "inc/p.h", "#define V 1\n")
    write(root / "k.cpp", '#include "p.h"\n' + RETURN_V)
    _build_twice(daemon, root, ["-c", root / "k.cpp", "-Iinc", "-o", root / "k.o"],
                 lambda: _pch(write(root / "src/p.h", "#define V 2\n"), root / "inc/p.h.gch",
                              root))


def test_imacros_found_in_the_working_directory_later(daemon, tmp_root):
    root = tmp_root / "im"
    write(root / "inc/m.h", "#define V 1\n")
    write(root / "k.cpp", RETURN_V)
    _build_twice(daemon, root,
                 ["-c", root / "k.cpp", "-imacros", "m.h", "-Iinc", "-o", root / "k.o"],
                 root / "m.h")


@pytest.mark.parametrize("named_by", ["-I", "CPATH"])
def test_search_directory_that_was_a_file(daemon, tmp_root, named_by):
    """g++ drops a search directory that is a file (`-Ia`, or a CPATH
    entry); it searches it once it is a directory."""
    root = tmp_root / f"f2{named_by}"
    write(root / "a", "")
    write(root / "c/h.h", "#define V 1\n")
    write(root / "k.cpp", "#include <h.h>\n" + RETURN_V)

    def replace():
        (root / "a").unlink()
        write(root / "a/h.h", "#define V 2\n")

    args = ["-c", root / "k.cpp", "-Ic", "-o", root / "k.o"]
    if named_by == "-I":
        _build_twice(daemon, root, ["-Ia", *args], replace)
    else:
        _build_twice(daemon, root, args, replace, CPATH=str(root / "a"))


def test_duplicate_search_directory_pointed_elsewhere(daemon, tmp_root):
    """-Ia -Ib with a and b links to one directory: g++ drops b as a
    duplicate; once b points elsewhere it searches it."""
    root = tmp_root / "dup"
    (root / "r").mkdir(parents=True)
    write(root / "c/h.h", "#define V 1\n")
    write(root / "r2/h.h", "#define V 2\n")
    os.symlink("r", root / "a")
    os.symlink("r", root / "b")
    write(root / "k.cpp", "#include <h.h>\n" + RETURN_V)

    def repoint():
        (root / "b").unlink()
        os.symlink("r2", root / "b")

    _build_twice(daemon, root, ["-c", root / "k.cpp", "-Ia", "-Ib", "-Ic", "-o", root / "k.o"],
                 repoint)


def test_system_header_named_by_a_macro_through_dotdot(daemon, tmp_root):
    """g++ shortens a system header's path in its dependency output
    (x/../sys/h.h is written sys/h.h): matched by its real path."""
    root = tmp_root / "dd"
    (root / "earlier").mkdir(parents=True)
    (root / "x").mkdir()
    write(root / "sys/h.h", "#define V 1\n")
    write(root / "k.cpp", "#define HDR <h.h>\n#include HDR\n" + RETURN_V)
    _build_twice(daemon, root,
                 ["-c", root / "k.cpp", "-Iearlier", "-isystem", f"{root}/x/../sys", "-o",
                  root / "k.o"],
                 root / "earlier/h.h")


def test_symbolic_link_to_a_header_pointed_elsewhere(daemon, tmp_root):
    root = tmp_root / "sl"
    write(root / "r1/h.h", "#define V 1\n")
    write(root / "r2/h.h", "#define V 2\n")
    (root / "sys").mkdir()
    os.symlink(root / "r1/h.h", root / "sys/h.h")
    write(root / "k.cpp", "#include <h.h>\n" + RETURN_V)

    def repoint():
        (root / "sys/h.h").unlink()
        os.symlink(root / "r2/h.h", root / "sys/h.h")

    _build_twice(daemon, root, ["-c", root / "k.cpp", "-isystem", root / "sys", "-o", root / "k.o"],
                 repoint)


def test_include_spelt_unusually(daemon, tmp_root):
    """Comments, line splices and the digraph between `#` and the name."""
    spellings = ['#include /**/ "h.h"', '#/**/include "h.h"', '%:include "h.h"',
                 '#include \\\n"h.h"', '# \\\ninclude "h.h"', '#include "h\\\n.h"']
    for i, spelling in enumerate(spellings):
        root = tmp_root / f"sp{i}"
        write(root / "inc/h.h", f"#define V {10 + i}\n")
        write(root / "k.cpp", spelling + "\n" + RETURN_V)
        _build_twice(daemon, root, ["-c", root / "k.cpp", "-Iinc", "-o", root / "k.o"],
                     root / "h.h", f"#define V {20 + i}\n")


_HAS_INCLUDE_SPELLINGS = [
    "#define HAS(x) __has_include(x)\n#if HAS(<opt.h>)",  # fmt's FMT_HAS_INCLUDE
    "#define OPT <opt.h>\n#if __has_include(OPT)",
    '#define HAS_INC __has_include\n#if HAS_INC("opt.h")',
    '#define HAS(a, x) __has_include(x)\n#if HAS(1, "opt.h")',
    '#define HAVE_HDR(x) __has_include(x)\n#define CFG "opt.h"\n#if HAVE_HDR(CFG)',
]


@pytest.mark.parametrize("spelling", range(len(_HAS_INCLUDE_SPELLINGS)))
def test_has_include_through_macros(daemon, tmp_root, spelling):
    """__has_include through a wrapper, an alias, a later argument, a macro
    holding the name."""
    root = tmp_root / f"hi{spelling}"
    (root / "inc").mkdir(parents=True)
    write(root / "k.cpp", _HAS_INCLUDE_SPELLINGS[spelling] + "\n#include <opt.h>\n#else\n"
                          "#define V 1\n#endif\n" + RETURN_V)
    _build_twice(daemon, root, ["-c", root / "k.cpp", "-Iinc", "-o", root / "k.o"],
                 root / "inc/opt.h", "#define V 2\n")


def test_include_found_through_unusual_text(daemon, tmp_root):
    """A byte order mark, lone CR line ends, a form feed, a comment over two
    lines inside the directive, a splice with blanks after the backslash, a
    raw string holding `"` and `/*`, #import of a macro: each hid the name."""
    cases = [b'\xef\xbb\xbf#include "h.h"\n',
             b'#include <cstddef>\r#include "h.h"\r',
             b'\f#include "h.h"\n',
             b'#include /* a\n b */ "h.h"\n',
             b'#define CFG \\ \n  "h.h"\n#include CFG\n',
             b'const char* s = R"("src/*.cpp")";\n#define CFG "h.h"\n#include CFG\n']
    for i, text in enumerate(cases):
        root = tmp_root / f"u{i}"
        write(root / "inc/h.h", f"#define V {50 + i}\n")
        root.joinpath("k.cpp").write_bytes(text + RETURN_V.encode())
        _build_twice(daemon, root, ["-c", root / "k.cpp", "-Iinc", "-o", root / "k.o"],
                     root / "h.h", f"#define V {60 + i}\n")


def test_include_named_by_a_command_line_macro(daemon, tmp_root):
    """`-DCFG="h.h"` with `#include CFG` (mbedTLS's configuration file)."""
    root = tmp_root / "cl"
    write(root / "inc/h.h", "#define V 1\n")
    write(root / "k.cpp", "#include CFG\n" + RETURN_V)
    _build_twice(daemon, root, ["-c", root / "k.cpp", "-Iinc", '-DCFG="h.h"', "-o", root / "k.o"],
                 root / "h.h")


def test_precompiled_header_directory_is_not_stored(daemon, tmp_root):
    """GCC picks a file in a .gch directory: its content is not keyed, so
    such a build is not stored (docs/cxx.md)."""
    root = tmp_root / "gd"
    write(root / "inc/h.h", "#define V 1\n")
    (root / "inc/h.h.gch").mkdir()
    _pch(root / "inc/h.h", root / "inc/h.h.gch/a.gch", root)
    write(root / "k.cpp", '#include "h.h"\n' + RETURN_V)
    env = launcher_env(daemon, root / "t")
    args = ["-c", root / "k.cpp", "-Iinc", "-o", root / "k.o"]
    ok(cxx(args, root, env))
    ok(cxx(args, root, env))
    c = counters(daemon)
    assert (c.get("hits", 0), c.get("misses", 0), c.get("builds", 0)) == (0, 2, 0), c


def test_compiler_directory_that_was_a_file(daemon, tmp_root):
    """A directory of the compiler's own list (here the sysroot's multiarch
    usr/include/x86_64-linux-gnu) that is a file is dropped with a warning
    only: the probe reads it."""
    root = tmp_root / "sr"
    sysroot = root / "sysroot"
    multiarch = sysroot / "usr/include" / gxx(["-print-multiarch"], tmp_root).stdout.decode().strip()
    write(multiarch, "")
    write(sysroot / "usr/include/h.h", "#define V 1\n")
    write(root / "k.cpp", "#include <h.h>\n" + RETURN_V)

    def replace():
        multiarch.unlink()
        write(multiarch / "h.h", "#define V 2\n")

    _build_twice(daemon, root, ["-c", root / "k.cpp", f"--sysroot={sysroot}", "-o", root / "k.o"],
                 replace)


@pytest.mark.parametrize("nested", ["output", "tmpdir"])
def test_directory_nested_in_the_source_directory(daemon, tmp_root, nested):
    """A's output directory (or TMPDIR) is A/b, inside A: A/b/h.h, which the
    source reaches as "b/h.h", is rewritten by the inner directory. In B it
    is elsewhere, so that placeholder names another file: B must not hit."""
    root = tmp_root / f"nest-{nested}"
    for name, value in (("A", 1), ("B", 2)):
        write(root / name / "k.cpp", '#include "b/h.h"\n' + RETURN_V)
        write(root / name / "b/h.h", f"#define V {value}\n")
    write(root / "elsewhere/h.h", "#define V 1\n")
    outputs = {"A": root / "A/b/k.o", "B": root / "elsewhere/k.o"} if nested == "output" else \
        {"A": root / "A/k.o", "B": root / "B/k.o"}
    tmpdirs = {"A": root / "A/b", "B": root / "elsewhere"}
    for name in ("A", "B"):
        env = launcher_env(daemon, **({"TMPDIR": str(tmpdirs[name])} if nested == "tmpdir" else {}))
        args = ["-c", root / name / "k.cpp", "-O2", "-o", outputs[name]]
        ok(cxx(args, root / name, env))
        same_as_gxx(args, root / name, outputs[name])
    c = counters(daemon)
    assert (c.get("hits", 0), c.get("builds", 0)) == (0, 2), c
