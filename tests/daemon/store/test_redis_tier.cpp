// SPDX-License-Identifier: MIT
#include <atomic>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "daemon/store/remote/redis_tier.hpp"
#include "daemon/store/store.hpp"
#include "tests/daemon/store/helpers.hpp"
#include "tests/daemon/store/redis_server.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

using namespace pt2cache::daemon::store;
using namespace std::chrono_literals;
using pt2cache::tests::make_entry;
using pt2cache::tests::RedisServer;
using pt2cache::tests::TempDir;

namespace {

const std::string k_fx_key = "fabcdefghijklmnopqrstuvwxyz234567abcdefghijklmnopqrs";
const std::string k_fx_redis_key = "pt2:fx-graph-v1::" + k_fx_key + ":c1";

RedisTierOptions options_for(const std::filesystem::path& socket) {
    RedisTierOptions options;
    options.endpoint.unix_socket = socket.string();
    options.endpoint.connect_timeout = 300ms;
    options.endpoint.op_timeout = 300ms;
    options.breaker =
        BreakerOptions{.failure_threshold = 3, .base_cooldown = 100ms, .max_cooldown = 400ms};
    options.probe_interval = 50ms;
    return options;
}

template <typename Predicate>
bool eventually(Predicate predicate, std::chrono::milliseconds timeout = 5000ms) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
        if (predicate()) {
            return true;
        }
        std::this_thread::sleep_for(10ms);
    }
    return predicate();
}

std::uint64_t value(const std::atomic<std::uint64_t>& counter) {
    return counter.load();
}

} // namespace

