"""Route PyTorch Inductor's remote caches through pt2cached's native protocol.

::

    import pt2cache.torch
    pt2cache.torch.install()          # before the first torch.compile

:func:`install` sets ``backend_override_cls`` on Inductor's remote cache
classes (``torch/_inductor/remote_cache.py``: ``RemoteFxGraphCache``,
``RemoteAOTAutogradCache``, ``RemoteAutotuneCache``,
``RemoteBundledAutotuneCache``, ``RemoteDynamoPGOCache``). ``RemoteCache``
checks that class attribute when a cache is created and, when set, uses a
backend built by calling it with no arguments instead of its Redis backend, so
neither the ``redis`` module nor a Redis server is needed. Inductor hands the
backend the whole Redis key (``pt2:{cache_id}::{key}:c1``) and the JSON bytes
of the value; the backend maps the key to a namespace exactly like the
daemon's RESP front door (:mod:`pt2cache.keys`, proto/inductor_keys.hpp) and
calls :class:`pt2cache.Client`, so entries are shared with everything else
that uses the daemon, and the daemon's own remote tier (Redis) applies.

Only the backend is replaced: the caches are still switched on with
Inductor's usual settings (``TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE=1``,
``TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE=1``,
``TORCHINDUCTOR_AUTOTUNE_REMOTE_CACHE=1``,
``TORCHINDUCTOR_BUNDLED_AUTOTUNE_REMOTE_CACHE=1``,
``TORCH_DYNAMO_AUTOMATIC_DYNAMIC_REMOTE_PGO=1``). Inductor's local caches
(files under ``TORCHINDUCTOR_CACHE_DIR``, including ``LocalAutotuneCache``)
are left alone. ``TORCHINDUCTOR_REDIS_EXPIRE`` (seconds), when set, becomes the
TTL of every entry written, as Inductor's Redis backend would set it.

When the installed torch lacks the hook (torch older than 2.5, where
``RemoteCache.backend_override_cls`` does not exist) or torch is not installed
at all, :func:`install` raises ``RuntimeError`` naming the torch version and
the missing hook: a cache that silently does nothing is worse than a clear
error at start-up. Once installed, the backend itself never raises: a missing
daemon is a miss.

``install(compile_cache=True)`` (or :func:`install_compile_cache` alone) also
sends Inductor's C++ builds (kernels, the cpp wrapper, the precompiled header)
through ``pt2cache-cxx``, the compiler launcher that caches them in the
daemon: it sets ``torch._inductor.config.cpp.cxx`` to the launcher, exports
``PT2CACHE_SOCKET`` (the client's socket) so that the launcher, which Inductor
runs as a child process, talks to the same daemon, and, when Inductor was set
up with another compiler than ``g++``, exports ``PT2CACHE_CXX`` so that the
launcher runs that one. See docs/torch.md.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

from . import _launcher
from ._launcher import LauncherNotFound
from .client import Client, default_client
from .keys import from_redis_key

__all__ = ["install", "install_compile_cache", "uninstall", "installed", "CACHE_CLASSES",
           "HOOK", "LauncherNotFound"]

log = logging.getLogger("pt2cache.torch")

HOOK = "torch._inductor.remote_cache.RemoteCache.backend_override_cls"
CACHE_CLASSES: Tuple[str, ...] = (
    "RemoteFxGraphCache",
    "RemoteAOTAutogradCache",
    "RemoteAutotuneCache",
    "RemoteBundledAutotuneCache",
    "RemoteDynamoPGOCache",
)

_lock = threading.Lock()
# class -> what its own __dict__ held for backend_override_cls before install()
_previous: Dict[type, Tuple[bool, Any]] = {}
# what install_compile_cache() replaced: (cpp config object, old cpp.cxx,
# {environment variable: old value or None})
_previous_cxx: Optional[Tuple[Any, Any, Dict[str, Optional[str]]]] = None


def install(client: Optional[Client] = None,
            classes: Sequence[str] = CACHE_CLASSES, *,
            compile_cache: bool = False,
            launcher: Optional[str] = None) -> Tuple[str, ...]:
    """Routes Inductor's remote caches ``classes`` through pt2cached.

    ``client``: the :class:`pt2cache.Client` to use; default the process-wide
    :func:`pt2cache.default_client`. Returns the names of the classes now
    routed; classes this torch does not have are skipped (logged at info
    level). Calling it again replaces the earlier routing of the classes; a
    compile cache installed before (``compile_cache`` or
    :func:`install_compile_cache`) stays until :func:`uninstall`, or is
    replaced by this call's ``compile_cache``.

    ``compile_cache``: also route Inductor's C++ compiler through the
    launcher ``pt2cache-cxx`` (:func:`install_compile_cache` with
    ``launcher`` and the client's socket). The launcher is looked for before
    anything is changed, so a missing launcher changes nothing.

    Raises ``RuntimeError`` when torch is not importable, has no
    ``torch._inductor.remote_cache``, lacks the ``backend_override_cls`` hook,
    or has none of ``classes``; :class:`LauncherNotFound` (a RuntimeError)
    when ``compile_cache`` is set and the launcher cannot be found.
    """
    found_launcher = _launcher.find_launcher(launcher) if compile_cache else None
    remote_cache, version = _import_remote_cache()
    if compile_cache:
        _import_cpp_config()  # refuses before anything is changed
    base_cache = getattr(remote_cache, "RemoteCache", None)
    base_backend = getattr(remote_cache, "RemoteCacheBackend", None)
    if not isinstance(base_cache, type) or not hasattr(base_cache, "backend_override_cls"):
        raise RuntimeError(
            f"pt2cache.torch.install(): torch {version} lacks the hook {HOOK} "
            f"(added in torch 2.5); upgrade torch, or point TORCHINDUCTOR_REDIS_URL at "
            f"pt2cached's socket to use its Redis front door instead")
    if not isinstance(base_backend, type):
        raise RuntimeError(
            f"pt2cache.torch.install(): torch {version} lacks "
            f"torch._inductor.remote_cache.RemoteCacheBackend, needed by the hook {HOOK}")
    found = {}
    for name in classes:
        cls = getattr(remote_cache, name, None)
        if isinstance(cls, type) and issubclass(cls, base_cache):
            found[name] = cls
    if not found:
        raise RuntimeError(
            f"pt2cache.torch.install(): torch {version} has none of the remote cache classes "
            f"{', '.join(classes)} in torch._inductor.remote_cache")
    missing = [name for name in classes if name not in found]
    if missing:
        log.info("pt2cache: torch %s has no %s; not routed", version, ", ".join(missing))

    factory: Callable[[], Client] = (lambda: client) if client is not None else default_client
    backend_cls = _make_backend_class(base_backend, factory)
    with _lock:
        _restore_locked()
        for cls in found.values():
            own = "backend_override_cls" in cls.__dict__
            _previous[cls] = (own, cls.__dict__.get("backend_override_cls"))
            setattr(cls, "backend_override_cls", backend_cls)
    log.debug("pt2cache: routed %s through %s", ", ".join(found), backend_cls.__name__)
    if found_launcher is not None:
        socket_path = client.socket_path if client is not None else default_client().socket_path
        _install_compile_cache(found_launcher, socket_path)
    return tuple(found)


def install_compile_cache(launcher: Optional[str] = None,
                          socket_path: Optional[str] = None) -> str:
    """Routes Inductor's C++ builds through the compiler launcher
    ``pt2cache-cxx``, which caches them in pt2cached; returns the value
    given to ``torch._inductor.config.cpp.cxx``'s compiler entry.

    The launcher is ``launcher`` if given, else ``$PT2CACHE_CXX_LAUNCHER``,
    else ``pt2cache-cxx`` on ``PATH``. When the bare name on ``PATH`` finds
    that same file, ``cpp.cxx`` gets the bare name: ``cpp.cxx`` is part of
    Inductor's FX-graph cache key, so machines with the launcher installed
    in different places still share entries (and match ``CXX=pt2cache-cxx``).

    ``socket_path``: the daemon the launcher uses, exported as
    ``PT2CACHE_SOCKET`` for child processes; default the socket of
    :func:`pt2cache.default_client`. When ``cpp.cxx`` named a compiler other
    than ``g++`` and ``PT2CACHE_CXX`` is unset, ``PT2CACHE_CXX`` is set to it
    so that the launcher runs the compiler Inductor would have run.
    :func:`uninstall` undoes all of it.

    Raises :class:`LauncherNotFound` (a RuntimeError) when there is no
    launcher, RuntimeError when torch has no ``torch._inductor.config.cpp``.
    """
    found = _launcher.find_launcher(launcher)
    if socket_path is None:
        socket_path = default_client().socket_path
    return _install_compile_cache(found, socket_path)


def _install_compile_cache(found: Tuple[str, bool], socket_path: str) -> str:
    global _previous_cxx
    path, on_path = found
    cpp = _import_cpp_config()
    with _lock:
        _restore_cxx_locked()
        old = cpp.cxx
        compiler = _launcher.LAUNCHER if on_path else path
        env: Dict[str, Optional[str]] = {}
        real = _launcher.real_compiler_for(old, path)
        for name, value in ((_launcher.SOCKET_ENV, os.fspath(socket_path)),
                            (_launcher.REAL_CXX_ENV, real)):
            if value is not None:
                env[name] = os.environ.get(name)
                os.environ[name] = value
        cpp.cxx = _launcher.with_compiler(old, compiler)
        _previous_cxx = (cpp, old, env)
    if _launcher.last_compiler(old) not in (None, "g++", compiler):
        log.info("pt2cache: cpp.cxx was %r; pt2cache-cxx runs %s", old,
                 real or os.environ.get(_launcher.REAL_CXX_ENV) or "the first g++ on PATH")
    if isinstance(old, (list, tuple)) and None in old and os.environ.get(
            "TORCH_INDUCTOR_INSTALL_GXX"):
        log.warning("pt2cache: TORCH_INDUCTOR_INSTALL_GXX is set: Inductor will use conda's "
                    "g++ instead of %s, and its builds will not be cached", compiler)
    log.debug("pt2cache: cpp.cxx = %r, PT2CACHE_SOCKET = %s", cpp.cxx, socket_path)
    return compiler


def uninstall() -> None:
    """Undoes :func:`install` and :func:`install_compile_cache`: the classes
    get back what they had, ``cpp.cxx`` and the environment variables too."""
    with _lock:
        _restore_locked()
        _restore_cxx_locked()


def installed() -> Tuple[str, ...]:
    """The names of the classes routed through pt2cached now."""
    with _lock:
        return tuple(cls.__name__ for cls in _previous)


def _restore_locked() -> None:
    for cls, (own, value) in _previous.items():
        if own:
            setattr(cls, "backend_override_cls", value)
        else:
            try:
                delattr(cls, "backend_override_cls")
            except AttributeError:
                pass
    _previous.clear()


def _restore_cxx_locked() -> None:
    global _previous_cxx
    if _previous_cxx is None:
        return
    cpp, old, env = _previous_cxx
    cpp.cxx = old
    for name, value in env.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    _previous_cxx = None


def _import_cpp_config() -> Any:
    config, version = _import_inductor("config", "install_compile_cache()")
    cpp = getattr(config, "cpp", None)
    if cpp is None or not hasattr(cpp, "cxx"):
        raise RuntimeError(
            f"pt2cache.torch.install_compile_cache(): torch {version} has no "
            f"torch._inductor.config.cpp.cxx")
    return cpp


def _import_remote_cache() -> Tuple[Any, str]:
    return _import_inductor("remote_cache", "install()",
                            f"; it needs torch >= 2.5 with the hook {HOOK}")


def _import_inductor(name: str, caller: str, needs: str = "") -> Tuple[Any, str]:
    """torch._inductor.<name> and torch's version, or a RuntimeError saying
    what is missing."""
    try:
        import torch
    except ImportError as e:
        raise RuntimeError(f"pt2cache.torch.{caller}: torch is not installed ({e}){needs}") from e
    version = str(getattr(torch, "__version__", "(unknown version)"))
    try:
        module = importlib.import_module(f"torch._inductor.{name}")
    except ImportError as e:
        raise RuntimeError(f"pt2cache.torch.{caller}: torch {version} has no "
                           f"torch._inductor.{name} ({e}){needs}") from e
    return module, version


def _ttl_from_env() -> Optional[float]:
    text = os.environ.get("TORCHINDUCTOR_REDIS_EXPIRE")
    if text is None or text == "":
        return None
    try:
        ttl = int(text)
    except ValueError:
        log.warning("pt2cache: ignoring TORCHINDUCTOR_REDIS_EXPIRE=%r (not an integer)", text)
        return None
    return ttl if ttl > 0 else None


def _make_backend_class(base: Any, client_factory: Callable[[], Client]) -> type:
    def __init__(self: Any) -> None:
        try:
            base.__init__(self)
        except TypeError:  # a base whose __init__ wants arguments: not needed here
            pass
        self._client = client_factory()
        self._ttl = _ttl_from_env()

    def _get(self: Any, key: Any) -> Optional[bytes]:
        ns, inner = from_redis_key(_as_text(key))
        value: Optional[bytes] = self._client.get(ns, inner)
        return value

    def _put(self: Any, key: Any, data: Any) -> None:
        ns, inner = from_redis_key(_as_text(key))
        if isinstance(data, str):
            data = data.encode("utf-8")
        self._client.put(ns, inner, data, ttl=self._ttl)

    namespace: Dict[str, Any] = {
        "__init__": __init__,
        "_get": _get,
        "_put": _put,
        "__doc__": "Inductor RemoteCacheBackend over pt2cached's native protocol "
                   "(installed by pt2cache.torch.install()).",
        "__module__": __name__,
    }
    # Bases whose get/put are themselves the abstract interface (rather than
    # wrappers around _get/_put) get them implemented directly.
    for public, private in (("get", _get), ("put", _put)):
        method = getattr(base, public, None)
        if method is None or getattr(method, "__isabstractmethod__", False):
            namespace[public] = private
    return type("Pt2CacheBackend", (base,), namespace)


def _as_text(key: Any) -> str:
    if isinstance(key, (bytes, bytearray)):
        return bytes(key).decode("utf-8", "surrogateescape")
    return str(key)
