// SPDX-License-Identifier: MIT
// Salvage of a quarantined small.mdb: what can still be read of it, verified
// and not changed since the quarantine, is put back into the fresh store
// (docs/architecture.md, "Salvage").
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "daemon/store/disk/disk_layout.hpp"
#include "daemon/store/disk/disk_small_lmdb.hpp"
#include "daemon/store/disk/disk_small_salvage.hpp"
#include "daemon/store/disk/disk_small_store.hpp"
#include "daemon/store/disk/disk_tier.hpp"
#include "tests/daemon/store/helpers.hpp"
#include "tests/daemon/store/small_damage.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>
#include <fmt/format.h>

using namespace pt2cache::daemon::store;
using pt2cache::tests::Damage;
using pt2cache::tests::damage_leaves_holding;
using pt2cache::tests::make_entry;
using pt2cache::tests::TempDir;
namespace fs = std::filesystem;

namespace {

DiskOptions small_sync_options() {
    DiskOptions options;
    options.max_size = 1ULL << 30;
    options.compress_threshold = 1ULL << 40;
    options.write_mode = DiskWriteMode::sync;
    options.small_entry_max = 16 << 10;
    return options;
}

// A value that names its entry: another entry's bytes would show.
std::string value_of(std::string_view ns, int i) {
    return fmt::format("{}/k{}:", ns, i) + std::string(100, 'x');
}

void put_values(DiskTier& tier, std::string_view ns, int count) {
    for (int i = 0; i < count; ++i) {
        REQUIRE(tier.put(ns, fmt::format("k{}", i), make_entry(value_of(ns, i))));
    }
}

// Reads k0..k<count - 1> of `ns`: how many hit. Every hit holds its own value.
std::uint64_t count_hits(DiskTier& tier, std::string_view ns, int count) {
    std::uint64_t hits = 0;
    for (int i = 0; i < count; ++i) {
        auto got = tier.get(ns, fmt::format("k{}", i));
        REQUIRE(got);
        if (*got) {
            CHECK((*got)->value.text() == value_of(ns, i));
            ++hits;
        }
    }
    return hits;
}

// Damages the leaves that hold pgo/k<damaged> (one per tree, and free pages
// that an earlier transaction left holding it) and reads it: a counted
// corrupt miss, and the store is quarantined.
void quarantine_by_reading(DiskTier& tier, const fs::path& dir, Stats& stats, int damaged) {
    const std::string key = fmt::format("k{}", damaged);
    REQUIRE(damage_leaves_holding(dir / "small.mdb",
                                  small_lmdb::make_key("pgo", entry_hash("pgo", key)),
                                  Damage::not_a_leaf) >= 2);
    auto got = tier.get("pgo", key);
    REQUIRE(got);
    CHECK_FALSE(*got);
    CHECK(stats.tier("pgo", TierId::disk).corrupt == 1);
    CHECK(stats.daemon().small_store_recoveries == 1);
}

} // namespace

TEST_CASE("the readable entries of a quarantined small store are put back",
          "[store][disk][small]") {
    TempDir dir;
    Stats stats;
    auto tier = std::make_unique<DiskTier>(dir.path(), small_sync_options(), stats);
    tier->wait_for_scan();
    put_values(*tier, "pgo", 400);
    REQUIRE(tier->put("fx", "large", make_entry(std::string(100 << 10, 'L')))); // a file
    REQUIRE(tier->count() == 401);

    quarantine_by_reading(*tier, dir.path(), stats, 200);
    tier->wait_for_salvage();
    // The walk forward stops at the damaged leaf, the walk backward comes
    // down to it: only that leaf's entries (a few dozen at most) are lost.
    const std::uint64_t salvaged = stats.daemon().small_store_salvaged.load();
    CHECK(salvaged < 400);
    CHECK(salvaged >= 360);
    CHECK(tier->count() == 1 + salvaged);
    CHECK(count_hits(*tier, "pgo", 400) == salvaged);
    auto large = tier->get("fx", "large");
    REQUIRE(large);
    CHECK(*large);
    CHECK(stats.tier("pgo", TierId::disk).corrupt == 1); // the read that found the damage
    CHECK(tier->small_store()->quarantines() == 1);

    // They are in the fresh store, and there after a restart.
    tier.reset();
    Stats restarted;
    tier = std::make_unique<DiskTier>(dir.path(), small_sync_options(), restarted);
    tier->wait_for_scan();
    CHECK(tier->count() == 1 + salvaged);
    CHECK(count_hits(*tier, "pgo", 400) == salvaged);
    CHECK(restarted.daemon().small_store_recoveries == 0);
}

