// SPDX-License-Identifier: MIT
#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "daemon/store/memory/memory_tier.hpp"
#include "tests/daemon/store/helpers.hpp"

#include <catch2/catch.hpp>
#include <fmt/format.h>

using namespace pt2cache::daemon::store;
using pt2cache::tests::make_entry;
using pt2cache::tests::random_bytes;

namespace {

// The charge of a 100-byte value under ns "t" and a 2-byte key.
constexpr std::uint64_t k_charge = 100 + 1 + 2 + MemoryTier::k_entry_overhead;

bool has(MemoryTier& tier, std::string_view key) {
    return tier.lookup("t", key).has_value();
}

} // namespace

TEST_CASE("memory tier charges value, key, namespace and overhead", "[store][memory]") {
    CHECK(MemoryTier::charge_of("t", "k1", 100) == 167);
    CHECK(k_charge == 167);
}

TEST_CASE("memory tier evicts the oldest entry not hit since it last reached the front",
          "[store][memory]") {
    Stats stats;
    MemoryTier tier(3 * k_charge, stats);
    REQUIRE(tier.put("t", "k1", make_entry(random_bytes(100, 1))));
    REQUIRE(tier.put("t", "k2", make_entry(random_bytes(100, 2))));
    REQUIRE(tier.put("t", "k3", make_entry(random_bytes(100, 3))));
    CHECK(tier.size_bytes() == 3 * k_charge);
    CHECK(tier.count() == 3);

    // k1, the oldest, was hit: it gets a second chance, and k2 goes.
    REQUIRE(has(tier, "k1"));
    REQUIRE(tier.put("t", "k4", make_entry(random_bytes(100, 4))));

    CHECK(tier.count() == 3);
    CHECK(tier.size_bytes() == 3 * k_charge);
    CHECK_FALSE(tier.contains("t", "k2"));
    CHECK(tier.contains("t", "k1"));
    CHECK(tier.contains("t", "k3"));
    CHECK(tier.contains("t", "k4"));
    CHECK(stats.tier("t", TierId::memory).evictions == 1);

    // The order is now k4, k1, k3 (newest first), none of them marked:
    // contains() marks nothing, so k3 goes next.
    REQUIRE(tier.put("t", "k5", make_entry(random_bytes(100, 5))));
    CHECK_FALSE(tier.contains("t", "k3"));
    CHECK(tier.contains("t", "k1"));
    CHECK(tier.contains("t", "k4"));
    CHECK(tier.contains("t", "k5"));
    CHECK(stats.tier("t", TierId::memory).evictions == 2);
}

TEST_CASE("memory tier gives each hit entry a second chance when it reaches the back",
          "[store][memory]") {
    Stats stats;
    MemoryTier tier(100 * k_charge, stats);
    // Two-byte keys, so that every entry is charged k_charge: "00".."99", then
    // "a0".."j9" for the puts that evict.
    const auto old_key = [](int i) { return fmt::format("{:02}", i); };
    const auto new_key = [](int i) { return fmt::format("{}{}", char('a' + i / 10), i % 10); };
    for (int i = 0; i < 100; ++i) {
        REQUIRE(tier.put("t", old_key(i), make_entry(random_bytes(100, i))));
    }
    REQUIRE(has(tier, old_key(90)));
    REQUIRE(has(tier, old_key(0)));
    // The first eviction moves "00" to the front and takes "01"; "90" moves
    // when it reaches the back, after "02".."89".
    for (int i = 0; i < 90; ++i) {
        REQUIRE(tier.put("t", new_key(i), make_entry(random_bytes(100, 100 + i))));
    }
    CHECK_FALSE(tier.contains("t", old_key(1)));
    CHECK_FALSE(tier.contains("t", old_key(89)));
    CHECK_FALSE(tier.contains("t", old_key(91)));
    CHECK(tier.contains("t", old_key(92)));
    CHECK(tier.contains("t", old_key(90)));
    CHECK(tier.contains("t", old_key(0)));
    CHECK(stats.tier("t", TierId::memory).evictions == 90);
    // Then "92".."99", then "00" (its chance used), then the new keys.
    for (int i = 90; i < 98; ++i) {
        REQUIRE(tier.put("t", new_key(i), make_entry(random_bytes(100, 100 + i))));
    }
    CHECK_FALSE(tier.contains("t", old_key(99)));
    CHECK(tier.contains("t", old_key(0)));
    REQUIRE(tier.put("t", new_key(98), make_entry(random_bytes(100, 198))));
    CHECK_FALSE(tier.contains("t", old_key(0)));
    REQUIRE(tier.put("t", new_key(99), make_entry(random_bytes(100, 199))));
    CHECK_FALSE(tier.contains("t", new_key(0)));
    CHECK(tier.contains("t", old_key(90)));
    CHECK(tier.count() == 100);
    CHECK(stats.tier("t", TierId::memory).evictions == 100);
}

