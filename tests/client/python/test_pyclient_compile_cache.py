"""pt2cache.torch.install(compile_cache=True) / install_compile_cache()
against a stand-in torch (see test_pyclient_torch.py for why a stand-in).

The stand-in adds to that tree ``torch/_inductor/config.py`` with
``cpp.cxx = (None, os.environ.get("CXX", "g++"))`` and a
``torch/_inductor/cpp_builder.py`` that consumes it the way torch 2.15's
does (``get_cpp_compiler``: the entries in order, None skipped, each
shlex-split and probed with ``--version``; then one compile-and-link of a
source to a shared object, Inductor's usual build). The launcher is a
stand-in too (pt2cache-cxx is built on another branch): a script that
records its arguments and environment and runs the real g++, so each test
checks what the real launcher would receive, and the real compiler builds a
library that is loaded and called.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from test_pyclient_torch import MODERN_REMOTE_CACHE, PGO_CLASS, make_torch, run_python
from pt2cache import _launcher

CONFIG = '''
import os, sys

class cpp:
    cxx = (None, os.environ.get("CXX", "clang++" if sys.platform == "darwin" else "g++"))
'''

CPP_BUILDER = '''
import shlex, subprocess
from torch._inductor import config


def cpp_compiler_search(search):
    for cxx in search:
        if cxx is None:
            continue
        try:
            subprocess.check_output([*shlex.split(cxx), "--version"])
            return cxx
        except (subprocess.SubprocessError, FileNotFoundError):
            continue
    raise RuntimeError("InvalidCxxCompiler")


def get_cpp_compiler():
    cxx = config.cpp.cxx
    return cpp_compiler_search(tuple(cxx) if isinstance(cxx, (list, tuple)) else (cxx,))


def build(source, output):
    subprocess.check_call([*shlex.split(get_cpp_compiler()), source, "-O1", "-shared", "-fPIC",
                           "-o", output])
'''

# Records argv[1:] and the variables the launcher reads, then runs the real
# compiler: $PT2CACHE_CXX if set, else g++ found on PATH past this directory.
LAUNCHER = '''#!/bin/sh
printf '%s\\t%s\\t%s\\t%s\\n' "$(basename "$0"):{tag}" "${{PT2CACHE_SOCKET:-}}" \
  "${{PT2CACHE_CXX:-}}" "$*" >> "{log}"
exec "${{PT2CACHE_CXX:-{gxx}}}" "$@"
'''

# Another compiler Inductor may be configured with: records itself, runs g++.
COMPILER = '''#!/bin/sh
printf '%s\\t\\t\\t%s\\n' "$(basename "$0"):{tag}" "$*" >> "{log}"
exec "{gxx}" "$@"
'''

SOURCE = 'extern "C" int triple(int x) { return 3 * x; }\n'


@pytest.fixture
def torch_tree(tmp_root):
    base = make_torch(tmp_root, "2.15.0+standin", MODERN_REMOTE_CACHE % {"pgo": PGO_CLASS})
    inductor = base / "torch" / "_inductor"
    (inductor / "config.py").write_text(CONFIG)
    (inductor / "cpp_builder.py").write_text(CPP_BUILDER)
    return base


@pytest.fixture
def gxx():
    path = shutil.which("g++")
    if path is None:
        pytest.fail("g++ is not on PATH (tools/install-deps installs it)")
    return path


def make_launcher(directory: Path, log: Path, gxx: str, tag: str,
                  name: str = "pt2cache-cxx", template: str = LAUNCHER) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(template.format(tag=tag, log=log, gxx=gxx))
    path.chmod(0o755)
    return path


def calls(log: Path) -> list:
    if not log.exists():
        return []
    return [dict(zip(("who", "socket", "real", "args"), line.split("\t")))
            for line in log.read_text().splitlines()]


@pytest.fixture(autouse=True)
def no_compiler_settings(monkeypatch):
    """run_python starts from os.environ: none of the caller's settings."""
    for name in ("PT2CACHE_CXX_LAUNCHER", "PT2CACHE_CXX", "PT2CACHE_SOCKET", "CXX",
                 "TORCH_INDUCTOR_INSTALL_GXX"):
        monkeypatch.delenv(name, raising=False)