TEST_CASE("salvage seeks past damage: two damaged leaves far apart cost their own entries",
          "[store][disk][small]") {
    TempDir dir;
    Stats stats;
    DiskTier tier(dir.path(), small_sync_options(), stats);
    tier.wait_for_scan();
    put_values(tier, "pgo", 400);
    // In LMDB's order of the keys: the leaves of the 40th and the 360th.
    std::vector<std::pair<std::string, int>> order;
    for (int i = 0; i < 400; ++i) {
        order.emplace_back(small_lmdb::make_key("pgo", entry_hash("pgo", fmt::format("k{}", i))),
                           i);
    }
    std::sort(order.begin(), order.end());
    REQUIRE(damage_leaves_holding(dir.path() / "small.mdb", order[360].first, Damage::not_a_leaf) >=
            2);
    quarantine_by_reading(tier, dir.path(), stats, order[40].second);
    tier.wait_for_salvage();
    // Walking forward to the first and back down to the second would lose
    // the 300 between them.
    const std::uint64_t salvaged = stats.daemon().small_store_salvaged.load();
    CHECK(salvaged >= 400 - 80);
    CHECK(salvaged <= 398);
    CHECK(count_hits(tier, "pgo", 400) == salvaged);
}

TEST_CASE("salvage brings back nothing changed since the quarantine", "[store][disk][small]") {
    TempDir dir;
    Stats stats;
    DiskTier tier(dir.path(), small_sync_options(), stats);
    tier.wait_for_scan();
    put_values(tier, "pgo", 300);
    put_values(tier, "tune", 50);
    tier.hold_salvage(true);
    quarantine_by_reading(tier, dir.path(), stats, 150);

    // Since the quarantine: k1 put anew, k2 removed (it is not in the fresh
    // store: nothing to remove there), k3 put and removed, `tune` cleared.
    REQUIRE(tier.put("pgo", "k1", make_entry("newer")));
    REQUIRE(tier.remove("pgo", "k2"));
    REQUIRE(tier.put("pgo", "k3", make_entry("short-lived")));
    REQUIRE(tier.remove("pgo", "k3"));
    REQUIRE(tier.clear("tune"));
    tier.hold_salvage(false);
    tier.wait_for_salvage();

    auto k1 = tier.get("pgo", "k1");
    REQUIRE(k1);
    REQUIRE(*k1);
    CHECK((*k1)->value.text() == "newer");
    for (const std::string_view key : {"k2", "k3"}) {
        auto gone = tier.get("pgo", key);
        REQUIRE(gone);
        CHECK_FALSE(*gone);
    }
    CHECK(count_hits(tier, "tune", 50) == 0);
    // The other entries of `pgo` came back (k1..k3 and the damaged leaf's not).
    const std::uint64_t salvaged = stats.daemon().small_store_salvaged.load();
    CHECK(salvaged >= 250);
    CHECK(salvaged <= 297);
    CHECK(tier.count() == salvaged + 1);
}

