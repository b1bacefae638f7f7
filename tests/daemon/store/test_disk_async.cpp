// SPDX-License-Identifier: MIT
// DiskTier with `DiskWriteMode::async`: puts are queued and written behind.
#include <atomic>
#include <chrono>
#include <set>
#include <thread>
#include <vector>

#include "daemon/store/disk/disk_entry.hpp"
#include "daemon/store/disk/disk_layout.hpp"
#include "daemon/store/disk/disk_tier.hpp"
#include "tests/daemon/store/helpers.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>
#include <fmt/format.h>

using namespace pt2cache::daemon::store;
using pt2cache::tests::make_entry;
using pt2cache::tests::random_bytes;
using pt2cache::tests::TempDir;
using pt2cache::tests::text_bytes;
using pt2cache::tests::wait_until;
namespace fs = std::filesystem;

namespace {

// These tests are about the file store: every entry a file (the small-entry
// store has its own tests in test_disk_small.cpp).
DiskOptions files_only(DiskOptions options) {
    options.small_entry_max = 0;
    return options;
}

DiskOptions async_options(std::uint64_t queue_bytes = 64ULL << 20) {
    DiskOptions options = files_only({1ULL << 30, 1ULL << 40, 1});
    options.write_mode = DiskWriteMode::async;
    options.write_queue_bytes = queue_bytes;
    return options;
}

fs::path entry_path(const fs::path& root, std::string_view ns, std::string_view key) {
    const std::string hex = entry_hash(ns, key).hex();
    return root / "v1" / std::string(ns) / hex.substr(0, 2) / hex;
}

std::optional<Entry> get(DiskTier& tier, std::string_view ns, std::string_view key) {
    auto result = tier.get(ns, key);
    REQUIRE(result);
    return *result;
}

std::string value_of(DiskTier& tier, std::string_view ns, std::string_view key) {
    auto entry = get(tier, ns, key);
    return entry ? std::string(entry->value.text()) : std::string("<miss>");
}

bool exists(DiskTier& tier, std::string_view ns, std::string_view key) {
    auto result = tier.exists(ns, key);
    REQUIRE(result);
    return *result;
}

} // namespace

