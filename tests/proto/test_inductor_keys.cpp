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
