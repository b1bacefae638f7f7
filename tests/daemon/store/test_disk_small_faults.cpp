// SPDX-License-Identifier: MIT
// A small.mdb whose pages make LMDB fault (SIGBUS past the end of a file that
// was truncated under the daemon; SIGSEGV on a corrupt page), or whose tree
// LMDB reports inconsistent, fails the operation, is moved aside and replaced
// by a fresh store: the daemon lives on (daemon/store/disk/fault_guard.hpp).
#include <array>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "daemon/store/disk/disk_layout.hpp"
#include "daemon/store/disk/disk_small_lmdb.hpp"
#include "daemon/store/disk/disk_small_store.hpp"
#include "daemon/store/disk/disk_tier.hpp"
#include "daemon/store/disk/fault_guard.hpp"
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

DiskOptions sync_small_options() {
    DiskOptions options{1ULL << 30, 1ULL << 40, 1};
    options.write_mode = DiskWriteMode::sync;
    options.small_entry_max = 16 << 10;
    return options;
}

// Leaves the two meta pages: every tree page now lies past the end of the
// file, and reading one through the map raises SIGBUS.
void truncate_to_meta_pages(const fs::path& path) {
    REQUIRE(fs::file_size(path) > 8 * 4096);
    fs::resize_file(path, 2 * 4096);
}

// A store at `path` holding 100 "pgo" entries of 3000 bytes (`k0`..`k99`):
// pages enough that truncating the file leaves every tree page past its end.
std::unique_ptr<SmallStore> store_of_100(const std::string& path) {
    bool recovered = false;
    auto store = SmallStore::open(path, 64ULL << 20, recovered);
    REQUIRE(store);
    const std::string value(3000, 'v');
    const auto bytes = std::as_bytes(std::span(value));
    for (int i = 0; i < 100; ++i) {
        const std::string key = fmt::format("k{}", i);
        const SmallWrite writes[] = {{"pgo", entry_hash("pgo", key), {bytes, {}, {}}, 0}};
        REQUIRE((*store)->write(writes, 1));
    }
    return std::move(*store);
}

// The fresh store that replaced a quarantined one: empty, it takes a write
// (then compacts, when `compact`) and reads the entry back.
void check_fresh_store_works(SmallStore& store, bool compact) {
    CHECK(store.size() == 0);
    const std::string value(3000, 'v');
    const auto bytes = std::as_bytes(std::span(value));
    const SmallWrite writes[] = {{"pgo", entry_hash("pgo", "again"), {bytes, {}, {}}, 0}};
    REQUIRE(store.write(writes, 1));
    if (compact) {
        REQUIRE(store.compact());
    }
    CHECK(store.size() == 1);
    auto read = store.read("pgo", entry_hash("pgo", "again"));
    REQUIRE(read);
    REQUIRE(*read);
    CHECK((*read)->size() == value.size());
}

} // namespace

TEST_CASE("run_guarded contains a fault and nothing else", "[store][disk][small]") {
    install_fault_handlers();
    int ran = 0;
    auto fine = [&] { ++ran; };
    CHECK(run_guarded(fine));
    CHECK(ran == 1);
    auto faults = [&] {
        ++ran;
        ::raise(SIGBUS); // synchronous, on this thread, as a fault would be
        ++ran;           // never reached
    };
    CHECK_FALSE(run_guarded(faults));
    CHECK(ran == 2);
    // The signal is not left blocked (a blocked one would stay pending and
    // raise() return), and the guard is not left armed.
    CHECK_FALSE(run_guarded(faults));
    CHECK(ran == 3);
    auto segv = [&] {
        ::raise(SIGSEGV);
        ++ran;
    };
    CHECK_FALSE(run_guarded(segv));
    CHECK_FALSE(run_guarded(segv));
    CHECK(ran == 3);
    sigset_t blocked;
    REQUIRE(pthread_sigmask(SIG_BLOCK, nullptr, &blocked) == 0);
    CHECK_FALSE(sigismember(&blocked, SIGBUS));
    CHECK_FALSE(sigismember(&blocked, SIGSEGV));
    CHECK(run_guarded(fine));
    CHECK(ran == 4);
    // An LMDB assertion leaves the same way; outside a guard, it returns.
    auto gives_up = [&] {
        leave_guarded();
        ++ran;
    };
    CHECK_FALSE(run_guarded(gives_up));
    CHECK(ran == 4);
    leave_guarded();
    CHECK(run_guarded(fine));
    CHECK(ran == 5);
}

