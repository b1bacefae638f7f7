"""pt2cache.keys mirrors proto/inductor_keys.cpp (the rows of
tests/proto/test_inductor_keys.cpp, plus edge cases)."""

from __future__ import annotations

import pytest

from pt2cache.keys import NamespacedKey, canonical_cache_id, from_redis_key, to_redis_key

HEX64 = "a" * 64
FX = "f" + "q" * 51

ROWS = [
    (f"pt2:fx-graph-v1::{FX}:c1", ("fx-graph", FX)),
    ("pt2:autograd-experimental::a123:c1", ("aot-autograd", "a123")),
    ("pt2:autograd-other::a123:c1", ("aot-autograd", "autograd-other::a123")),
    ("pt2:autograd-experimental::x::y:c1", ("aot-autograd", "autograd-experimental::x::y")),
    (f"pt2:bundled-autotune-v1::{HEX64}:c1", ("autotune-bundle", HEX64)),
    ("pt2:dynamo-pgo::job:0::c1", ("pgo", "job:0:")),
    (f"pt2:{HEX64}::{HEX64}:c1", ("autotune", f"{HEX64}::{HEX64}")),
    (f"pt2:fx-graph-v1::{FX}:c2", ("redis", f"pt2:fx-graph-v1::{FX}:c2")),
    ("pt2:fx-graph-v1:old-layout", ("redis", "pt2:fx-graph-v1:old-layout")),
    ("pt2:unknown-id::k:c1", ("redis", "pt2:unknown-id::k:c1")),
    ("pt2:fx-graph-v1:::c1", ("redis", "pt2:fx-graph-v1:::c1")),
    (f"pt2:{'A' * 64}::k:c1", ("redis", f"pt2:{'A' * 64}::k:c1")),
    ("pt2:c1", ("redis", "pt2:c1")),
    ("pt2::c1", ("redis", "pt2::c1")),
    ("plain", ("redis", "plain")),
    ("", ("redis", "")),
]


@pytest.mark.parametrize("redis_key,mapped", ROWS, ids=[r[0] or "empty" for r in ROWS])
def test_mapping_is_lossless(redis_key, mapped):
    assert from_redis_key(redis_key) == NamespacedKey(*mapped)
    assert to_redis_key(*mapped) == redis_key


def test_no_redis_form():
    assert to_redis_key("my-namespace", "k") is None
    assert to_redis_key("autotune", HEX64 + ".best_config") is None
    assert canonical_cache_id("fx-graph") == "fx-graph-v1"
    assert canonical_cache_id("aot-autograd") == "autograd-experimental"
    assert canonical_cache_id("autotune-bundle") == "bundled-autotune-v1"
    assert canonical_cache_id("pgo") == "dynamo-pgo"
    assert canonical_cache_id("autotune") == ""
    assert canonical_cache_id("redis") == ""


# Each once wrote the Redis key of the entry beside it (a false hit across
# namespaces); the C++ twin is "no two entries share a Redis key".
SHADOWING = [
    (("autotune", "fx-graph-v1::K1"), ("fx-graph", "K1")),
    (("aot-autograd", "autograd-experimental::K2"), ("aot-autograd", "K2")),
    (("redis", "pt2:dynamo-pgo::K3:c1"), ("pgo", "K3")),
    (("aot-autograd", "foo::K4"), ("redis", "pt2:foo::K4:c1")),
    (("autotune", "bundled-autotune-v1::" + "b" * 64), ("autotune-bundle", "b" * 64)),
]


@pytest.mark.parametrize("stray,owner", SHADOWING, ids=[s[0][1] for s in SHADOWING])
def test_an_entry_never_takes_another_entrys_redis_key(stray, owner):
    assert to_redis_key(*stray) is None
    assert from_redis_key(to_redis_key(*owner)) == owner


def test_every_redis_key_maps_back_to_its_entry():
    pieces = ["", "pt2:", "::", ":c1", ":c2", ":", "k", "b" * 64, "autograd-", "fx-graph-v1",
              "dynamo-pgo", "autograd-experimental", "bundled-autotune-v1"]
    namespaces = ["fx-graph", "aot-autograd", "autotune", "autotune-bundle", "pgo", "redis",
                  "mine"]
    owners = {}
    for a in pieces:
        for b in pieces:
            for c in pieces:
                key = a + b + c
                for ns in namespaces:
                    redis_key = to_redis_key(ns, key)
                    if redis_key is None:
                        continue
                    assert from_redis_key(redis_key) == (ns, key)
                    assert owners.setdefault(redis_key, (ns, key)) == (ns, key)
    assert len(owners) > 1000