def env_with_path(*dirs: Path, **extra: str) -> dict:
    env = {"PATH": os.pathsep.join([*map(str, dirs), os.environ.get("PATH", os.defpath)])}
    env.update(extra)
    return env


BUILD = '''
    import json, os
    import pt2cache, pt2cache.torch as pt
    from torch._inductor import config, cpp_builder
    out = {{"before": list(config.cpp.cxx)}}
    {install}
    out["cxx"] = config.cpp.cxx if isinstance(config.cpp.cxx, str) else list(config.cpp.cxx)
    out["socket_env"] = os.environ.get("PT2CACHE_SOCKET")
    out["real_env"] = os.environ.get("PT2CACHE_CXX")
    cpp_builder.build({source!r}, {output!r})
    pt.uninstall()
    out["after_uninstall"] = list(config.cpp.cxx)
    out["socket_after_uninstall"] = os.environ.get("PT2CACHE_SOCKET")
    out["real_after_uninstall"] = os.environ.get("PT2CACHE_CXX")
    out["routed_after_uninstall"] = list(pt.installed())
    print(json.dumps(out))
'''


def build_with(torch_tree, tmp_root, install: str, env: dict, name="lib") -> tuple:
    source = tmp_root / f"{name}.cpp"
    source.write_text(SOURCE)
    output = tmp_root / f"{name}.so"
    out = run_python(BUILD.format(install=install, source=str(source), output=str(output)),
                     [torch_tree], env=env)
    return out, output


def triple(library: Path, x: int) -> int:
    return ctypes.CDLL(str(library)).triple(x)


def test_install_compile_cache_routes_inductor_builds_through_the_launcher(
        torch_tree, tmp_root, daemon, gxx):
    log = tmp_root / "calls.log"
    bindir = tmp_root / "bin"
    make_launcher(bindir, log, gxx, "path")
    out, library = build_with(
        torch_tree, tmp_root,
        f"out['routed'] = list(pt.install(pt2cache.Client({str(daemon.socket)!r}), "
        f"compile_cache=True))",
        env_with_path(bindir))
    assert out["routed"] == ["RemoteFxGraphCache", "RemoteAOTAutogradCache",
                             "RemoteAutotuneCache", "RemoteBundledAutotuneCache",
                             "RemoteDynamoPGOCache"]
    # Same value as CXX=pt2cache-cxx gives at import: the FX-graph key matches.
    assert out["before"] == [None, "g++"]
    assert out["cxx"] == [None, "pt2cache-cxx"]
    assert out["socket_env"] == str(daemon.socket)
    assert out["real_env"] is None, "g++ is the launcher's own default: nothing to export"
    seen = calls(log)
    assert [c["args"] for c in seen] == ["--version", f"{tmp_root}/lib.cpp -O1 -shared -fPIC "
                                         f"-o {library}"]
    # The child processes Inductor starts talk to the client's daemon.
    assert {c["socket"] for c in seen} == {str(daemon.socket)}
    assert triple(library, 14) == 42
    assert out["after_uninstall"] == [None, "g++"]
    assert out["socket_after_uninstall"] is None
    assert out["routed_after_uninstall"] == []


def test_launcher_precedence_argument_then_environment_then_path(torch_tree, tmp_root, gxx):
    log = tmp_root / "calls.log"
    on_path = make_launcher(tmp_root / "bin", log, gxx, "path")
    from_env = make_launcher(tmp_root / "env", log, gxx, "env")
    explicit = make_launcher(tmp_root / "arg", log, gxx, "arg")
    sock = str(tmp_root / "some.sock")
    cases = [
        (f"pt.install_compile_cache(launcher={str(explicit)!r})", "arg", str(explicit)),
        ("pt.install_compile_cache()", "env", str(from_env)),
    ]
    for install, tag, cxx in cases:
        log.unlink(missing_ok=True)
        out, library = build_with(
            torch_tree, tmp_root, install,
            env_with_path(on_path.parent, PT2CACHE_CXX_LAUNCHER=str(from_env),
                          PT2CACHE_SOCKET=sock), name=tag)
        # Not the launcher on PATH: the absolute path goes into cpp.cxx.
        assert out["cxx"] == [None, cxx]
        assert {c["who"] for c in calls(log)} == {f"pt2cache-cxx:{tag}"}
        assert {c["socket"] for c in calls(log)} == {sock}, "the default client's socket"
        assert triple(library, 5) == 15
    log.unlink()
    out, library = build_with(torch_tree, tmp_root, "pt.install_compile_cache()",
                              env_with_path(on_path.parent, PT2CACHE_SOCKET=sock), name="p")
    assert out["cxx"] == [None, "pt2cache-cxx"]
    assert {c["who"] for c in calls(log)} == {"pt2cache-cxx:path"}


