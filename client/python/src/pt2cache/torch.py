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
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

from .client import Client, default_client
from .keys import from_redis_key

__all__ = ["install", "uninstall", "installed", "CACHE_CLASSES", "HOOK"]

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


def install(client: Optional[Client] = None,
            classes: Sequence[str] = CACHE_CLASSES) -> Tuple[str, ...]:
    """Routes Inductor's remote caches ``classes`` through pt2cached.

    ``client``: the :class:`pt2cache.Client` to use; default the process-wide
    :func:`pt2cache.default_client`. Returns the names of the classes now
    routed; classes this torch does not have are skipped (logged at info
    level). Calling it again replaces the earlier installation.

    Raises ``RuntimeError`` when torch is not importable, has no
    ``torch._inductor.remote_cache``, lacks the ``backend_override_cls`` hook,
    or has none of ``classes``.
    """
    remote_cache, version = _import_remote_cache()
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
            cls.backend_override_cls = backend_cls
    log.debug("pt2cache: routed %s through %s", ", ".join(found), backend_cls.__name__)
    return tuple(found)


def uninstall() -> None:
    """Undoes :func:`install`: the classes get back what they had."""
    with _lock:
        _restore_locked()


def installed() -> Tuple[str, ...]:
    """The names of the classes routed through pt2cached now."""
    with _lock:
        return tuple(cls.__name__ for cls in _previous)


def _restore_locked() -> None:
    for cls, (own, value) in _previous.items():
        if own:
            cls.backend_override_cls = value
        else:
            try:
                del cls.backend_override_cls
            except AttributeError:
                pass
    _previous.clear()


def _import_remote_cache() -> Tuple[Any, str]:
    try:
        import torch
    except ImportError as e:
        raise RuntimeError(
            f"pt2cache.torch.install(): torch is not installed ({e}); it needs torch >= 2.5 "
            f"with the hook {HOOK}") from e
    version = str(getattr(torch, "__version__", "(unknown version)"))
    try:
        from torch._inductor import remote_cache
    except ImportError as e:
        raise RuntimeError(
            f"pt2cache.torch.install(): torch {version} has no torch._inductor.remote_cache "
            f"({e}); it needs torch >= 2.5 with the hook {HOOK}") from e
    return remote_cache, version


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


def _make_backend_class(base: type, client_factory: Callable[[], Client]) -> type:
    def __init__(self: Any) -> None:
        try:
            base.__init__(self)
        except TypeError:  # a base whose __init__ wants arguments: not needed here
            pass
        self._client = client_factory()
        self._ttl = _ttl_from_env()

    def _get(self: Any, key: Any) -> Optional[bytes]:
        ns, inner = from_redis_key(_as_text(key))
        return self._client.get(ns, inner)

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