TEST_CASE("async disk tier round trip", "[store][disk][async]") {
    TempDir dir;
    Stats stats;
    DiskTier tier(dir.path(), async_options(), stats);
    REQUIRE(tier.put("fx-graph", "k1", make_entry("hello")));
    const auto big = text_bytes(100'000);
    REQUIRE(tier.put("fx-graph", "big", make_entry(big)));
    CHECK(value_of(tier, "fx-graph", "k1") == "hello");
    CHECK(exists(tier, "fx-graph", "k1"));

    tier.wait_for_writes();
    CHECK(tier.queued_writes() == 0);
    CHECK(tier.queued_bytes() == 0);
    CHECK(fs::exists(entry_path(dir.path(), "fx-graph", "k1")));
    CHECK(value_of(tier, "fx-graph", "k1") == "hello");
    const auto got = get(tier, "fx-graph", "big");
    REQUIRE(got);
    CHECK(std::equal(got->value.bytes().begin(), got->value.bytes().end(), big.begin(), big.end()));
    CHECK(tier.count() >= 2);
    CHECK(stats.tier("fx-graph", TierId::disk).errors.load() == 0);

    // Errors of a bad call are still answered synchronously.
    CHECK_FALSE(tier.put("../x", "k", make_entry("v")));
    CHECK_FALSE(tier.put("fx-graph", std::string(70'000, 'k'), make_entry("v")));
}

TEST_CASE("async disk tier compresses queued values", "[store][disk][async]") {
    TempDir dir;
    Stats stats;
    DiskOptions options = async_options();
    options.compress_threshold = 1024;
    const auto value = text_bytes(200'000);
    {
        DiskTier tier(dir.path(), options, stats);
        tier.pause_writes(true);
        REQUIRE(tier.put("fx-graph", "k", make_entry(value)));
        const auto queued = get(tier, "fx-graph", "k");
        REQUIRE(queued);
        CHECK(queued->value.size() == value.size());
    }
    CHECK(fs::file_size(entry_path(dir.path(), "fx-graph", "k")) < value.size() / 4);
    DiskTier reopened(dir.path(), files_only({1ULL << 30, 1024, 1}), stats);
    const auto got = get(reopened, "fx-graph", "k");
    REQUIRE(got);
    CHECK(std::equal(got->value.bytes().begin(), got->value.bytes().end(), value.begin(),
                     value.end()));
}

TEST_CASE("async disk tier serves queued entries before they are written", "[store][disk][async]") {
    TempDir dir;
    Stats stats;
    DiskTier tier(dir.path(), async_options(), stats);
    tier.pause_writes(true);
    REQUIRE(tier.put("fx-graph", "k", make_entry("queued")));
    REQUIRE(tier.put("fx-graph", "gone", make_entry("old", 1))); // expired long ago
    CHECK(tier.queued_writes() == 2);
    CHECK(tier.queued_bytes() > 0);
    CHECK_FALSE(fs::exists(entry_path(dir.path(), "fx-graph", "k")));

    CHECK(value_of(tier, "fx-graph", "k") == "queued");
    CHECK(exists(tier, "fx-graph", "k"));
    CHECK(value_of(tier, "fx-graph", "gone") == "<miss>");
    CHECK_FALSE(exists(tier, "fx-graph", "gone"));
    CHECK(value_of(tier, "fx-graph", "other") == "<miss>");
    CHECK(value_of(tier, "autotune", "k") == "<miss>");

    tier.pause_writes(false);
    tier.wait_for_writes();
    CHECK(fs::exists(entry_path(dir.path(), "fx-graph", "k")));
    CHECK(value_of(tier, "fx-graph", "k") == "queued");
}

TEST_CASE("async disk tier counts queued entries once", "[store][disk][async]") {
    TempDir dir;
    Stats stats;
    DiskTier tier(dir.path(), async_options(), stats);
    tier.wait_for_scan();
    tier.pause_writes(true);
    for (const char* key : {"a", "b", "c"}) {
        REQUIRE(tier.put("pgo", key, make_entry(key)));
    }
    CHECK(tier.count() == 0); // no file yet
    CHECK(tier.entry_count() == 3);
    tier.pause_writes(false);
    tier.wait_for_writes();
    CHECK(tier.count() == 3);
    CHECK(tier.entry_count() == 3);

    // A queued rewrite of an entry that has a file is not a new entry.
    tier.pause_writes(true);
    REQUIRE(tier.put("pgo", "a", make_entry("again")));
    REQUIRE(tier.put("pgo", "d", make_entry("d")));
    CHECK(tier.entry_count() == 4);
    tier.pause_writes(false);
    tier.wait_for_writes();
    CHECK(tier.entry_count() == 4);
}

TEST_CASE("async disk tier writes everything queued when destroyed", "[store][disk][async]") {
    TempDir dir;
    Stats stats;
    constexpr int k_entries = 500;
    {
        DiskTier tier(dir.path(), async_options(), stats);
        for (int i = 0; i < k_entries; ++i) {
            REQUIRE(tier.put("fx-graph", fmt::format("key-{}", i),
                             make_entry(fmt::format("value-{}", i))));
        }
    }
    DiskTier reopened(dir.path(), files_only({1ULL << 30, 1ULL << 40, 1}), stats);
    for (int i = 0; i < k_entries; ++i) {
        INFO(i);
        CHECK(value_of(reopened, "fx-graph", fmt::format("key-{}", i)) ==
              fmt::format("value-{}", i));
    }
    reopened.wait_for_scan();
    CHECK(reopened.count() == k_entries);
}

TEST_CASE("async disk tier destructor writes a paused queue", "[store][disk][async]") {
    TempDir dir;
    Stats stats;
    {
        DiskTier tier(dir.path(), async_options(), stats);
        tier.pause_writes(true);
        REQUIRE(tier.put("fx-graph", "k", make_entry("v")));
    }
    CHECK(fs::exists(entry_path(dir.path(), "fx-graph", "k")));
}

TEST_CASE("async disk tier remove cancels a queued write", "[store][disk][async]") {
    TempDir dir;
    Stats stats;
    DiskTier tier(dir.path(), async_options(), stats);
    // "old" is on disk; its newer value and "new" are only queued.
    REQUIRE(tier.put("fx-graph", "old", make_entry("v1")));
    tier.wait_for_writes();
    REQUIRE(fs::exists(entry_path(dir.path(), "fx-graph", "old")));
    tier.pause_writes(true);
    REQUIRE(tier.put("fx-graph", "old", make_entry("v2")));
    REQUIRE(tier.put("fx-graph", "new", make_entry("v")));

    auto removed = tier.remove("fx-graph", "new");
    REQUIRE(removed);
    CHECK(*removed);
    removed = tier.remove("fx-graph", "old");
    REQUIRE(removed);
    CHECK(*removed);
    removed = tier.remove("fx-graph", "never");
    REQUIRE(removed);
    CHECK_FALSE(*removed);
    CHECK(tier.queued_writes() == 0);
    CHECK(value_of(tier, "fx-graph", "new") == "<miss>");

    tier.pause_writes(false);
    tier.wait_for_writes();
    CHECK_FALSE(fs::exists(entry_path(dir.path(), "fx-graph", "new")));
    CHECK_FALSE(fs::exists(entry_path(dir.path(), "fx-graph", "old")));
    CHECK(value_of(tier, "fx-graph", "old") == "<miss>");
}

TEST_CASE("async disk tier clear cancels queued writes of the namespace", "[store][disk][async]") {
    TempDir dir;
    Stats stats;
    DiskTier tier(dir.path(), async_options(), stats);
    REQUIRE(tier.put("fx-graph", "written", make_entry("v")));
    tier.wait_for_writes();
    tier.pause_writes(true);
    REQUIRE(tier.put("fx-graph", "written", make_entry("v2"))); // file and queued: counted once
    REQUIRE(tier.put("fx-graph", "queued", make_entry("v")));
    REQUIRE(tier.put("autotune", "kept", make_entry("v")));

    const auto cleared = tier.clear("fx-graph");
    REQUIRE(cleared);
    CHECK(*cleared == 2);
    CHECK(tier.queued_writes() == 1);
    tier.pause_writes(false);
    tier.wait_for_writes();
    CHECK_FALSE(fs::exists(entry_path(dir.path(), "fx-graph", "written")));
    CHECK_FALSE(fs::exists(entry_path(dir.path(), "fx-graph", "queued")));
    CHECK(value_of(tier, "autotune", "kept") == "v");
}

TEST_CASE("async disk tier coalesces writes of one key", "[store][disk][async]") {
    TempDir dir;
    Stats stats;
    DiskTier tier(dir.path(), async_options(), stats);
    tier.pause_writes(true);
    for (int i = 0; i < 10; ++i) {
        REQUIRE(tier.put("fx-graph", "k", make_entry(fmt::format("v{}", i))));
    }
    CHECK(tier.queued_writes() == 1);
    CHECK(value_of(tier, "fx-graph", "k") == "v9");
    tier.pause_writes(false);
    tier.wait_for_writes();
    CHECK(value_of(tier, "fx-graph", "k") == "v9");

    // Writes racing with the writers still end with the last value.
    for (int round = 0; round < 20; ++round) {
        for (int i = 0; i < 50; ++i) {
            REQUIRE(tier.put("fx-graph", "hot", make_entry(fmt::format("r{}-{}", round, i))));
        }
        tier.wait_for_writes();
        CHECK(value_of(tier, "fx-graph", "hot") == fmt::format("r{}-49", round));
    }
    DiskTier reopened(dir.path(), files_only({1ULL << 30, 1ULL << 40, 1}), stats);
    CHECK(value_of(reopened, "fx-graph", "hot") == "r19-49");
}

TEST_CASE("async disk tier back-pressure never drops a write",
          "[store][disk][async][concurrency]") {
    TempDir dir;
    Stats stats;
    const auto value = random_bytes(1000);
    std::size_t expected = 0;
    {
        // Room for about two entries.
        DiskTier tier(dir.path(), async_options(2500), stats);
        SECTION("a full queue makes put wait") {
            tier.pause_writes(true);
            REQUIRE(tier.put("fx-graph", "a", make_entry(value)));
            REQUIRE(tier.put("fx-graph", "b", make_entry(value)));
            std::atomic<bool> returned{false};
            std::thread blocked(
                [&] { returned = tier.put("fx-graph", "c", make_entry(value)).has_value(); });
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
            CHECK_FALSE(returned);
            CHECK(tier.queued_writes() == 2);
            // Replacing a queued write needs no room.
            REQUIRE(tier.put("fx-graph", "a", make_entry(value)));
            tier.pause_writes(false);
            blocked.join();
            CHECK(returned);
            expected = 3;
        }
        SECTION("many writers through a tiny queue") {
            // Catch2 assertions are not thread-safe: count failures instead.
            std::atomic<int> failures{0};
            std::atomic<std::uint64_t> most_queued{0};
            std::vector<std::thread> threads;
            for (int t = 0; t < 4; ++t) {
                threads.emplace_back([&, t] {
                    for (int i = 0; i < 100; ++i) {
                        if (!tier.put("fx-graph", fmt::format("k{}-{}", t, i), make_entry(value))) {
                            ++failures;
                        }
                        std::uint64_t seen = most_queued.load();
                        const std::uint64_t now = tier.queued_bytes();
                        while (now > seen && !most_queued.compare_exchange_weak(seen, now)) {
                        }
                    }
                });
            }
            for (auto& thread : threads) {
                thread.join();
            }
            CHECK(failures == 0);
            CHECK(most_queued.load() <= 2500);
            expected = 400;
        }
        SECTION("an entry larger than the queue is admitted alone") {
            REQUIRE(tier.put("fx-graph", "small", make_entry(value)));
            REQUIRE(tier.put("fx-graph", "huge", make_entry(random_bytes(10'000))));
            expected = 2;
        }
    }
    DiskTier reopened(dir.path(), files_only({1ULL << 30, 1ULL << 40, 1}), stats);
    reopened.wait_for_scan();
    std::set<std::string> seen;
    std::string cursor;
    do {
        auto page = reopened.list("fx-graph", cursor, 1000);
        REQUIRE(page);
        for (const auto& info : page->entries) {
            seen.insert(info.key);
        }
        cursor = page->next_cursor;
    } while (!cursor.empty());
    CHECK(seen.size() == expected);
    CHECK(reopened.count() == seen.size());
    CHECK(stats.tier("fx-graph", TierId::disk).errors.load() == 0);
}

TEST_CASE("async disk tier counts failed writes as errors", "[store][disk][async]") {
    TempDir dir;
    Stats stats;
    // v1 is a file: no namespace directory can be created under it.
    pt2cache::tests::write_file(dir.path() / "v1", std::span<const std::byte>());
    DiskTier tier(dir.path(), async_options(), stats);
    REQUIRE(tier.put("fx-graph", "a", make_entry("v")));
    REQUIRE(tier.put("fx-graph", "b", make_entry("v")));
    tier.wait_for_writes();
    CHECK(stats.tier("fx-graph", TierId::disk).errors.load() == 2);
    CHECK(tier.queued_writes() == 0);
    CHECK(value_of(tier, "fx-graph", "a") == "<miss>");
}

TEST_CASE("async disk tier lists the entries queued before the call", "[store][disk][async]") {
    TempDir dir;
    Stats stats;
    DiskTier tier(dir.path(), async_options(), stats);
    for (int i = 0; i < 50; ++i) {
        REQUIRE(tier.put("fx-graph", fmt::format("k{}", i), make_entry("v")));
    }
    auto page = tier.list("fx-graph", "", 100);
    REQUIRE(page);
    CHECK(page->entries.size() == 50);
}

TEST_CASE("async disk tier under concurrent puts, gets and removes",
          "[store][disk][async][concurrency]") {
    // Every entry a file, or (500-byte values) every entry in small.mdb.
    const std::uint64_t small_entry_max = GENERATE(0ULL, 16ULL << 10);
    TempDir dir;
    Stats stats;
    DiskOptions options = async_options(64 << 10);
    options.small_entry_max = small_entry_max;
    DiskTier tier(dir.path(), options, stats);
    std::atomic<bool> stop{false};
    std::atomic<int> failures{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 3; ++t) {
        threads.emplace_back([&, t] {
            for (int i = 0; !stop; ++i) {
                const std::string key = fmt::format("k{}", i % 40);
                bool ok = true;
                switch ((i + t) % 3) {
                case 0:
                    ok = tier.put("fx-graph", key,
                                  make_entry(random_bytes(500, static_cast<std::uint64_t>(i))))
                             .has_value();
                    break;
                case 1:
                    ok = tier.get("fx-graph", key).has_value();
                    break;
                default:
                    ok = tier.remove("fx-graph", key).has_value();
                    break;
                }
                failures += ok ? 0 : 1;
            }
        });
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    stop = true;
    for (auto& thread : threads) {
        thread.join();
    }
    CHECK(failures == 0);
    tier.wait_for_writes();
    // What get answers is what the store holds: nothing is still in flight.
    for (int i = 0; i < 40; ++i) {
        const std::string key = fmt::format("k{}", i);
        const bool stored =
            small_entry_max == 0
                ? fs::exists(entry_path(dir.path(), "fx-graph", key))
                : tier.small_store()->contains("fx-graph", entry_hash("fx-graph", key));
        CHECK(exists(tier, "fx-graph", key) == stored);
        CHECK_FALSE((small_entry_max != 0 && fs::exists(entry_path(dir.path(), "fx-graph", key))));
    }
    CHECK(stats.tier("fx-graph", TierId::disk).errors.load() == 0);
    CHECK(stats.tier("fx-graph", TierId::disk).corrupt.load() == 0);
}

TEST_CASE("async disk tier reports the age of its oldest queued write", "[store][disk][async]") {
    using namespace std::chrono_literals;
    TempDir dir;
    Stats stats;
    DiskTier tier(dir.path(), async_options(), stats);
    CHECK(tier.oldest_queued_age() == std::chrono::steady_clock::duration::zero());
    tier.pause_writes(true);
    REQUIRE(tier.put("fx-graph", "first", make_entry("1")));
    std::this_thread::sleep_for(60ms);
    REQUIRE(tier.put("fx-graph", "second", make_entry("2")));
    const auto age = tier.oldest_queued_age();
    CHECK(age >= 60ms); // the first write's, not the second's
    CHECK(age < 60s);
    std::this_thread::sleep_for(20ms);
    CHECK(tier.oldest_queued_age() >= age + 20ms); // it keeps growing while queued
    tier.pause_writes(false);
    tier.wait_for_writes();
    CHECK(tier.oldest_queued_age() == std::chrono::steady_clock::duration::zero());

    TempDir sync_dir;
    DiskTier sync(sync_dir.path(), files_only({1ULL << 30, 1ULL << 40, 1}), stats);
    CHECK_FALSE(sync.async_writes());
    CHECK(tier.async_writes());
}

TEST_CASE("try_put queues only what needs no waiting and no compression", "[store][disk][async]") {
    TempDir dir;
    Stats stats;
    const auto value = random_bytes(1000);
    DiskOptions options = async_options(2500); // room for about two entries
    options.compress_threshold = 4096;
    DiskTier tier(dir.path(), options, stats);
    tier.pause_writes(true);
    auto first = tier.try_put("fx-graph", "a", make_entry(value));
    REQUIRE(first);
    REQUIRE(*first);
    REQUIRE(tier.try_put("fx-graph", "b", make_entry(value)));
    CHECK(tier.queued_writes() == 2);
    // Full: nothing is queued and nothing waits.
    const auto started = std::chrono::steady_clock::now();
    CHECK_FALSE(tier.try_put("fx-graph", "c", make_entry(value)));
    CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(1));
    CHECK(tier.queued_writes() == 2);
    CHECK(value_of(tier, "fx-graph", "c") == "<miss>");
    // Replacing a queued write needs no room.
    CHECK(tier.try_put("fx-graph", "a", make_entry(value)));
    // A value to compress goes through put().
    CHECK_FALSE(tier.try_put("fx-graph", "big", make_entry(text_bytes(5000))));
    tier.pause_writes(false);
    tier.wait_for_writes();
    CHECK(fs::exists(entry_path(dir.path(), "fx-graph", "a")));
    CHECK(fs::exists(entry_path(dir.path(), "fx-graph", "b")));
    CHECK_FALSE(fs::exists(entry_path(dir.path(), "fx-graph", "c")));
    CHECK(get(tier, "fx-graph", "a")->value.bytes().size() == value.size());
}

TEST_CASE("try_put is for async mode only", "[store][disk][async]") {
    TempDir dir;
    Stats stats;
    DiskTier tier(dir.path(), DiskOptions{1ULL << 30, 1ULL << 40, 1}, stats);
    CHECK_FALSE(tier.try_put("fx-graph", "a", make_entry("v")));
    CHECK(value_of(tier, "fx-graph", "a") == "<miss>");
}