TEST_CASE("memory tier never evicts the entry it is storing", "[store][memory]") {
    Stats stats;
    MemoryTier tier(3 * k_charge, stats);
    for (const char* key : {"k1", "k2", "k3"}) {
        REQUIRE(tier.put("t", key, make_entry(random_bytes(100, 1))));
        REQUIRE(has(tier, key));
    }
    // Every stored entry is marked: each gets its second chance, then the
    // oldest goes, never the new one.
    REQUIRE(tier.put("t", "k4", make_entry(random_bytes(100, 4))));
    CHECK(tier.contains("t", "k4"));
    CHECK_FALSE(tier.contains("t", "k1"));
    CHECK(tier.count() == 3);
}

TEST_CASE("memory tier stays within its byte bound", "[store][memory]") {
    Stats stats;
    const std::uint64_t capacity = 10'000;
    MemoryTier tier(capacity, stats);
    std::uint64_t evictions_expected = 0;
    for (int i = 0; i < 200; ++i) {
        const std::size_t size = static_cast<std::size_t>(50 + (i * 37) % 900);
        REQUIRE(tier.put("t", "key" + std::to_string(i), make_entry(random_bytes(size, i))));
        REQUIRE(tier.size_bytes() <= capacity);
    }
    // The newest entry always survives.
    CHECK(tier.contains("t", "key199"));
    CHECK_FALSE(tier.contains("t", "key0"));
    evictions_expected = 200 - tier.count();
    CHECK(stats.tier("t", TierId::memory).evictions == evictions_expected);
}

TEST_CASE("memory tier hit shares the stored buffer", "[store][memory]") {
    Stats stats;
    MemoryTier tier(1 << 20, stats);
    const Entry stored = make_entry(random_bytes(4096));
    REQUIRE(tier.put("t", "k", stored));
    const auto hit = tier.get("t", "k");
    REQUIRE(hit);
    REQUIRE(hit->has_value());
    CHECK((*hit)->value.shares_buffer_with(stored.value));
    CHECK((*hit)->value.bytes().data() == stored.value.bytes().data());
    CHECK((*hit)->created_ms == stored.created_ms);
}

