// SPDX-License-Identifier: MIT
#include <atomic>
#include <barrier>
#include <map>
#include <sys/stat.h>
#include <thread>

#include "daemon/store/store.hpp"
#include "tests/daemon/store/helpers.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

using namespace pt2cache::daemon::store;
using pt2cache::tests::make_entry;
using pt2cache::tests::random_bytes;
using pt2cache::tests::TempDir;
namespace fs = std::filesystem;

namespace {

// A remote tier in memory; can be told to fail.
class FakeRemote final : public Tier {
public:
    std::string_view name() const override { return "remote"; }

    tl::expected<std::optional<Entry>, StoreError> get(std::string_view ns,
                                                       std::string_view key) override {
        std::lock_guard lock(m_mutex);
        ++gets;
        if (failing) {
            return tl::make_unexpected(StoreError{Failure::timeout, "remote timed out"});
        }
        const auto it = m_entries.find(id(ns, key));
        if (it == m_entries.end()) {
            return std::nullopt;
        }
        return it->second;
    }

    tl::expected<void, StoreError> put(std::string_view ns, std::string_view key,
                                       const Entry& entry) override {
        std::lock_guard lock(m_mutex);
        if (failing) {
            return tl::make_unexpected(StoreError{Failure::timeout, "remote timed out"});
        }
        m_entries[id(ns, key)] = entry;
        return {};
    }

    tl::expected<bool, StoreError> remove(std::string_view ns, std::string_view key) override {
        std::lock_guard lock(m_mutex);
        return m_entries.erase(id(ns, key)) > 0;
    }

    tl::expected<std::uint64_t, StoreError> clear(std::string_view) override { return 0; }

    std::size_t size() {
        std::lock_guard lock(m_mutex);
        return m_entries.size();
    }

    std::atomic<bool> failing{false};
    std::atomic<int> gets{0};

private:
    static std::string id(std::string_view ns, std::string_view key) {
        return fmt::format("{}\n{}", ns, key);
    }

    std::mutex m_mutex;
    std::map<std::string, Entry> m_entries;
};

struct Fixture {
    explicit Fixture(StorePolicy policy = {}, bool with_memory = true, bool with_disk = true,
                     bool with_remote = false) {
        auto memory = with_memory ? std::make_unique<MemoryTier>(1 << 20, stats) : nullptr;
        auto disk =
            with_disk ? std::make_unique<DiskTier>(dir.path(), DiskOptions{}, stats) : nullptr;
        std::unique_ptr<Tier> remote_tier;
        if (with_remote) {
            auto fake = std::make_unique<FakeRemote>();
            remote = fake.get();
            remote_tier = std::move(fake);
        }
        store = std::make_unique<Store>(stats, std::move(policy), std::move(memory),
                                        std::move(disk), std::move(remote_tier));
    }

    TierCounters& counters(std::string_view ns, TierId tier) { return stats.tier(ns, tier); }

    std::optional<Entry> get(std::string_view ns, std::string_view key) {
        auto result = store->get(ns, key);
        REQUIRE(result);
        return *result;
    }

    // get_quick's memory hit, or nullopt (a miss, or an answer that needs get).
    std::optional<Entry> quick_hit(std::string_view ns, std::string_view key) {
        auto quick = store->get_quick(ns, key);
        return quick ? std::move(*quick) : std::nullopt;
    }

    void wait_for_scan() {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (!store->disk_tier()->scan_complete() &&
               std::chrono::steady_clock::now() < deadline) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        REQUIRE(store->disk_tier()->scan_complete());
    }

    // Entries on disk: entry files and records of small.mdb.
    std::size_t disk_files() {
        std::size_t count = 0;
        if (fs::exists(dir.path() / "v1")) {
            for (const auto& item : fs::recursive_directory_iterator(dir.path() / "v1")) {
                count += item.is_regular_file() ? 1 : 0;
            }
        }
        if (const DiskTier* disk = store->disk_tier(); disk && disk->small_store()) {
            for (const std::string& ns : disk->small_store()->namespaces()) {
                count += disk->small_store()->ids_after(ns, std::nullopt, 1'000'000).size();
            }
        }
        return count;
    }