TEST_CASE("a small.mdb that faults on read is quarantined and replaced", "[store][disk][small]") {
    TempDir dir;
    Stats stats;
    DiskTier tier(dir.path(), sync_small_options(), stats);
    for (int i = 0; i < 200; ++i) {
        REQUIRE(tier.put("pgo", fmt::format("k{}", i), make_entry(std::string(3000, 'x'))));
    }
    REQUIRE(tier.put("fx", "large", make_entry(std::string(100 << 10, 'L')))); // a file
    REQUIRE(tier.small_store() != nullptr);
    REQUIRE(tier.small_store()->contains("pgo", entry_hash("pgo", "k7")));
    const std::uint64_t count_before = tier.count();
    const auto recoveries = stats.daemon().small_store_recoveries.load();

    truncate_to_meta_pages(dir.path() / "small.mdb");
    auto got = tier.get("pgo", "k7");
    REQUIRE(got);
    CHECK_FALSE(*got); // a miss, counted as corrupt
    CHECK(stats.tier("pgo", TierId::disk).corrupt == 1);

    CHECK(tier.small_store()->quarantines() == 1);
    CHECK(stats.daemon().small_store_recoveries == recoveries + 1);
    CHECK(fs::exists(dir.path() / "small.mdb.broken"));
    CHECK(fs::file_size(dir.path() / "small.mdb.broken") == 2 * 4096);
    // The index forgot the small entries (they went with the file: the meta
    // pages left hold none to salvage); the large entry stays and is served.
    tier.wait_for_salvage();
    CHECK(stats.daemon().small_store_salvaged == 0);
    CHECK(tier.count() == count_before - 200);
    auto large = tier.get("fx", "large");
    REQUIRE(large);
    REQUIRE(*large);
    CHECK((*large)->value.size() == 100 << 10);
    // The fresh store serves misses, puts and reads.
    auto other = tier.get("pgo", "k8");
    REQUIRE(other);
    CHECK_FALSE(*other);
    REQUIRE(tier.put("pgo", "k8", make_entry("fresh")));
    auto fresh = tier.get("pgo", "k8");
    REQUIRE(fresh);
    REQUIRE(*fresh);
    CHECK((*fresh)->value.text() == "fresh");
    CHECK(tier.small_store()->contains("pgo", entry_hash("pgo", "k8")));
    CHECK(tier.small_store()->quarantines() == 1);
}

TEST_CASE("a fault while loading the meta records quarantines the store once",
          "[store][disk][small]") {
    TempDir dir;
    const std::string path = (dir.path() / "small.mdb").string();
    auto store = store_of_100(path);
    int called = 0;
    store->set_on_quarantine([&](const QuarantinedStore& /*quarantined*/) { ++called; });

    truncate_to_meta_pages(path);
    std::size_t records = 0;
    auto loaded = store->load_meta([&](SmallRecord&&) { ++records; });
    REQUIRE_FALSE(loaded);
    CHECK(loaded.error().find("LMDB faulted") != std::string::npos);
    CHECK(store->quarantines() == 1);
    CHECK(called == 1);
    CHECK(fs::exists(path + ".broken"));

    // The replacement is empty and works; nothing faults again.
    check_fresh_store_works(*store, false);
    CHECK(store->quarantines() == 1);
    CHECK(called == 1);
}

TEST_CASE("a fault while compacting quarantines the store, which works on",
          "[store][disk][small]") {
    // Compaction's copy reads the trees on its own thread, guarded (see
    // SmallStore::compact): on a file truncated before it starts, or by
    // another process in the middle of the copy, its next read faults, and
    // the store is replaced as after any fault; the partial copy is removed.
    TempDir dir;
    const std::string path = (dir.path() / "small.mdb").string();
    auto store = store_of_100(path);
    int called = 0;
    store->set_on_quarantine([&](const QuarantinedStore& /*quarantined*/) { ++called; });
    bool mid_copy = false;
    int during = 0;
    std::uintmax_t size_during = 0;
    SECTION("truncated before the copy") {
        truncate_to_meta_pages(path);
    }
    SECTION("truncated after the copy's first entry") {
        mid_copy = true;
        store->set_during_copy([&] {
            // No REQUIRE here: this runs inside the guarded walk.
            ++during;
            size_during = fs::file_size(path);
            fs::resize_file(path, 2 * 4096);
        });
    }

    auto compacted = store->compact();
    CHECK(during == (mid_copy ? 1 : 0));
    CHECK((!mid_copy || size_during > 8 * 4096));
    REQUIRE_FALSE(compacted);
    CHECK(compacted.error().find("LMDB faulted") != std::string::npos);
    CHECK(store->quarantines() == 1);
    CHECK(called == 1);
    CHECK(fs::exists(path + ".broken"));
    CHECK_FALSE(fs::exists(path + ".compact"));

    // The replacement is empty, takes writes and compacts.
    store->set_during_copy({});
    check_fresh_store_works(*store, true);
    CHECK(store->quarantines() == 1);
}