TEST_CASE("memory tier drops expired entries", "[store][memory]") {
    Stats stats;
    MemoryTier tier(1 << 20, stats);
    const UnixMs now = now_ms();
    REQUIRE(tier.put("t", "old", make_entry("v", now - 1)));
    REQUIRE(tier.put("t", "new", make_entry("v", now + 60'000)));
    CHECK(tier.count() == 2);
    CHECK_FALSE(tier.contains("t", "old"));
    CHECK_FALSE(tier.lookup("t", "old"));
    CHECK(tier.count() == 1);
    CHECK(tier.size_bytes() == MemoryTier::charge_of("t", "new", 1));
    CHECK(tier.lookup("t", "new"));
}

TEST_CASE("memory tier does not store an entry larger than its capacity", "[store][memory]") {
    Stats stats;
    MemoryTier tier(1000, stats);
    REQUIRE(tier.put("t", "k", make_entry("small")));
    REQUIRE(tier.count() == 1);
    const auto put = tier.put("t", "k", make_entry(random_bytes(1000)));
    CHECK(put.has_value());
    CHECK(tier.count() == 0);
    CHECK(tier.size_bytes() == 0);
    // The older value is gone rather than served after the newer put.
    CHECK_FALSE(tier.lookup("t", "k"));
    CHECK(stats.tier("t", TierId::memory).evictions == 0);
}

TEST_CASE("memory tier with capacity 0 stores nothing", "[store][memory]") {
    Stats stats;
    MemoryTier tier(0, stats);
    CHECK_FALSE(tier.enabled());
    REQUIRE(tier.put("t", "k", make_entry("v")));
    CHECK(tier.count() == 0);
    CHECK_FALSE(tier.lookup("t", "k"));
}

TEST_CASE("memory tier overwrite, remove and clear", "[store][memory]") {
    Stats stats;
    MemoryTier tier(1 << 20, stats);
    REQUIRE(tier.put("a", "k", make_entry("one")));
    REQUIRE(tier.put("a", "k", make_entry("three")));
    CHECK(tier.count() == 1);
    CHECK(tier.size_bytes() == MemoryTier::charge_of("a", "k", 5));
    CHECK(tier.lookup("a", "k")->value.text() == "three");

    // Namespaces are separate even when ns + key concatenate alike.
    REQUIRE(tier.put("a", "bk", make_entry("x")));
    REQUIRE(tier.put("ab", "k", make_entry("y")));
    CHECK(tier.lookup("a", "bk")->value.text() == "x");
    CHECK(tier.lookup("ab", "k")->value.text() == "y");

    CHECK(tier.remove("a", "k").value() == true);
    CHECK(tier.remove("a", "k").value() == false);

    REQUIRE(tier.put("b", "k1", make_entry("1")));
    REQUIRE(tier.put("b", "k2", make_entry("2")));
    CHECK(tier.clear("b").value() == 2);
    CHECK(tier.clear("b").value() == 0);
    CHECK(tier.count() == 2);
    CHECK(tier.contains("a", "bk"));
    CHECK(tier.contains("ab", "k"));
}

TEST_CASE("memory tier overwrite of a stored key in a full tier", "[store][memory]") {
    Stats stats;
    MemoryTier tier(3 * k_charge, stats);
    for (const char* key : {"k1", "k2", "k3"}) {
        REQUIRE(tier.put("t", key, make_entry(random_bytes(100, 1))));
    }
    // k1, the oldest, grows by 100 bytes: room is made without it (it is
    // not evicted by its own put), from k2, and it moves to the front.
    const auto bigger = random_bytes(200, 7);
    REQUIRE(tier.put("t", "k1", make_entry(bigger)));
    const auto stored = tier.peek("t", "k1");
    REQUIRE(stored);
    CHECK(std::equal(bigger.begin(), bigger.end(), stored->value.bytes().begin(),
                     stored->value.bytes().end()));
    CHECK_FALSE(tier.contains("t", "k2"));
    CHECK(tier.contains("t", "k3"));
    CHECK(tier.count() == 2);
    CHECK(tier.size_bytes() == k_charge + MemoryTier::charge_of("t", "k1", 200));
    CHECK(stats.tier("t", TierId::memory).evictions == 1);
    // The overwrite left k1 unmarked, at the front: k3 is the back now.
    REQUIRE(tier.put("t", "k4", make_entry(random_bytes(100, 4))));
    REQUIRE(tier.put("t", "k5", make_entry(random_bytes(100, 5))));
    CHECK_FALSE(tier.contains("t", "k3"));
    CHECK_FALSE(tier.contains("t", "k1"));
    CHECK(tier.count() == 2);
    CHECK(tier.size_bytes() == 2 * MemoryTier::charge_of("t", "k4", 100));
}

TEST_CASE("memory tier put_many replaces stored keys in place and stores new ones, in order",
          "[store][memory]") {
    Stats stats;
    MemoryTier tier(1 << 20, stats, 4000);
    REQUIRE(tier.put("t", "s1", make_entry("old-1")));
    REQUIRE(tier.put("t", "s2", make_entry("old-2")));
    REQUIRE(tier.put("t", "s3", make_entry("old-3")));
    const auto big = std::string(5000, 'b'); // over the largest entry
    const std::vector<QuickPut> puts{
        {"t", "s1", make_entry("new-1a")}, {"t", "n1", make_entry("new-n1a")},
        {"t", "s1", make_entry("new-1b")}, {"t", "n1", make_entry("new-n1b")},
        {"t", "s2", make_entry(big)},      {"t", "n2", make_entry(big)},
        {"t", "n3", make_entry("new-n3")}, {"t", "s3", make_entry("new-3")},
    };
    tier.put_many(puts);
    // The last put of each key wins, whether it was stored before or not;
    // a value over the largest entry takes its older value away too.
    CHECK(tier.peek("t", "s1")->value.text() == "new-1b");
    CHECK(tier.peek("t", "n1")->value.text() == "new-n1b");
    CHECK(tier.peek("t", "s3")->value.text() == "new-3");
    CHECK(tier.peek("t", "n3")->value.text() == "new-n3");
    CHECK_FALSE(tier.contains("t", "s2"));
    CHECK_FALSE(tier.contains("t", "n2"));
    CHECK(tier.count() == 4);
    CHECK(tier.size_bytes() ==
          MemoryTier::charge_of("t", "s1", 6) + MemoryTier::charge_of("t", "n1", 7) +
              MemoryTier::charge_of("t", "s3", 5) + MemoryTier::charge_of("t", "n3", 6));
}

TEST_CASE("memory tier lists a namespace in key order", "[store][memory]") {
    Stats stats;
    MemoryTier tier(1 << 20, stats);
    for (int i = 0; i < 25; ++i) {
        const std::string key = fmt::format("key{:02}", i);
        REQUIRE(tier.put("t", key, make_entry(std::string(static_cast<std::size_t>(i), 'x'))));
    }
    REQUIRE(tier.put("other", "zzz", make_entry("v")));
    std::vector<std::string> keys;
    std::string cursor;
    int pages = 0;
    do {
        const ListPage page = tier.list("t", cursor, 10);
        for (const EntryInfo& info : page.entries) {
            keys.push_back(info.key);
            CHECK(info.size == std::stoul(info.key.substr(3)));
        }
        cursor = page.next_cursor;
        ++pages;
    } while (!cursor.empty());
    CHECK(pages == 3);
    REQUIRE(keys.size() == 25);
    for (int i = 0; i < 25; ++i) {
        CHECK(keys[static_cast<std::size_t>(i)] == fmt::format("key{:02}", i));
    }
}

TEST_CASE("memory tier survives concurrent use", "[store][memory][concurrency]") {
    Stats stats;
    const std::uint64_t capacity = 64 * 1024;
    MemoryTier tier(capacity, stats);
    std::atomic<bool> bad{false};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&, t] {
            for (int i = 0; i < 2000; ++i) {
                const std::string key = "k" + std::to_string((i * 7 + t) % 64);
                if (i % 3 == 0) {
                    tier.put("t", key, make_entry(std::string(1000, static_cast<char>('a' + t))));
                } else if (auto hit = tier.lookup("t", key)) {
                    const auto text = hit->value.text();
                    if (text.size() != 1000 || text.find_first_not_of(text[0]) != text.npos) {
                        bad = true;
                    }
                }
                if (tier.size_bytes() > capacity) {
                    bad = true;
                }
            }
        });
    }
    for (auto& thread : threads) {
        thread.join();
    }
    CHECK_FALSE(bad);
    CHECK(tier.size_bytes() <= capacity);
}