    // What `du` counts for the entries: every regular file's blocks but the
    // LMDB lock file's.
    std::uint64_t du_of_entries() {
        std::uint64_t total = 0;
        for (const auto& item : fs::recursive_directory_iterator(dir.path())) {
            struct stat info {};
            if (item.path().filename() != "small.mdb-lock" &&
                ::lstat(item.path().c_str(), &info) == 0 && S_ISREG(info.st_mode)) {
                total += static_cast<std::uint64_t>(info.st_blocks) * 512;
            }
        }
        return total;
    }

    TempDir dir;
    Stats stats;
    FakeRemote* remote = nullptr;
    std::unique_ptr<Store> store;
};

} // namespace

TEST_CASE("store put then get hits memory", "[store][chain]") {
    Fixture f;
    REQUIRE(f.store->put("pgo", "k", make_entry("value")).value() == PutOutcome::stored);
    const auto hit = f.quick_hit("pgo", "k");
    REQUIRE(hit);
    CHECK(hit->value.text() == "value");
    CHECK(f.counters("pgo", TierId::memory).hits == 1);
    CHECK(f.counters("pgo", TierId::memory).bytes_out == 5);
    CHECK(f.counters("pgo", TierId::memory).puts == 1);
    CHECK(f.counters("pgo", TierId::memory).bytes_in == 5);
    CHECK(f.counters("pgo", TierId::disk).puts == 1);
    CHECK(f.counters("pgo", TierId::disk).bytes_in == 5);
    CHECK(f.disk_files() == 1);

    // Once the disk tier's scan is complete its index is authoritative: a
    // missing key is a miss get_quick proves, counted as get counts it.
    f.wait_for_scan();
    const auto absent = f.store->get_quick("pgo", "absent");
    REQUIRE(absent);
    CHECK_FALSE(*absent);
    CHECK(f.counters("pgo", TierId::memory).misses == 1);
    CHECK(f.counters("pgo", TierId::disk).misses == 1);
    CHECK_FALSE(f.get("pgo", "absent"));
    CHECK(f.counters("pgo", TierId::memory).misses == 2);
    CHECK(f.counters("pgo", TierId::disk).misses == 2);
}

TEST_CASE("store get_quick defers to get whenever it cannot prove a miss", "[store][chain]") {
    SECTION("an entry on disk only") {
        Fixture f;
        REQUIRE(f.store->put("pgo", "k", make_entry("v")));
        REQUIRE(f.store->memory_tier()->clear("pgo").value() == 1);
        f.wait_for_scan();
        CHECK_FALSE(f.store->get_quick("pgo", "k"));
        CHECK(f.get("pgo", "k"));
    }
    SECTION("a remote tier serves the namespace") {
        Fixture f({}, true, true, true);
        f.wait_for_scan();
        CHECK_FALSE(f.store->get_quick("pgo", "absent"));
    }
    SECTION("a file the index has not seen yet is found by a restart's scan") {
        TempDir dir;
        Stats stats;
        {
            Store first(stats, {}, nullptr,
                        std::make_unique<DiskTier>(dir.path(), DiskOptions{}, stats), nullptr);
            REQUIRE(first.put("pgo", "k", make_entry("v")));
        }
        Store second(stats, {}, nullptr,
                     std::make_unique<DiskTier>(dir.path(), DiskOptions{}, stats), nullptr);
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (!second.disk_tier()->scan_complete() &&
               std::chrono::steady_clock::now() < deadline) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        REQUIRE(second.disk_tier()->scan_complete());
        CHECK_FALSE(second.get_quick("pgo", "k"));
        const auto absent = second.get_quick("pgo", "other");
        REQUIRE(absent);
        CHECK_FALSE(*absent);
    }
    SECTION("a tier-less store proves every miss") {
        Fixture f({}, false, false, false);
        const auto absent = f.store->get_quick("pgo", "absent");
        REQUIRE(absent);
        CHECK_FALSE(*absent);
    }
}