MISSING = '''
    import json, os
    import pt2cache.torch as pt
    from torch._inductor import config, remote_cache as rc
    try:
        pt.install({args})
        raised = None
    except RuntimeError as e:
        raised = [type(e).__name__, str(e)]
    print(json.dumps({{"raised": raised, "cxx": list(config.cpp.cxx),
                      "routed": list(pt.installed()),
                      "override": rc.RemoteFxGraphCache.backend_override_cls is not None,
                      "socket": os.environ.get("PT2CACHE_SOCKET")}}))
'''


def test_a_missing_launcher_is_refused_clearly_and_changes_nothing(torch_tree, tmp_root):
    empty = tmp_root / "empty"
    empty.mkdir()
    env = {"PATH": str(empty)}  # nothing on PATH, so no pt2cache-cxx either
    out = run_python(MISSING.format(args="compile_cache=True"), [torch_tree], env=env)
    assert out["raised"][0] == "LauncherNotFound"
    message = out["raised"][1]
    assert "pt2cache-cxx" in message and "PT2CACHE_CXX_LAUNCHER" in message
    assert "PATH" in message
    assert out["cxx"] == [None, "g++"] and out["routed"] == [] and not out["override"]
    assert out["socket"] is None

    not_executable = tmp_root / "pt2cache-cxx"
    not_executable.write_text("#!/bin/sh\n")
    not_executable.chmod(0o644)
    for args, origin in ((f"compile_cache=True, launcher={str(not_executable)!r}", "launcher="),
                         ("compile_cache=True", "$PT2CACHE_CXX_LAUNCHER=")):
        env["PT2CACHE_CXX_LAUNCHER"] = str(not_executable)
        out = run_python(MISSING.format(args=args), [torch_tree], env=env)
        assert out["raised"] == [
            "LauncherNotFound", f"the compiler launcher given as {origin}"
            f"{str(not_executable)!r} is not an executable file"]
        assert out["cxx"] == [None, "g++"] and out["routed"] == []


def test_without_compile_cache_install_leaves_the_compiler_alone(torch_tree, tmp_root, daemon,
                                                                 gxx):
    log = tmp_root / "calls.log"
    bindir = tmp_root / "bin"
    make_launcher(bindir, log, gxx, "path")
    out, library = build_with(
        torch_tree, tmp_root,
        f"out['routed'] = list(pt.install(pt2cache.Client({str(daemon.socket)!r})))",
        env_with_path(bindir))
    assert len(out["routed"]) == 5
    assert out["cxx"] == [None, "g++"]
    assert out["socket_env"] is None
    assert calls(log) == [], "the launcher must not run"
    assert triple(library, 2) == 6


def test_another_configured_compiler_becomes_the_launchers_real_compiler(
        torch_tree, tmp_root, gxx):
    log = tmp_root / "calls.log"
    bindir = tmp_root / "bin"
    make_launcher(bindir, log, gxx, "path")
    # CXX names another compiler: a wrapper that records itself and runs g++.
    other = make_launcher(tmp_root / "other", log, gxx, "real", name="my-g++",
                          template=COMPILER)
    env = env_with_path(bindir, other.parent, CXX="my-g++", PT2CACHE_SOCKET="/x.sock")
    out, library = build_with(torch_tree, tmp_root, "pt.install_compile_cache()", env)
    assert out["before"] == [None, "my-g++"]
    assert out["cxx"] == [None, "pt2cache-cxx"]
    assert out["real_env"] == str(other)
    whos = [c["who"] for c in calls(log)]
    # --version and the build each: the launcher, then the compiler it runs.
    assert whos == ["pt2cache-cxx:path", "my-g++:real"] * 2
    assert out["real_after_uninstall"] is None
    assert triple(library, 7) == 21

    # A PT2CACHE_CXX the user set is theirs: left as it is.
    log.unlink()
    env["PT2CACHE_CXX"] = gxx
    out, _ = build_with(torch_tree, tmp_root, "pt.install_compile_cache()", env, name="mine")
    assert out["real_env"] == gxx and out["real_after_uninstall"] == gxx
    assert [c["who"] for c in calls(log)] == ["pt2cache-cxx:path"] * 2


