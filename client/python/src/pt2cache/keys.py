"""The mapping between Inductor's Redis keys and pt2cached namespaces.

This is proto/inductor_keys.cpp, in Python, rule for rule; the daemon's RESP
front door and remote tier use the C++ one, so an entry written through either
path lands under the same namespace and key. Inductor writes
``pt2:{cache_id}::{key}:c{version}``; with version 1:

====================== =============== ======================
cache_id               namespace       key
====================== =============== ======================
fx-graph-v1            fx-graph        key
autograd-experimental  aot-autograd    key
autograd-* (others)    aot-autograd    ``{cache_id}::{key}``
bundled-autotune-v1    autotune-bundle key
dynamo-pgo             pgo             key
<64 hex> (per kernel)  autotune        ``{cache_id}::{key}``
====================== =============== ======================

Anything else (other versions, other prefixes) goes to namespace ``redis``
under the whole key. Both directions are lossless, and no two entries share
a Redis key: ``to_redis_key`` answers None for an entry whose Redis form would
map back to another.
"""

from __future__ import annotations

import re
from typing import NamedTuple, Optional

__all__ = ["NamespacedKey", "from_redis_key", "to_redis_key", "canonical_cache_id",
           "REDIS_NAMESPACE"]

REDIS_NAMESPACE = "redis"

_FIXED = (
    ("fx-graph-v1", "fx-graph"),
    ("autograd-experimental", "aot-autograd"),
    ("bundled-autotune-v1", "autotune-bundle"),
    ("dynamo-pgo", "pgo"),
)
_PREFIX = "pt2:"
_SEPARATOR = "::"
_SUFFIX = ":c1"
_HEX64 = re.compile(r"[0-9a-f]{64}\Z")


class NamespacedKey(NamedTuple):
    ns: str
    key: str


def from_redis_key(redis_key: str) -> NamespacedKey:
    """The namespace and key under which pt2cached keeps a Redis key."""
    passthrough = NamespacedKey(REDIS_NAMESPACE, redis_key)
    if not redis_key.startswith(_PREFIX) or not redis_key.endswith(_SUFFIX):
        return passthrough
    if len(redis_key) < len(_PREFIX) + len(_SUFFIX):
        return passthrough
    body = redis_key[len(_PREFIX):len(redis_key) - len(_SUFFIX)]
    separator = body.find(_SEPARATOR)
    if separator < 0:
        return passthrough
    cache_id = body[:separator]
    key = body[separator + len(_SEPARATOR):]
    if not key:
        return passthrough
    if cache_id.startswith("autograd-") and (
        cache_id != "autograd-experimental" or _SEPARATOR in key
    ):
        return NamespacedKey("aot-autograd", body)
    for fixed_id, ns in _FIXED:
        if cache_id == fixed_id:
            return NamespacedKey(ns, key)
    if _HEX64.match(cache_id):
        return NamespacedKey("autotune", body)
    return passthrough


def to_redis_key(ns: str, key: str) -> Optional[str]:
    """The Redis key of an entry, or None when it has none: free-form
    namespaces, and keys whose Redis form would map back to another entry
    (such as a local ``<hex>.best_config`` autotune entry, or
    ``("autotune", "fx-graph-v1::k")``, whose Redis form is
    ``("fx-graph", "k")``'s): no two entries share a Redis key."""
    redis_key = _redis_form(ns, key)
    if redis_key is not None and from_redis_key(redis_key) != (ns, key):
        return None
    return redis_key


def _redis_form(ns: str, key: str) -> Optional[str]:
    if ns == REDIS_NAMESPACE:
        return key
    if ns == "autotune" or (ns == "aot-autograd" and _SEPARATOR in key):
        return f"{_PREFIX}{key}{_SUFFIX}"
    cache_id = canonical_cache_id(ns)
    if not cache_id:
        return None
    return f"{_PREFIX}{cache_id}{_SEPARATOR}{key}{_SUFFIX}"


def canonical_cache_id(ns: str) -> str:
    """Inductor's cache_id for a namespace, e.g. ``fx-graph-v1``; empty for
    autotune (per-kernel ids), redis and free-form namespaces."""
    for cache_id, fixed_ns in _FIXED:
        if ns == fixed_ns:
            return cache_id
    return ""