TEST_CASE("store disk hit backfills memory", "[store][chain]") {
    Fixture f;
    REQUIRE(f.store->put("fx-graph", "k", make_entry(random_bytes(3000))));
    REQUIRE(f.store->memory_tier()->clear("fx-graph").value() == 1);
    CHECK_FALSE(f.store->get_quick("fx-graph", "k")); // on disk: needs get

    const auto hit = f.get("fx-graph", "k");
    REQUIRE(hit);
    CHECK(hit->value.size() == 3000);
    CHECK(f.counters("fx-graph", TierId::memory).misses == 1);
    CHECK(f.counters("fx-graph", TierId::disk).hits == 1);
    CHECK(f.counters("fx-graph", TierId::disk).bytes_out == 3000);
    CHECK(f.store->memory_tier()->count() == 1);

    const auto again = f.quick_hit("fx-graph", "k");
    REQUIRE(again);
    CHECK(again->value.shares_buffer_with(hit->value));
    CHECK(f.counters("fx-graph", TierId::memory).hits == 1);
    CHECK(f.counters("fx-graph", TierId::disk).hits == 1);
}

TEST_CASE("store remote hit backfills disk and memory", "[store][chain]") {
    Fixture f({}, true, true, true);
    REQUIRE(f.remote->put("pgo", "k", make_entry("from remote")));
    const auto hit = f.get("pgo", "k");
    REQUIRE(hit);
    CHECK(hit->value.text() == "from remote");
    CHECK(f.counters("pgo", TierId::remote).hits == 1);
    CHECK(f.counters("pgo", TierId::disk).misses == 1);
    CHECK(f.store->memory_tier()->count() == 1);
    CHECK(f.disk_files() == 1);
    REQUIRE(f.store->memory_tier()->clear("pgo"));
    CHECK(f.get("pgo", "k"));
    CHECK(f.counters("pgo", TierId::disk).hits == 1);
    CHECK(f.remote->gets == 1);
}

TEST_CASE("store treats a failing tier as a miss", "[store][chain]") {
    SECTION("remote behind local tiers") {
        Fixture f({}, true, true, true);
        f.remote->failing = true;
        CHECK_FALSE(f.get("pgo", "k"));
        CHECK(f.counters("pgo", TierId::remote).errors == 1);
        CHECK(f.counters("pgo", TierId::remote).misses == 1);
        // A put still succeeds locally.
        CHECK(f.store->put("pgo", "k", make_entry("v")).value() == PutOutcome::stored);
        CHECK(f.counters("pgo", TierId::remote).errors == 2);
    }
    SECTION("remote alone") {
        Fixture f({}, false, false, true);
        f.remote->failing = true;
        const auto result = f.store->get("pgo", "k");
        REQUIRE_FALSE(result);
        CHECK(result.error().failure == Failure::timeout);
        const auto put = f.store->put("pgo", "k", make_entry("v"));
        REQUIRE_FALSE(put);
        CHECK(put.error().failure == Failure::timeout);
    }
}

TEST_CASE("store with force_disable stores nothing", "[store][policy]") {
    StorePolicy policy;
    policy.force_disable = true;
    Fixture f(policy);
    CHECK(f.store->put("pgo", "k", make_entry("v")).value() == PutOutcome::stored);
    CHECK(f.store->memory_tier()->count() == 0);
    CHECK(f.disk_files() == 0);
    CHECK_FALSE(f.store->get_quick("pgo", "k")); // left to get, which counts
    CHECK_FALSE(f.get("pgo", "k"));
    CHECK(f.store->exists("pgo", "k").value() == false);
    CHECK(f.counters("pgo", TierId::memory).puts == 1);
    CHECK(f.counters("pgo", TierId::memory).bytes_in == 0);
    CHECK(f.counters("pgo", TierId::memory).misses == 1);
    CHECK(f.counters("pgo", TierId::disk).misses == 1);
    CHECK(f.counters("pgo", TierId::memory).hits == 0);

    // Turning it off at run time takes effect for later calls.
    f.store->set_policy({});
    CHECK(f.store->put("pgo", "k", make_entry("v")).value() == PutOutcome::stored);
    CHECK(f.get("pgo", "k"));
}

