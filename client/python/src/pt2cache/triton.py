"""A Triton remote-cache backend that keeps Triton's compiled files in
pt2cached, so a kernel compiled on one machine is a cache hit on another.

::

    TRITON_CACHE_MANAGER=triton.runtime.cache:RemoteCacheManager
    TRITON_REMOTE_CACHE_BACKEND=pt2cache.triton:Backend

Triton's ``RemoteCacheManager`` (``triton/runtime/cache.py``, Triton 3.0 and
later) builds one backend per kernel with the kernel's cache key (the base32
of a sha256 over Triton's own key, the source, the target and the options),
then calls ``get([filename, ...])`` for the group file and the files it lists
and ``put(filename, data)`` for each file it writes; it materialises what
``get`` returns into ``TRITON_CACHE_DIR`` itself. This backend stores each
file as one entry of the daemon's ``triton`` namespace under
``<cache key>/<filename>``, so files of different kernels never share an
entry.

The daemon is the one :func:`pt2cache.default_client` talks to
(``PT2CACHE_SOCKET``, else the default socket). Like every pt2cache cache
path, the backend never raises: an unreachable daemon, a timeout or a
refused value is a miss (``get`` leaves the file out) or an unstored file
(``put``), logged once.

This module imports without Triton: the class derives from Triton's
``RemoteCacheBackend`` when Triton is importable, else from a stand-in of
the same name and methods (Triton checks the name in the class's MRO when
it loads ``TRITON_REMOTE_CACHE_BACKEND``).
"""

from __future__ import annotations

import hashlib
from abc import abstractmethod
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Union

from . import _wire
from .client import Client, default_client

__all__ = ["Backend", "NAMESPACE", "entry_key"]

NAMESPACE = "triton"

class RemoteCacheBackend:
    """Stand-in for triton.runtime.cache.RemoteCacheBackend."""

    def __init__(self, key: str):
        pass

    @abstractmethod
    def get(self, filenames: List[str]) -> Dict[str, bytes]:
        pass

    @abstractmethod
    def put(self, filename: str, data: bytes) -> None:
        pass


# The type checker always sees the stand-in (same methods), with or without
# Triton installed.
_Base = RemoteCacheBackend
if not TYPE_CHECKING:
    try:
        from triton.runtime.cache import RemoteCacheBackend as _Base
    except Exception:  # noqa: BLE001 - no Triton (or a broken one): the stand-in
        pass


def entry_key(cache_key: str, filename: str) -> str:
    """The daemon key of one file of one kernel: ``<cache key>/<filename>``,
    or, where that exceeds the protocol's key limit, the cache key and the
    sha256 of the file name (still one entry per distinct file), behind a
    ``/`` that no file name holds: no short name can take a long one's key."""
    key = f"{cache_key}/{filename}"
    if len(key.encode("utf-8", "surrogateescape")) <= _wire.MAX_KEY:
        return key
    digest = hashlib.sha256(filename.encode("utf-8", "surrogateescape")).hexdigest()
    return f"{cache_key}/#sha256/{digest}"


class Backend(_Base):
    """Triton ``RemoteCacheBackend`` over pt2cached (namespace ``triton``).

    ``key``: the kernel's cache key, as Triton's ``RemoteCacheManager``
    passes it. ``client``: default :func:`pt2cache.default_client`.
    """

    def __init__(self, key: str, client: Optional[Client] = None):
        super().__init__(key)
        self._key = str(key)
        self._client = client if client is not None else default_client()

    @property
    def key(self) -> str:
        return self._key

    def get(self, filenames: Sequence[str]) -> Dict[str, bytes]:
        """``{filename: bytes}`` for the files the daemon holds; the others
        are left out, as Triton's own backends do."""
        names = list(filenames)
        if not names:
            return {}
        values = self._client.get_many(NAMESPACE, [entry_key(self._key, str(f)) for f in names])
        return {f: v for f, v in zip(names, values) if v is not None}

    def put(self, filename: str, data: Union[bytes, bytearray, memoryview, str]) -> None:
        if isinstance(data, str):
            data = data.encode("utf-8")
        self._client.put(NAMESPACE, entry_key(self._key, str(filename)), data)