TEST_CASE("a store quarantined while it was compacted keeps its fresh file",
          "[store][disk][small]") {
    // A read that faults, or that LMDB answers MDB_CORRUPTED, between
    // compaction's copy and its swap replaces the store with an empty one
    // (and the disk tier forgets its entries). The copy is of the old store:
    // renamed over the fresh one, it would bring back entries that nothing
    // indexes any more. (The corrupt store's environment is freed, and the
    // fresh one's is likely to get its address: compaction must not take it
    // for the one it copied.)
    TempDir dir;
    const std::string path = (dir.path() / "small.mdb").string();
    auto store = store_of_100(path);
    bool faults = true;
    SECTION("a read faults") {}
    SECTION("a read finds a page that is no leaf") {
        faults = false;
    }
    int after_copy = 0;
    store->set_after_copy([&] {
        ++after_copy;
        REQUIRE(fs::exists(path + ".compact"));
        if (faults) {
            truncate_to_meta_pages(path);
        } else {
            REQUIRE(damage_leaves_holding(path,
                                          small_lmdb::make_key("pgo", entry_hash("pgo", "k7")),
                                          Damage::not_a_leaf) >= 2); // old copies too
        }
        auto read = store->read("pgo", entry_hash("pgo", "k7"));
        REQUIRE_FALSE(read);
        CHECK(read.error().find(faults ? "LMDB faulted" : "MDB_CORRUPTED") != std::string::npos);
    });

    auto compacted = store->compact();
    CHECK(after_copy == 1);
    CHECK_FALSE(compacted);
    if (!compacted) {
        CHECK(compacted.error().find("replaced while it was copied") != std::string::npos);
    }
    CHECK(store->quarantines() == 1);
    CHECK(fs::exists(path + ".broken"));
    CHECK_FALSE(fs::exists(path + ".compact"));

    // The fresh store stays: none of the copied entries is back, and it
    // works (compaction included).
    CHECK_FALSE(store->contains("pgo", entry_hash("pgo", "k7")));
    auto gone = store->read("pgo", entry_hash("pgo", "k8"));
    REQUIRE(gone);
    CHECK_FALSE(*gone);
    store->set_after_copy({});
    check_fresh_store_works(*store, true);
    CHECK(store->quarantines() == 1);
}

TEST_CASE("a store LMDB reports corrupt is quarantined as if it had faulted",
          "[store][disk][small]") {
    // Kept, such a store could not be compacted (its file would stay above
    // max_size), and a write reaching the bad page could copy its sizes into
    // LMDB's buffers. 400 entries of 100 bytes, written in one transaction,
    // fill many leaves; the two holding k200 (one per tree) are damaged.
    TempDir dir;
    const std::string path = (dir.path() / "small.mdb").string();
    bool recovered = false;
    auto opened = SmallStore::open(path, 64ULL << 20, recovered);
    REQUIRE(opened);
    auto& store = **opened;
    const std::string value(100, 'v');
    const auto bytes = std::as_bytes(std::span(value));
    std::vector<SmallWrite> writes;
    for (int i = 0; i < 400; ++i) {
        writes.push_back({"pgo", entry_hash("pgo", fmt::format("k{}", i)), {bytes, {}, {}}, 0});
    }
    REQUIRE(store.write(writes, 1));
    int called = 0;
    store.set_on_quarantine([&](const QuarantinedStore& /*quarantined*/) { ++called; });
    const auto hash = entry_hash("pgo", "k200");
    const std::string needle = small_lmdb::make_key("pgo", hash);

    std::string error;
    SECTION("a read") {
        REQUIRE(damage_leaves_holding(path, needle, Damage::not_a_leaf) == 2);
        // Keys on the other leaves still read, and nothing is quarantined.
        int read_fine = 0;
        for (int i = 0; i < 400 && read_fine < 20; ++i) {
            auto other = store.read("pgo", entry_hash("pgo", fmt::format("k{}", i)));
            read_fine += other && *other ? 1 : 0;
        }
        CHECK(read_fine == 20);
        CHECK(store.quarantines() == 0);
        auto read = store.read("pgo", hash);
        REQUIRE_FALSE(read);
        error = read.error();
    }
    SECTION("a write") {
        REQUIRE(damage_leaves_holding(path, needle, Damage::not_a_leaf) == 2);
        const SmallWrite again[] = {{"pgo", hash, {bytes, {}, {}}, 0}};
        auto written = store.write(again, 2);
        REQUIRE_FALSE(written);
        error = written.error().message;
    }
    SECTION("compaction") {
        // (Its cursor on a page that is no leaf fails an assertion: a fault.)
        REQUIRE(damage_leaves_holding(path, needle, Damage::keys_swapped) == 2);
        auto compacted = store.compact();
        REQUIRE_FALSE(compacted);
        error = compacted.error();
        CHECK_FALSE(fs::exists(path + ".compact"));
    }
    INFO(error);
    CHECK(error.find("MDB_CORRUPTED") != std::string::npos);
    CHECK(store.quarantines() == 1);
    CHECK(called == 1);
    CHECK(fs::exists(path + ".broken"));
    check_fresh_store_works(store, true);
    CHECK(store.quarantines() == 1);
}