TEST_CASE("store keeps locally disabled namespaces out of memory and disk", "[store][policy]") {
    StorePolicy policy;
    policy.locally_disabled = {"fx-graph", "aot-autograd"};
    Fixture f(policy, true, true, true);
    CHECK(f.store->put("fx-graph", "k", make_entry("v")).value() == PutOutcome::stored);
    CHECK(f.store->memory_tier()->count() == 0);
    CHECK(f.disk_files() == 0);
    CHECK(f.remote->size() == 1);
    CHECK_FALSE(f.store->get_quick("fx-graph", "k"));
    // Served by the remote tier, not copied locally.
    CHECK(f.get("fx-graph", "k"));
    CHECK(f.store->memory_tier()->count() == 0);
    CHECK(f.disk_files() == 0);
    CHECK(f.counters("fx-graph", TierId::memory).misses == 0);

    CHECK(f.store->put("pgo", "k", make_entry("v")).value() == PutOutcome::stored);
    CHECK(f.store->memory_tier()->count() == 1);
    CHECK(f.disk_files() == 1);
}

TEST_CASE("store only_if_absent", "[store][put]") {
    Fixture f;
    CHECK(f.store->put("pgo", "k", make_entry("one"), PutMode::only_if_absent).value() ==
          PutOutcome::stored);
    CHECK(f.store->put("pgo", "k", make_entry("two"), PutMode::only_if_absent).value() ==
          PutOutcome::not_stored);
    CHECK(f.get("pgo", "k")->value.text() == "one");

    // A disk-only entry also counts as present.
    REQUIRE(f.store->memory_tier()->clear("pgo"));
    CHECK(f.store->put("pgo", "k", make_entry("three"), PutMode::only_if_absent).value() ==
          PutOutcome::not_stored);

    // An expired entry does not.
    REQUIRE(f.store->put("pgo", "e", make_entry("old", now_ms() - 1)));
    CHECK(f.store->put("pgo", "e", make_entry("new"), PutMode::only_if_absent).value() ==
          PutOutcome::stored);
    CHECK(f.get("pgo", "e")->value.text() == "new");

    CHECK(f.store->put("pgo", "k", make_entry("four")).value() == PutOutcome::stored);
    CHECK(f.get("pgo", "k")->value.text() == "four");
}

TEST_CASE("store only_if_absent stores exactly once under a race", "[store][put][concurrency]") {
    Fixture f;
    constexpr int k_threads = 8;
    constexpr int k_rounds = 20;
    for (int round = 0; round < k_rounds; ++round) {
        const std::string key = fmt::format("race-{}", round);
        std::barrier start(k_threads);
        std::atomic<int> stored{0};
        std::atomic<int> not_stored{0};
        std::atomic<int> winner{-1};
        std::vector<std::thread> threads;
        for (int t = 0; t < k_threads; ++t) {
            threads.emplace_back([&, t] {
                start.arrive_and_wait();
                const auto outcome =
                    f.store->put("autotune", key, make_entry(fmt::format("thread {}", t)),
                                 PutMode::only_if_absent);
                if (outcome && *outcome == PutOutcome::stored) {
                    ++stored;
                    winner = t;
                } else if (outcome) {
                    ++not_stored;
                }
            });
        }
        for (auto& thread : threads) {
            thread.join();
        }
        INFO("round " << round);
        REQUIRE(stored == 1);
        REQUIRE(not_stored == k_threads - 1);
        CHECK(f.get("autotune", key)->value.text() == fmt::format("thread {}", winner.load()));
        REQUIRE(f.store->memory_tier()->clear("autotune"));
        CHECK(f.get("autotune", key)->value.text() == fmt::format("thread {}", winner.load()));
    }
}

TEST_CASE("store refuses values over max_value_size", "[store][put]") {
    StorePolicy policy;
    policy.max_value_size = 100;
    Fixture f(policy);
    const auto refused = f.store->put("pgo", "k", make_entry(random_bytes(101)));
    REQUIRE_FALSE(refused);
    CHECK(refused.error().failure == Failure::too_large);
    CHECK(f.store->memory_tier()->count() == 0);
    CHECK(f.disk_files() == 0);
    CHECK(f.counters("pgo", TierId::memory).puts == 0);
    CHECK(f.store->put("pgo", "k", make_entry(random_bytes(100))).value() == PutOutcome::stored);
}

