"""Finding pt2cache-cxx, the C++ compiler launcher, for
:func:`pt2cache.torch.install_compile_cache` (standard library only)."""

from __future__ import annotations

import os
import shutil
from typing import Mapping, Optional, Sequence, Tuple, Union

LAUNCHER = "pt2cache-cxx"
LAUNCHER_ENV = "PT2CACHE_CXX_LAUNCHER"
REAL_CXX_ENV = "PT2CACHE_CXX"
SOCKET_ENV = "PT2CACHE_SOCKET"


class LauncherNotFound(RuntimeError):
    """No usable pt2cache-cxx: the message says where it was looked for."""


def find_launcher(explicit: Optional[Union[str, "os.PathLike[str]"]] = None,
                  environ: Optional[Mapping[str, str]] = None) -> Tuple[str, bool]:
    """The launcher's absolute path and whether a PATH lookup of the bare
    name ``pt2cache-cxx`` finds that same file.

    Looked for, in this order: ``explicit``; ``$PT2CACHE_CXX_LAUNCHER``;
    ``pt2cache-cxx`` on ``$PATH``. A path given explicitly or by the
    environment must be an executable file (it is not searched for further
    when it is not). Raises :class:`LauncherNotFound`.
    """
    env = os.environ if environ is None else environ
    path_var = env.get("PATH", os.defpath)
    on_path = shutil.which(LAUNCHER, path=path_var)
    if explicit is not None and os.fspath(explicit) != "":
        origin, given = "launcher=", os.fspath(explicit)
    elif env.get(LAUNCHER_ENV):
        origin, given = f"${LAUNCHER_ENV}=", env[LAUNCHER_ENV]
    else:
        if on_path is None:
            raise LauncherNotFound(
                f"the compiler launcher {LAUNCHER} was not found: no launcher= argument, "
                f"${LAUNCHER_ENV} is unset and {LAUNCHER} is not on PATH. Install pt2cache's "
                f"C++ tools (it is built to build/client/cxx/{LAUNCHER}) or say where it is.")
        return os.path.abspath(on_path), True
    # A bare name is looked up on PATH, as a shell would.
    resolved = shutil.which(given, path=path_var) if os.sep not in given else given
    if resolved is None or not os.path.isfile(resolved) or not os.access(resolved, os.X_OK):
        raise LauncherNotFound(
            f"the compiler launcher given as {origin}{given!r} is not an executable file")
    resolved = os.path.abspath(resolved)
    return resolved, on_path is not None and _same_file(on_path, resolved)


def real_compiler_for(previous: object, launcher: str,
                      environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """What ``$PT2CACHE_CXX`` should be set to so that the launcher runs the
    compiler Inductor was configured with before (``previous``: the old
    ``cpp.cxx``), or None where nothing needs setting: ``$PT2CACHE_CXX`` is
    already set, the old setting is the launcher's own default (``g++``), is
    not a single program (``"ccache g++"``), or is the launcher itself."""
    env = os.environ if environ is None else environ
    if env.get(REAL_CXX_ENV):
        return None
    name = last_compiler(previous)
    if name is None or name == "g++" or len(name.split()) != 1:
        return None
    found = shutil.which(name, path=env.get("PATH", os.defpath))
    if found is None or _same_file(found, launcher):
        return None
    return os.path.abspath(found)


def last_compiler(value: object) -> Optional[str]:
    """The compiler ``cpp.cxx`` names: its last string entry (Inductor tries
    the entries in order; ``None`` entries mean "conda's gcc if
    TORCH_INDUCTOR_INSTALL_GXX is set")."""
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)):
        names = [v for v in value if isinstance(v, str)]
        return names[-1] if names else None
    return None


def with_compiler(value: object, compiler: str) -> object:
    """``cpp.cxx`` with its compiler replaced, keeping its shape: Inductor's
    default ``(None, "g++")`` becomes ``(None, compiler)``, the value that
    ``CXX=compiler`` gives at import (so both ways give the same FX-graph
    cache key, which includes ``cpp.cxx``); a string stays a string."""
    if isinstance(value, (list, tuple)):
        entries: Sequence[object] = list(value)
        strings = [i for i, v in enumerate(entries) if isinstance(v, str)]
        if strings:
            out = list(entries)
            out[strings[-1]] = compiler
            return type(value)(out)
        return type(value)([*entries, compiler])
    return compiler


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False