def test_cxx_already_the_launcher_is_not_made_its_own_real_compiler(torch_tree, tmp_root, gxx):
    """CXX=pt2cache-cxx (the environment-only way) plus install(): no loop."""
    log = tmp_root / "calls.log"
    bindir = tmp_root / "bin"
    launcher = make_launcher(bindir, log, gxx, "path")
    for cxx in ("pt2cache-cxx", str(launcher)):
        out, library = build_with(torch_tree, tmp_root, "pt.install_compile_cache()",
                                  env_with_path(bindir, CXX=cxx, PT2CACHE_SOCKET="/x.sock"),
                                  name="loop")
        assert out["before"] == [None, cxx]
        assert out["cxx"] == [None, "pt2cache-cxx"]
        assert out["real_env"] is None
        assert triple(library, 1) == 3


def test_cxx_value_shapes():
    assert _launcher.with_compiler((None, "g++"), "L") == (None, "L")
    assert _launcher.with_compiler(("clang++", "g++"), "L") == ("clang++", "L")
    assert _launcher.with_compiler((None,), "L") == (None, "L")
    assert _launcher.with_compiler(["g++"], "L") == ["L"]
    assert _launcher.with_compiler("g++", "L") == "L"
    assert _launcher.last_compiler((None, "x")) == "x"
    assert _launcher.last_compiler("y") == "y"
    assert _launcher.last_compiler((None,)) is None
    assert _launcher.last_compiler(42) is None


def test_real_compiler_for(tmp_root):
    d = tmp_root / "bin"
    d.mkdir()
    for name in ("pt2cache-cxx", "clang++"):
        (d / name).write_text("#!/bin/sh\n")
        (d / name).chmod(stat.S_IRWXU)
    (d / "g++").symlink_to(d / "pt2cache-cxx")  # a masquerade directory
    launcher = str(d / "pt2cache-cxx")
    env = {"PATH": str(d)}
    assert _launcher.real_compiler_for((None, "clang++"), launcher, env) == str(d / "clang++")
    assert _launcher.real_compiler_for((None, "g++"), launcher, env) is None
    assert _launcher.real_compiler_for((None, "pt2cache-cxx"), launcher, env) is None
    assert _launcher.real_compiler_for((None, "ccache g++"), launcher, env) is None
    assert _launcher.real_compiler_for((None, "absent"), launcher, env) is None
    assert _launcher.real_compiler_for(
        (None, "clang++"), launcher, {**env, "PT2CACHE_CXX": "/usr/bin/g++"}) is None
    # A masquerade symlink named like a compiler that is really the launcher.
    (d / "c++").symlink_to(d / "pt2cache-cxx")
    assert _launcher.real_compiler_for("c++", launcher, env) is None


def test_importing_the_compile_cache_parts_does_not_import_torch():
    out = run_python('''
        import json, sys
        sys.modules["torch"] = None
        import pt2cache._launcher, pt2cache.torch
        print(json.dumps({"ok": hasattr(pt2cache.torch, "install_compile_cache")}))
    ''', [])
    assert out == {"ok": True}


def test_install_compile_cache_without_torch_is_refused(tmp_root, gxx):
    log = tmp_root / "calls.log"
    bindir = tmp_root / "bin"
    make_launcher(bindir, log, gxx, "path")
    out = run_python('''
        import json, sys
        sys.modules["torch"] = None
        import pt2cache.torch as pt
        try:
            pt.install_compile_cache()
            print(json.dumps({"raised": None}))
        except RuntimeError as e:
            print(json.dumps({"raised": str(e)}))
    ''', [], env=env_with_path(bindir))
    assert out["raised"].startswith("pt2cache.torch.install_compile_cache(): torch is not "
                                    "installed")