TEST_CASE("salvage running beside puts, removes and a CLEAR leaves each change standing",
          "[store][disk][small][concurrency]") {
    constexpr int k_keys = 600;
    TempDir dir;
    Stats stats;
    DiskTier tier(dir.path(), small_sync_options(), stats);
    tier.wait_for_scan();
    put_values(tier, "pgo", k_keys);
    put_values(tier, "tune", 100);
    tier.hold_salvage(true);
    quarantine_by_reading(tier, dir.path(), stats, 300);

    // The last change of each key the changer touched: its value, or a miss.
    std::map<int, std::optional<std::string>> changed;
    int failed = 0; // Catch's assertions are for the test's own thread
    std::thread changer([&] {
        std::mt19937 random(7);
        for (int step = 0; step < 300; ++step) {
            if (step == 30) {
                tier.hold_salvage(false); // the salvage runs from here on
            }
            if (step == 150) {
                failed += tier.clear("tune") ? 0 : 1;
            }
            const int i = static_cast<int>(random() % k_keys);
            const std::string key = fmt::format("k{}", i);
            if (random() % 2 == 0) {
                const std::string value = fmt::format("step {}", step);
                failed += tier.put("pgo", key, make_entry(value)) ? 0 : 1;
                changed[i] = value;
            } else {
                failed += tier.remove("pgo", key) ? 0 : 1;
                changed[i] = std::nullopt;
            }
        }
    });
    changer.join();
    REQUIRE(failed == 0);
    tier.wait_for_salvage();

    std::uint64_t untouched_hits = 0;
    for (int i = 0; i < k_keys; ++i) {
        auto got = tier.get("pgo", fmt::format("k{}", i));
        REQUIRE(got);
        const auto value = *got ? std::optional((*got)->value.text()) : std::nullopt;
        if (const auto it = changed.find(i); it != changed.end()) {
            CHECK(value == it->second);
        } else if (value) {
            CHECK(*value == value_of("pgo", i)); // salvaged
            ++untouched_hits;
        }
    }
    CHECK(untouched_hits > 0);
    CHECK(count_hits(tier, "tune", 100) == 0);
}

TEST_CASE("a quarantined file is salvaged only as the store last committed it",
          "[store][disk][small]") {
    TempDir dir;
    const std::string path = (dir.path() / "small.mdb").string();
    bool recovered = false;
    auto opened = SmallStore::open(path, 64ULL << 20, recovered);
    REQUIRE(opened);
    SmallStore& store = **opened;
    const std::string value(3000, 'v');
    for (int i = 0; i < 100; ++i) {
        const std::string key = fmt::format("k{}", i);
        const SmallWrite writes[] = {
            {"pgo", entry_hash("pgo", key), {std::as_bytes(std::span(value)), {}, {}}, 0}};
        REQUIRE(store.write(writes, 1));
    }
    QuarantinedStore quarantined;
    store.set_on_quarantine([&](const QuarantinedStore& q) { quarantined = q; });
    store.set_aside(store.generation(), "a test");
    REQUIRE(quarantined.path == path + ".broken");
    CHECK(quarantined.generation == store.generation());

    SECTION("whole") {
        auto salvage = SmallSalvage::open(quarantined.path, quarantined.txnid, 16 << 10);
        REQUIRE(salvage);
        CHECK((*salvage)->entries() == 100);
        std::size_t records = 0;
        for (int batch = 0; batch < 100; ++batch) {
            const auto got = (*salvage)->next(64 << 10);
            if (got.empty()) {
                break;
            }
            for (const SalvagedRecord& record : got) {
                CHECK(record.ns == "pgo");
                CHECK(record.bytes.size() == value.size());
            }
            records += got.size();
        }
        CHECK(records == 100);
        CHECK((*salvage)->damage().empty());
    }
    SECTION("another transaction than the store's last") {
        auto salvage = SmallSalvage::open(quarantined.path, quarantined.txnid - 1, 16 << 10);
        REQUIRE_FALSE(salvage);
        const std::string expected =
            fmt::format("holds transaction {}, not {}", quarantined.txnid, quarantined.txnid - 1);
        CHECK_THAT(salvage.error(), Catch::Contains(expected));
    }
    SECTION("truncated: the walk faults, and stops") {
        fs::resize_file(quarantined.path, fs::file_size(quarantined.path) / 2);
        auto salvage = SmallSalvage::open(quarantined.path, quarantined.txnid, 16 << 10);
        if (salvage) {
            std::size_t records = 0;
            for (int batch = 0; batch < 100; ++batch) {
                const auto got = (*salvage)->next(64 << 10);
                if (got.empty()) {
                    break;
                }
                records += got.size();
            }
            CHECK(records < 100);
            CHECK_FALSE((*salvage)->damage().empty());
        } else {
            CHECK(salvage.error().find("faulted") != std::string::npos);
        }
    }
}