TEST_CASE("store exists, remove, clear and list", "[store][chain]") {
    Fixture f({}, true, true, true);
    for (int i = 0; i < 12; ++i) {
        REQUIRE(f.store->put("pgo", fmt::format("k{}", i), make_entry("v")));
    }
    REQUIRE(f.store->put("autotune", "k0", make_entry("v")));
    CHECK(f.store->exists("pgo", "k0").value());
    CHECK_FALSE(f.store->exists("pgo", "nope").value());

    CHECK(f.store->remove("pgo", "k0").value() == true);
    CHECK(f.store->remove("pgo", "k0").value() == false);
    CHECK_FALSE(f.store->exists("pgo", "k0").value());

    const auto page = f.store->list("pgo", "", 5);
    REQUIRE(page);
    CHECK(page->entries.size() == 5);
    CHECK_FALSE(page->next_cursor.empty());

    CHECK(f.store->clear("pgo").value() == 11);
    CHECK_FALSE(f.store->memory_tier()->contains("pgo", "k1"));
    CHECK_FALSE(f.store->disk_tier()->exists("pgo", "k1").value());
    CHECK(f.store->memory_tier()->count() == 1);
    CHECK(f.store->exists("autotune", "k0").value());
    const auto after = f.store->list("pgo", "", 5);
    REQUIRE(after);
    CHECK(after->entries.empty());
}

TEST_CASE("store lists from memory without a disk tier", "[store][chain]") {
    Fixture f({}, true, false);
    for (int i = 0; i < 3; ++i) {
        REQUIRE(f.store->put("pgo", fmt::format("k{}", i), make_entry("vv")));
    }
    const auto page = f.store->list("pgo", "", 10);
    REQUIRE(page);
    REQUIRE(page->entries.size() == 3);
    CHECK(page->entries[0].key == "k0");
    CHECK(page->entries[2].size == 2);
    CHECK(f.store->clear("pgo").value() == 3);
}

TEST_CASE("store tier summary", "[store][chain]") {
    Fixture f;
    f.store->disk_tier()->wait_for_scan();
    REQUIRE(f.store->put("pgo", "k", make_entry(random_bytes(100))));
    const nlohmann::json summary = f.store->tier_summary();
    CHECK(summary["memory"]["count"] == 1);
    CHECK(summary["memory"]["bytes"] == MemoryTier::charge_of("pgo", "k", 100));
    CHECK(summary["memory"]["capacity"] == 1 << 20);
    CHECK(summary["disk"]["count"] == 1);
    // The space used as `du` counts it (here: small.mdb, the entry is small).
    CHECK(summary["disk"]["bytes"] == f.du_of_entries());
    CHECK(summary["disk"]["bytes"] > 0);
    CHECK(summary["disk"]["scan_complete"] == true);
    CHECK(summary["remote"].is_null());
}

TEST_CASE("stats report counters per namespace and tier", "[store][stats]") {
    Stats stats;
    stats.tier("pgo", TierId::disk).hits += 3;
    stats.tier("pgo", TierId::memory).evictions += 2;
    stats.daemon().requests += 7;
    CHECK(&stats.ns("pgo") == &stats.ns("pgo"));
    const nlohmann::json json = stats.to_json();
    CHECK(json["namespaces"]["pgo"]["disk"]["hits"] == 3);
    CHECK(json["namespaces"]["pgo"]["memory"]["evictions"] == 2);
    CHECK(json["namespaces"]["pgo"]["remote"]["misses"] == 0);
    CHECK(json["daemon"]["requests"] == 7);
    CHECK(json["uptime_s"].get<double>() >= 0.0);
    CHECK(tier_name(TierId::remote) == "remote");
}

namespace {

// An async disk tier whose write queue holds `queue_bytes`.
std::unique_ptr<DiskTier> async_disk(const TempDir& dir, Stats& stats, std::uint64_t queue_bytes) {
    DiskOptions options;
    options.write_mode = DiskWriteMode::async;
    options.write_queue_bytes = queue_bytes;
    return std::make_unique<DiskTier>(dir.path(), options, stats);
}

} // namespace

