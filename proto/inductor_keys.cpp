#include "proto/inductor_keys.hpp"

#include <algorithm>
#include <array>

#include <fmt/format.h>

namespace pt2cache::proto {

namespace {

struct Mapping {
    std::string_view cache_id;
    std::string_view ns;
};

constexpr std::array k_fixed = {
    Mapping{"fx-graph-v1", "fx-graph"},
    Mapping{"autograd-experimental", "aot-autograd"},
    Mapping{"bundled-autotune-v1", "autotune-bundle"},
    Mapping{"dynamo-pgo", "pgo"},
};

constexpr std::string_view k_prefix = "pt2:";
constexpr std::string_view k_separator = "::";
constexpr std::string_view k_version_suffix = ":c1";

bool is_hex64(std::string_view text) {
    return text.size() == 64 && std::all_of(text.begin(), text.end(), [](char c) {
               return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
           });
}

} // namespace

NamespacedKey from_redis_key(std::string_view redis_key) {
    const NamespacedKey passthrough{k_redis_namespace, redis_key};
    if (!redis_key.starts_with(k_prefix) || !redis_key.ends_with(k_version_suffix)) {
        return passthrough;
    }
    auto body = redis_key.substr(k_prefix.size(),
                                 redis_key.size() - k_prefix.size() - k_version_suffix.size());
    const auto separator = body.find(k_separator);
    if (separator == std::string_view::npos) {
        return passthrough;
    }
    const auto cache_id = body.substr(0, separator);
    const auto key = body.substr(separator + k_separator.size());
    if (key.empty()) {
        return passthrough;
    }
    if (cache_id.starts_with("autograd-") &&
        (cache_id != "autograd-experimental" || key.find(k_separator) != key.npos)) {
        // aot-autograd keys with "::" carry their cache_id (see to_redis_key).
        return {"aot-autograd", body};
    }
    for (const auto& mapping : k_fixed) {
        if (cache_id == mapping.cache_id) {
            return {mapping.ns, key};
        }
    }
    if (is_hex64(cache_id)) {
        return {"autotune", body};
    }
    return passthrough;
}

namespace {

std::optional<std::string> redis_form(std::string_view ns, std::string_view key) {
    if (ns == k_redis_namespace) {
        return std::string(key);
    }
    if (ns == "autotune" || (ns == "aot-autograd" && key.find(k_separator) != key.npos)) {
        return fmt::format("{}{}{}", k_prefix, key, k_version_suffix);
    }
    const auto cache_id = canonical_cache_id(ns);
    if (cache_id.empty()) {
        return std::nullopt;
    }
    return fmt::format("{}{}{}{}{}", k_prefix, cache_id, k_separator, key, k_version_suffix);
}

} // namespace

std::optional<std::string> to_redis_key(std::string_view ns, std::string_view key) {
    // Only a Redis key that maps back to this very entry: otherwise two
    // entries would share it, and one would be served the other's bytes
    // (("autotune", "fx-graph-v1::k") and ("fx-graph", "k") both wrote
    // pt2:fx-graph-v1::k:c1). Such an entry stays local, like a local
    // `<hex>.best_config` autotune entry.
    auto redis_key = redis_form(ns, key);
    if (redis_key && from_redis_key(*redis_key) != NamespacedKey{ns, key}) {
        return std::nullopt;
    }
    return redis_key;
}

std::string_view canonical_cache_id(std::string_view ns) {
    for (const auto& mapping : k_fixed) {
        if (ns == mapping.ns) {
            return mapping.cache_id;
        }
    }
    return {};
}

} // namespace pt2cache::proto
