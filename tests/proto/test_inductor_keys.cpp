#include <map>
#include <string>
#include <utility>
#include <vector>

#include "proto/inductor_keys.hpp"

#include <catch2/catch.hpp>

using namespace pt2cache::proto;

TEST_CASE("Inductor keys map to namespaces and back", "[proto][keys]") {
    const std::string hex64(64, 'a');
    const std::string fx = "f" + std::string(51, 'q');
    // Expected namespace and key as strings: a NamespacedKey only views.
    struct Row {
        std::string redis_key;
        std::pair<std::string, std::string> mapped;
    };
    const std::vector<Row> rows{
        {"pt2:fx-graph-v1::" + fx + ":c1", {"fx-graph", fx}},
        {"pt2:autograd-experimental::a123:c1", {"aot-autograd", "a123"}},
        {"pt2:autograd-other::a123:c1", {"aot-autograd", "autograd-other::a123"}},
        {"pt2:autograd-experimental::x::y:c1", {"aot-autograd", "autograd-experimental::x::y"}},
        {"pt2:bundled-autotune-v1::" + hex64 + ":c1", {"autotune-bundle", hex64}},
        {"pt2:dynamo-pgo::job:0::c1", {"pgo", "job:0:"}},
        {"pt2:" + hex64 + "::" + hex64 + ":c1", {"autotune", hex64 + "::" + hex64}},
        {"pt2:fx-graph-v1::" + fx + ":c2", {"redis", "pt2:fx-graph-v1::" + fx + ":c2"}},
        {"pt2:fx-graph-v1:old-layout", {"redis", "pt2:fx-graph-v1:old-layout"}},
        {"pt2:unknown-id::k:c1", {"redis", "pt2:unknown-id::k:c1"}},
        {"pt2:fx-graph-v1:::c1", {"redis", "pt2:fx-graph-v1:::c1"}},
        {"plain", {"redis", "plain"}},
        {"", {"redis", ""}},
    };
    for (const auto& row : rows) {
        INFO(row.redis_key);
        const NamespacedKey mapped = from_redis_key(row.redis_key);
        CHECK(mapped.ns == row.mapped.first);
        CHECK(mapped.key == row.mapped.second);
        // The key views the Redis key's bytes: the mapping allocates nothing.
        CHECK(mapped.key.data() >= row.redis_key.data());
        CHECK(mapped.key.data() + mapped.key.size() <= row.redis_key.data() + row.redis_key.size());
        CHECK(to_redis_key(row.mapped.first, row.mapped.second) == row.redis_key);
    }
    CHECK_FALSE(to_redis_key("my-namespace", "k"));
    CHECK_FALSE(to_redis_key("autotune", hex64 + ".best_config"));
    CHECK(canonical_cache_id("fx-graph") == "fx-graph-v1");
    CHECK(canonical_cache_id("autotune").empty());
}

TEST_CASE("no two entries share a Redis key", "[proto][keys]") {
    const std::string hex64(64, 'b');
    // Each of these once wrote the Redis key of the entry beside it, which
    // then read its bytes (a false hit across namespaces).
    // Strings, not NamespacedKey: it only views (the last key is built).
    using Entry = std::pair<std::string, std::string>;
    const std::vector<std::pair<Entry, Entry>> shadowing{
        {{"autotune", "fx-graph-v1::K1"}, {"fx-graph", "K1"}},
        {{"aot-autograd", "autograd-experimental::K2"}, {"aot-autograd", "K2"}},
        {{"redis", "pt2:dynamo-pgo::K3:c1"}, {"pgo", "K3"}},
        {{"aot-autograd", "foo::K4"}, {"redis", "pt2:foo::K4:c1"}},
        {{"autotune", "bundled-autotune-v1::" + hex64}, {"autotune-bundle", hex64}},
    };
    for (const auto& [stray, owner] : shadowing) {
        INFO(stray.first << " " << stray.second);
        CHECK_FALSE(to_redis_key(stray.first, stray.second));
        const auto owned = to_redis_key(owner.first, owner.second);
        REQUIRE(owned);
        CHECK(from_redis_key(*owned) == NamespacedKey{owner.first, owner.second});
    }

    // Every namespace with every key built from the pieces Inductor's keys
    // are made of: whatever has a Redis key maps back to itself, so two
    // entries can never have the same one.
    const std::vector<std::string> pieces{"",
                                          "pt2:",
                                          "::",
                                          ":c1",
                                          ":c2",
                                          ":",
                                          "k",
                                          hex64,
                                          "autograd-",
                                          "fx-graph-v1",
                                          "dynamo-pgo",
                                          "autograd-experimental",
                                          "bundled-autotune-v1"};
    const std::vector<std::string> namespaces{
        "fx-graph", "aot-autograd", "autotune", "autotune-bundle", "pgo", "redis", "mine"};
    std::map<std::string, std::pair<std::string, std::string>> owners;
    std::size_t with_redis_key = 0;
    for (const auto& a : pieces) {
        for (const auto& b : pieces) {
            for (const auto& c : pieces) {
                for (const auto& d : pieces) {
                    const auto key = a + b + c + d;
                    for (const auto& ns : namespaces) {
                        const auto redis_key = to_redis_key(ns, key);
                        if (!redis_key) {
                            continue;
                        }
                        ++with_redis_key;
                        INFO(ns << " " << key << " -> " << *redis_key);
                        REQUIRE(from_redis_key(*redis_key) == NamespacedKey{ns, key});
                        const auto [at, fresh] = owners.try_emplace(*redis_key, ns, key);
                        REQUIRE((fresh || at->second == std::pair(ns, key)));
                    }
                }
            }
        }
    }
    CHECK(with_redis_key > 10'000); // the check saw real keys, not only refusals
}