TEST_CASE("memory tier lets entries above its largest entry bypass it", "[store][memory]") {
    Stats stats;
    // As the daemon builds it: entries above 1/8 of the capacity bypass it.
    const std::uint64_t capacity = 16 * k_charge;
    MemoryTier tier(capacity, stats, capacity / MemoryTier::k_bypass_divisor);
    CHECK(tier.max_entry() == 2 * k_charge);
    REQUIRE(tier.put("t", "k1", make_entry(random_bytes(100, 1))));
    CHECK(has(tier, "k1"));
    // 2 × k_charge fits exactly; one byte more does not, and drops the older value.
    REQUIRE(tier.put("t", "k2", make_entry(random_bytes(100 + k_charge, 2))));
    CHECK(has(tier, "k2"));
    REQUIRE(tier.put("t", "k2", make_entry(random_bytes(101 + k_charge, 3))));
    CHECK_FALSE(has(tier, "k2"));
    CHECK(has(tier, "k1"));
    CHECK(tier.count() == 1);
    CHECK(tier.size_bytes() == k_charge);

    // Without a largest entry, the capacity is the bound.
    MemoryTier plain(capacity, stats);
    CHECK(plain.max_entry() == capacity);
    REQUIRE(plain.put("t", "k3", make_entry(random_bytes(100 + 8 * k_charge, 4))));
    CHECK(plain.lookup("t", "k3").has_value());
}

TEST_CASE("memory tier bounds the second chances one put gives", "[store][memory]") {
    Stats stats;
    constexpr int k_count = 200;
    MemoryTier tier(k_count * k_charge, stats);
    const auto key = [](int i) { return fmt::format("{:02x}", i); };
    for (int i = 0; i < k_count; ++i) {
        REQUIRE(tier.put("t", key(i), make_entry(random_bytes(100, i))));
    }
    for (int i = 0; i < k_count; ++i) {
        REQUIRE(has(tier, key(i)));
    }
    // Every entry is marked: the put moves the oldest k_max_second_chances
    // to the front, then evicts the next one although it is marked.
    REQUIRE(tier.put("t", "zz", make_entry(random_bytes(100, 999))));
    const int evicted = static_cast<int>(MemoryTier::k_max_second_chances);
    CHECK_FALSE(tier.contains("t", key(evicted)));
    CHECK(tier.contains("t", key(evicted - 1)));
    CHECK(tier.contains("t", key(evicted + 1)));
    CHECK(tier.contains("t", "zz"));
    CHECK(stats.tier("t", TierId::memory).evictions == 1);
}

TEST_CASE("memory tier peek reads without marking", "[store][memory]") {
    Stats stats;
    MemoryTier tier(2 * k_charge, stats);
    REQUIRE(tier.put("t", "k1", make_entry(random_bytes(100, 1))));
    REQUIRE(tier.put("t", "k2", make_entry(random_bytes(100, 2))));
    const auto peeked = tier.peek("t", "k1");
    REQUIRE(peeked);
    CHECK(peeked->value.bytes().size() == 100);
    CHECK_FALSE(tier.peek("t", "absent"));
    // Unmarked, k1 is still the first to go.
    REQUIRE(tier.put("t", "k3", make_entry(random_bytes(100, 3))));
    CHECK_FALSE(tier.contains("t", "k1"));
    CHECK(tier.contains("t", "k2"));
}