TEST_CASE("redis tier writes Inductor's keys and reads them back", "[store][redis_tier]") {
    REQUIRE_REDIS_SERVER();
    TempDir dir;
    RedisServer server(dir.path());
    Stats stats;
    auto options = options_for(server.socket());
    options.expire_s = 3600;
    RedisTier tier(options, stats);
    CHECK(eventually([&] { return tier.state() == RemoteState::connected; }));

    const std::string json = R"({"data": "AAEC", "time_taken_ms": 12})";
    REQUIRE(tier.put("fx-graph", k_fx_key, make_entry(json)));
    REQUIRE(tier.flush(2000ms));
    CHECK(server.cli("get " + k_fx_redis_key) == json);
    const auto ttl = std::stol(server.cli("ttl " + k_fx_redis_key));
    CHECK(ttl > 3500);
    CHECK(ttl <= 3600);
    CHECK(value(stats.remote().queued) == 1);
    CHECK(value(stats.remote().written) == 1);

    auto hit = tier.get("fx-graph", k_fx_key);
    REQUIRE(hit);
    REQUIRE(*hit);
    CHECK((*hit)->value.text() == json);
    auto miss = tier.get("fx-graph", "fnothere");
    REQUIRE(miss);
    CHECK_FALSE(*miss);
    CHECK(value(stats.remote().hits) == 1);
    CHECK(value(stats.remote().misses) == 1);

    SECTION("an entry's own TTL is kept (PX)") {
        REQUIRE(tier.put("pgo", "job:0:", make_entry("p", now_ms() + 60'500)));
        REQUIRE(tier.flush(2000ms));
        const auto pttl = std::stol(server.cli("pttl pt2:dynamo-pgo::job:0::c1"));
        CHECK(pttl > 55'000);
        CHECK(pttl <= 60'500);
    }
    SECTION("namespaces without a Redis form never leave the machine") {
        const auto put = tier.put("autotune", "0123.best_config", make_entry("{}"));
        REQUIRE_FALSE(put);
        CHECK(put.error().failure == Failure::unavailable);
        const auto get = tier.get("my-tool", "k");
        REQUIRE_FALSE(get);
        CHECK(get.error().failure == Failure::unavailable);
        CHECK(server.cli("dbsize") == "1");
    }
    SECTION("remove deletes the key") {
        CHECK(tier.remove("fx-graph", k_fx_key).value());
        CHECK(server.cli("exists " + k_fx_redis_key) == "0");
    }
    SECTION("values larger than Redis accepts are not sent") {
        auto small = options_for(server.socket());
        small.max_value_size = 100;
        Stats other;
        RedisTier limited(small, other);
        const auto put = limited.put("fx-graph", "fbig", make_entry(std::string(101, 'x')));
        REQUIRE_FALSE(put);
        CHECK(put.error().failure == Failure::too_large);
        CHECK(value(other.remote().oversize_skips) == 1);
    }
}

TEST_CASE("redis tier suspends, answers at once, and resumes by itself", "[store][redis_tier]") {
    REQUIRE_REDIS_SERVER();
    TempDir dir;
    Stats stats;
    // Redis is down when the tier starts.
    RedisTier tier(options_for(dir.path() / "redis.sock"), stats);
    CHECK(eventually([&] { return tier.state() == RemoteState::suspended; }));
    CHECK(value(stats.remote().suspensions) >= 1);

    const auto started = std::chrono::steady_clock::now();
    for (int i = 0; i < 100; ++i) {
        const auto result = tier.get("fx-graph", "fk");
        CHECK_FALSE(result.has_value());
    }
    CHECK(std::chrono::steady_clock::now() - started < 1000ms);
    CHECK(value(stats.remote().skipped) > 0);
    REQUIRE(tier.put("fx-graph", "fqueued", make_entry("kept while suspended")));

    RedisServer server(dir.path());
    CHECK(eventually([&] { return tier.state() == RemoteState::connected; }));
    // The write queued during the outage reaches Redis.
    CHECK(eventually(
        [&] { return server.cli("get pt2:fx-graph-v1::fqueued:c1") == "kept while suspended"; }));
    CHECK(tier.get("fx-graph", "fqueued").value().has_value());
}

TEST_CASE("redis tier times out on a frozen server", "[store][redis_tier]") {
    REQUIRE_REDIS_SERVER();
    TempDir dir;
    RedisServer server(dir.path());
    Stats stats;
    RedisTier tier(options_for(server.socket()), stats);
    REQUIRE(eventually([&] { return tier.state() == RemoteState::connected; }));
    server.freeze();
    auto started = std::chrono::steady_clock::now();
    const auto first = tier.get("fx-graph", "fk");
    // op timeout 300 ms; a new connection may add up to its own 300 ms (and a
    // loaded test machine some scheduling delay).
    CHECK(std::chrono::steady_clock::now() - started < 1200ms);
    REQUIRE_FALSE(first);
    CHECK(first.error().failure == Failure::timeout);
    // Later gets do not wait behind the frozen server: answered at once until
    // a probe succeeds.
    started = std::chrono::steady_clock::now();
    for (int i = 0; i < 20; ++i) {
        const auto later = tier.get("fx-graph", "fk");
        REQUIRE_FALSE(later);
        CHECK(later.error().failure == Failure::unavailable);
    }
    CHECK(std::chrono::steady_clock::now() - started < 200ms);
    // The probes time out too: suspended.
    CHECK(eventually([&] { return tier.state() == RemoteState::suspended; }));
    server.thaw();
    CHECK(value(stats.remote().timeouts) >= 3);
    CHECK(value(stats.remote().suspensions) >= 1);
    CHECK(value(stats.remote().skipped) >= 20);
    CHECK(eventually([&] { return tier.state() == RemoteState::connected; }));
}

TEST_CASE("redis tier write-behind overflow and shutdown", "[store][redis_tier]") {
    REQUIRE_REDIS_SERVER();
    TempDir dir;
    SECTION("a full queue drops the oldest and counts it") {
        Stats stats;
        auto options = options_for(dir.path() / "redis.sock"); // nothing there
        options.queue.capacity_bytes = 3 << 20;
        options.shutdown_flush = 200ms;
        {
            RedisTier tier(options, stats);
            REQUIRE(eventually([&] { return tier.state() == RemoteState::suspended; }));
            for (int i = 0; i < 10; ++i) {
                REQUIRE(tier.put("fx-graph", "f" + std::to_string(i),
                                 make_entry(std::string(1 << 20, 'v'))));
            }
            CHECK(value(stats.remote().queue_drops) >= 7);
            CHECK(value(stats.remote().queue_bytes) <= 3 << 20);
        }
        CHECK(value(stats.remote().shutdown_drops) >= 1);
        CHECK(stats.remote().state.load() == static_cast<int>(RemoteState::disabled));
    }
    SECTION("destruction flushes what is queued") {
        RedisServer server(dir.path());
        Stats stats;
        {
            RedisTier tier(options_for(server.socket()), stats);
            for (int i = 0; i < 200; ++i) {
                REQUIRE(tier.put("fx-graph", "f" + std::to_string(i),
                                 make_entry(std::string(10000, 'v'))));
            }
        }
        CHECK(server.cli("dbsize") == "200");
        CHECK(value(stats.remote().written) == 200);
        CHECK(value(stats.remote().shutdown_drops) == 0);
    }
    SECTION("a frozen server cannot hold shutdown past its deadline") {
        RedisServer server(dir.path());
        Stats stats;
        auto options = options_for(server.socket());
        options.shutdown_flush = 300ms;
        auto tier = std::make_unique<RedisTier>(options, stats);
        REQUIRE(eventually([&] { return tier->state() == RemoteState::connected; }));
        server.freeze();
        for (int i = 0; i < 20; ++i) {
            REQUIRE(tier->put("fx-graph", "f" + std::to_string(i), make_entry("v")));
        }
        const auto started = std::chrono::steady_clock::now();
        tier.reset();
        CHECK(std::chrono::steady_clock::now() - started < 1500ms);
        server.thaw();
        CHECK(value(stats.remote().shutdown_drops) + value(stats.remote().queue_drops) > 0);
    }
}

TEST_CASE("store with a redis tier: backfill and single flight",
          "[store][redis_tier][concurrency]") {
    REQUIRE_REDIS_SERVER();
    TempDir dir;
    RedisServer server(dir.path());
    Stats stats;
    auto remote = std::make_unique<RedisTier>(options_for(server.socket()), stats);
    RedisTier* tier = remote.get();
    REQUIRE(eventually([&] { return tier->state() == RemoteState::connected; }));
    Store store(stats, StorePolicy{}, std::make_unique<MemoryTier>(64 << 20, stats),
                std::make_unique<DiskTier>(dir.path() / "cache", DiskOptions{}, stats),
                std::move(remote));
    const std::string value_text(2 << 20, 'r');
    // A 2 MiB value, set with redis-cli -x from a file.
    {
        std::ofstream(dir.path() / "v") << value_text;
        const std::string command = "redis-cli -s " + server.socket().string() + " -x set " +
                                    k_fx_redis_key + " < " + (dir.path() / "v").string() +
                                    " > /dev/null";
        REQUIRE(std::system(command.c_str()) == 0);
    }
    const long gets_before = server.calls("get");

    std::atomic<int> hits{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < 8; ++i) {
        threads.emplace_back([&] {
            auto result = store.get("fx-graph", k_fx_key);
            if (result && *result && (*result)->value.text() == value_text) {
                ++hits;
            }
        });
    }
    for (auto& thread : threads) {
        thread.join();
    }
    CHECK(hits == 8);
    CHECK(server.calls("get") - gets_before == 1);
    CHECK(value(stats.remote().backfills) == 1);
    CHECK(value(stats.remote().coalesced) + 1 + stats.tier("fx-graph", TierId::memory).hits +
              stats.tier("fx-graph", TierId::disk).hits >=
          8);

    // Served locally from now on.
    REQUIRE(store.get("fx-graph", k_fx_key).value().has_value());
    CHECK(server.calls("get") - gets_before == 1);
    CHECK(store.disk_tier()->exists("fx-graph", k_fx_key).value());

    SECTION("read-only: puts stay local") {
        StorePolicy policy;
        policy.remote_read_only = true;
        store.set_policy(policy);
        REQUIRE(store.put("fx-graph", "flocal", make_entry("v")));
        REQUIRE(tier->flush(1000ms));
        CHECK(server.cli("exists pt2:fx-graph-v1::flocal:c1") == "0");
    }
    SECTION("remote switches per namespace") {
        StorePolicy policy;
        policy.remote_namespaces = std::set<std::string>{"pgo"};
        store.set_policy(policy);
        REQUIRE(store.put("fx-graph", "fnot", make_entry("v")));
        REQUIRE(store.put("pgo", "job:1:", make_entry("v")));
        REQUIRE(tier->flush(1000ms));
        CHECK(server.cli("exists pt2:fx-graph-v1::fnot:c1") == "0");
        CHECK(server.cli("exists pt2:dynamo-pgo::job:1::c1") == "1");
    }
}
