// SPDX-License-Identifier: MIT
// The read budget for large values read from disk (daemon/store/read_budget.hpp)
// and the charges Blobs carry for it.
#include "daemon/store/disk/disk_tier.hpp"
#include "daemon/store/memory/memory_tier.hpp"
#include "daemon/store/read_budget.hpp"
#include "daemon/store/store.hpp"
#include "tests/daemon/store/helpers.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

using namespace pt2cache::daemon::store;
using pt2cache::tests::make_entry;
using pt2cache::tests::random_bytes;
using pt2cache::tests::TempDir;

namespace {

constexpr std::uint64_t k_large = 2 << 20; // over SharedReads::k_min_value_size

DiskOptions with_budget(std::shared_ptr<ReadBudget> budget, std::uint64_t small_entry_max) {
    DiskOptions options;
    options.max_size = 1ULL << 30;
    options.small_entry_max = small_entry_max;
    options.read_budget = std::move(budget);
    return options;
}

} // namespace

TEST_CASE("read budget takes what fits, and anything while empty", "[store][read_budget]") {
    auto budget = std::make_shared<ReadBudget>(100);
    CHECK(budget->try_take(150)); // nothing taken: no value is too large to serve
    CHECK_FALSE(budget->try_take(1));
    budget->give_back(150);
    CHECK(budget->try_take(60));
    CHECK(budget->try_take(40));
    CHECK_FALSE(budget->try_take(1));
    budget->give_back(100);
    CHECK(budget->in_use() == 0);

    auto hold = budget->try_hold(70);
    REQUIRE(hold);
    CHECK(budget->in_use() == 70);
    CHECK_FALSE(budget->try_hold(31));
    hold.reset(); // never attached: given back
    CHECK(budget->in_use() == 0);
}

TEST_CASE("a charged blob gives its bytes back with its last copy, not with the plain view",
          "[store][read_budget]") {
    auto budget = std::make_shared<ReadBudget>(1 << 20);
    const Blob plain = Blob::copy_of("forty-two");
    std::optional<Blob> charged;
    {
        auto hold = budget->try_hold(9);
        REQUIRE(hold);
        charged = hold->attach(plain);
    }
    CHECK(budget->in_use() == 9);
    CHECK(charged->text() == "forty-two");
    CHECK(charged->bytes().data() == plain.bytes().data());
    CHECK(charged->shares_buffer_with(plain));

    std::optional<Blob> copy = *charged;
    const Blob kept = charged->without_charge(); // what the memory tier keeps
    const auto weak = charged->weak();           // what SharedReads remembers
    charged.reset();
    CHECK(budget->in_use() == 9); // a copy still holds it
    {
        const auto shared = Blob::lock(weak); // a read sharing it shares the charge
        REQUIRE(shared);
        copy.reset();
        CHECK(budget->in_use() == 9);
    }
    CHECK(budget->in_use() == 0);
    CHECK_FALSE(Blob::lock(weak));
    // The bytes live on with the plain view.
    CHECK(kept.text() == "forty-two");
}

TEST_CASE("disk gets of large values take their size from the read budget, peeks do not",
          "[store][read_budget]") {
    // Files (incompressible values) and small.mdb (a compressible value a
    // few KiB long once compressed) alike.
    const bool files = GENERATE(true, false);
    TempDir dir;
    Stats stats;
    auto budget = std::make_shared<ReadBudget>(3 << 20);
    DiskTier disk(dir.path(), with_budget(budget, 16 << 10), stats);
    const auto value = [&](int seed) {
        return files ? make_entry(random_bytes(k_large, seed))
                     : make_entry(std::string(k_large, static_cast<char>('a' + seed)));
    };
    REQUIRE(disk.put("ns", "a", value(1)));
    REQUIRE(disk.put("ns", "b", value(2)));
    REQUIRE(disk.put("ns", "small", make_entry("tiny")));

    auto first = disk.get("ns", "a");
    REQUIRE(first);
    REQUIRE(*first);
    CHECK(budget->in_use() >= k_large);
    // No room for a second large value while the first is held...
    const auto second = disk.get("ns", "b");
    REQUIRE_FALSE(second);
    CHECK(second.error().failure == Failure::busy);
    CHECK(second.error().message.find("daemon.max_reply_bytes") != std::string::npos);
    // ...but for small values, and for the same value (shared, no new bytes).
    const auto small = disk.get("ns", "small");
    REQUIRE(small);
    REQUIRE(*small);
    auto again = disk.get("ns", "a");
    REQUIRE(again);
    REQUIRE(*again);
    CHECK((*again)->value.shares_buffer_with((*first)->value));
    {
        // A peek (export, SET KEEPTTL) is not a reply's read. (Had it
        // been held on, a get would share its value: no new bytes.)
        const auto peeked = disk.peek("ns", "b");
        REQUIRE(peeked);
        REQUIRE(*peeked);
        CHECK((*peeked)->value.text() == value(2).value.text());
    }

    // The charge goes with the last reader of the shared value.
    first = tl::expected<std::optional<Entry>, StoreError>(std::nullopt);
    CHECK(budget->in_use() >= k_large);
    REQUIRE_FALSE(disk.get("ns", "b"));
    again = tl::expected<std::optional<Entry>, StoreError>(std::nullopt);
    CHECK(budget->in_use() == 0);
    const auto now_fits = disk.get("ns", "b");
    REQUIRE(now_fits);
    REQUIRE(*now_fits);
    CHECK((*now_fits)->value.text() == value(2).value.text());
}

TEST_CASE("the store keeps a disk hit in memory without its read budget charge, and tells a "
          "busy disk from a miss",
          "[store][read_budget]") {
    TempDir dir;
    Stats stats;
    auto budget = std::make_shared<ReadBudget>(1 << 20);
    Store store(stats, {}, std::make_unique<MemoryTier>(64 << 20, stats),
                std::make_unique<DiskTier>(dir.path(), with_budget(budget, 0), stats), nullptr);
    const auto a = make_entry(random_bytes(k_large, 1));
    const auto b = make_entry(random_bytes(k_large, 2));
    REQUIRE(store.disk_tier()->put("ns", "a", a));
    REQUIRE(store.disk_tier()->put("ns", "b", b));

    {
        const auto hit = store.get("ns", "a");
        REQUIRE(hit);
        REQUIRE(*hit);
        CHECK(budget->in_use() > 0);
        const auto busy = store.get("ns", "b");
        REQUIRE_FALSE(busy);
        CHECK(busy.error().failure == Failure::busy);
        // Not counted: the caller asks again.
        CHECK(stats.tier("ns", TierId::disk).misses == 0);
        CHECK(stats.tier("ns", TierId::disk).errors == 0);
        CHECK(stats.tier("ns", TierId::memory).misses == 1);
    }
    // The memory tier holds the value, not the charge.
    CHECK(budget->in_use() == 0);
    const auto from_memory = store.memory_tier()->lookup("ns", "a");
    REQUIRE(from_memory);
    CHECK(from_memory->value.text() == a.value.text());
    const auto now = store.get("ns", "b");
    REQUIRE(now);
    REQUIRE(*now);
    CHECK((*now)->value.text() == b.value.text());
}
