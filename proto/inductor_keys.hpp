// The one mapping between Inductor's Redis keys and pt2cached namespaces,
// used by the RESP front door and by the remote (Redis) tier.
//
// Inductor writes `pt2:{cache_id}::{key}:c{version}`. With version 1:
//   fx-graph-v1            -> fx-graph,        key
//   autograd-experimental  -> aot-autograd,    key
//   autograd-* (others)    -> aot-autograd,    "{cache_id}::{key}"
//   bundled-autotune-v1    -> autotune-bundle, key
//   dynamo-pgo             -> pgo,             key
//   <64 hex> (per kernel)  -> autotune,        "{cache_id}::{key}"
// Anything else (other versions, other prefixes) -> redis, the whole key.
// Both directions are lossless: to_redis_key(from_redis_key(k)) == k, and
// from_redis_key(*to_redis_key(ns, key)) == {ns, key} wherever to_redis_key
// answers (it answers nothing for an entry whose Redis form would map to
// another), so no two entries share a Redis key.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace pt2cache::proto {

// A mapped key: `key` views the Redis key it came from, `ns` that key or a
// static name, so both are valid as long as the Redis key's bytes are (the
// mapping runs on every RESP request and allocates nothing).
struct NamespacedKey {
    std::string_view ns;
    std::string_view key;

    bool operator==(const NamespacedKey&) const = default;
};

inline constexpr std::string_view k_redis_namespace = "redis";

NamespacedKey from_redis_key(std::string_view redis_key);

// The Redis key for an entry of `ns`, or nullopt when it has none: free-form
// namespaces, and keys whose Redis form would map back to another entry
// (an autotune key without a 64-hex cache_id, a "redis" key that reads as
// an Inductor key, ...): those entries stay local.
std::optional<std::string> to_redis_key(std::string_view ns, std::string_view key);

// The Inductor cache_id of a namespace's entries, e.g. "fx-graph-v1"; empty
// for autotune (per-kernel ids), redis and free-form namespaces.
std::string_view canonical_cache_id(std::string_view ns);

} // namespace pt2cache::proto