TEST_CASE("store put_quick stores what needs no waiting, else defers to put", "[store][chain]") {
    TempDir dir;
    Stats stats;
    // Room for about two 1000-byte entries.
    Store store(stats, {}, std::make_unique<MemoryTier>(1 << 20, stats),
                async_disk(dir, stats, 2500), nullptr);
    auto entry = make_entry(std::string(1000, 'q'));
    entry.created_ms = now_ms();
    store.disk_tier()->pause_writes(true);

    const auto stored = store.put_quick("pgo", "a", entry, PutMode::overwrite);
    REQUIRE(stored);
    REQUIRE(*stored);
    CHECK(**stored == PutOutcome::stored);
    CHECK(stats.tier("pgo", TierId::memory).puts == 1);
    CHECK(stats.tier("pgo", TierId::disk).puts == 1);
    CHECK(stats.tier("pgo", TierId::disk).bytes_in == 1000);
    REQUIRE(store.put_quick("pgo", "b", entry, PutMode::overwrite));

    // Each of these needs put(): nothing is done.
    CHECK_FALSE(store.put_quick("pgo", "c", entry, PutMode::overwrite)); // the queue is full
    CHECK_FALSE(store.put_quick("pgo", "d", entry, PutMode::only_if_absent));
    auto undated = entry;
    undated.created_ms = 0;
    CHECK_FALSE(store.put_quick("pgo", "e", undated, PutMode::overwrite));
    CHECK(stats.tier("pgo", TierId::memory).puts == 2);
    CHECK(stats.tier("pgo", TierId::disk).puts == 2);
    CHECK_FALSE(store.memory_tier()->lookup("pgo", "c"));

    store.disk_tier()->pause_writes(false);
    store.disk_tier()->wait_for_writes();
    const auto hit = store.get("pgo", "b");
    REQUIRE(hit);
    REQUIRE(*hit);
    CHECK((*hit)->value.text() == entry.value.text());
    REQUIRE(store.memory_tier()->clear("pgo"));
    const auto from_disk = store.get("pgo", "a");
    REQUIRE(from_disk);
    REQUIRE(*from_disk);
    CHECK((*from_disk)->value.text() == entry.value.text());
}

TEST_CASE("store put_quick_many stores the prefix put_quick would, the last put of a key winning",
          "[store][chain]") {
    TempDir dir;
    Stats stats;
    // Room for about four 1000-byte entries.
    Store store(stats, {}, std::make_unique<MemoryTier>(1 << 20, stats),
                async_disk(dir, stats, 4500), nullptr);
    const auto put_of = [](std::string_view key, char fill) {
        auto entry = make_entry(std::string(1000, fill));
        entry.created_ms = now_ms();
        return QuickPut{"pgo", key, entry};
    };
    store.disk_tier()->pause_writes(true);

    // The same key twice in one batch: the later value is the one kept.
    std::vector<QuickPut> puts{put_of("a", '1'), put_of("b", '2'), put_of("a", '3')};
    puts.push_back(put_of("undated", '4'));
    puts.back().entry.created_ms = 0; // needs put(): the prefix ends here
    puts.push_back(put_of("c", '5'));
    CHECK(store.put_quick_many(puts) == 3);
    CHECK(stats.tier("pgo", TierId::memory).puts == 3);
    CHECK(stats.tier("pgo", TierId::disk).puts == 3);
    CHECK(stats.tier("pgo", TierId::disk).bytes_in == 3000);
    CHECK_FALSE(store.memory_tier()->lookup("pgo", "undated"));
    CHECK_FALSE(store.memory_tier()->lookup("pgo", "c"));

    // A full write queue ends the prefix too, leaving memory alone as well.
    std::vector<QuickPut> more{put_of("d", '6'), put_of("e", '7'), put_of("f", '8')};
    CHECK(store.put_quick_many(more) == 2);
    CHECK_FALSE(store.memory_tier()->lookup("pgo", "f"));
    CHECK(store.put_quick_many(std::span(more).subspan(2)) == 0);

    store.disk_tier()->pause_writes(false);
    store.disk_tier()->wait_for_writes();
    REQUIRE(store.memory_tier()->clear("pgo"));
    for (const auto& [key, fill] :
         {std::pair{"a", '3'}, std::pair{"b", '2'}, std::pair{"d", '6'}, std::pair{"e", '7'}}) {
        const auto from_disk = store.get("pgo", key);
        REQUIRE(from_disk);
        REQUIRE(*from_disk);
        CHECK((*from_disk)->value.text() == std::string(1000, fill));
    }
    const auto absent = store.get("pgo", "f");
    REQUIRE(absent);
    CHECK_FALSE(*absent);
}
