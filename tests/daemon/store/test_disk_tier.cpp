// SPDX-License-Identifier: MIT
#include <atomic>
#include <fcntl.h>
#include <set>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

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
using pt2cache::tests::read_file;
using pt2cache::tests::TempDir;
using pt2cache::tests::wait_until;
using pt2cache::tests::write_file;
namespace fs = std::filesystem;

namespace {

// These tests are about the file store: every entry a file (the small-entry
// store has its own tests in test_disk_small.cpp).
DiskOptions files_only(DiskOptions options) {
    options.small_entry_max = 0;
    return options;
}

// Incompressible test values keep file sizes exact; a huge threshold also
// keeps zstd out of the way.
DiskOptions options(std::uint64_t max_size = 1ULL << 30) {
    return files_only({max_size, 1ULL << 40, 1});
}

fs::path entry_path(const fs::path& root, std::string_view ns, std::string_view key) {
    const std::string hex = entry_hash(ns, key).hex();
    return root / "v1" / std::string(ns) / hex.substr(0, 2) / hex;
}

std::uint64_t file_size_of(std::string_view ns, std::string_view key, std::size_t value_size) {
    return k_entry_header_size + ns.size() + key.size() + value_size + k_entry_trailer_size;
}

// The space an entry file is charged: its 4 KiB blocks, as `du` counts them.
std::uint64_t charged_size_of(std::string_view ns, std::string_view key, std::size_t value_size) {
    return (file_size_of(ns, key, value_size) + 4095) / 4096 * 4096;
}

std::uint64_t allocated_of(const fs::path& path) {
    struct stat info {};
    REQUIRE(::stat(path.c_str(), &info) == 0);
    return static_cast<std::uint64_t>(info.st_blocks) * 512;
}

std::optional<Entry> get(DiskTier& tier, std::string_view ns, std::string_view key) {
    auto result = tier.get(ns, key);
    REQUIRE(result);
    return *result;
}

unsigned mode_of(const fs::path& path) {
    struct stat info {};
    REQUIRE(::stat(path.c_str(), &info) == 0);
    return info.st_mode & 07777U;
}

void set_mtime(const fs::path& path, std::int64_t seconds) {
    const timespec times[2] = {{seconds, 0}, {seconds, 0}};
    REQUIRE(::utimensat(AT_FDCWD, path.c_str(), times, 0) == 0);
}

std::int64_t mtime_of(const fs::path& path) {
    struct stat info {};
    REQUIRE(::stat(path.c_str(), &info) == 0);
    return info.st_mtim.tv_sec;
}

std::size_t temp_files_under(const fs::path& root) {
    std::size_t count = 0;
    for (const auto& item : fs::recursive_directory_iterator(root)) {
        if (item.path().extension() == ".tmp") {
            ++count;
        }
    }
    return count;
}

} // namespace

TEST_CASE("disk tier round trip and layout", "[store][disk]") {
    TempDir dir;
    Stats stats;
    DiskTier tier(dir.path() / "cache", options(), stats);
    tier.wait_for_scan();
    CHECK(tier.scan_complete());

    const Entry entry = make_entry(random_bytes(5000), 1'900'000'000'000);
    REQUIRE(tier.put("fx-graph", "secret/../key", entry));
    const auto hit = get(tier, "fx-graph", "secret/../key");
    REQUIRE(hit);
    CHECK(hit->created_ms == entry.created_ms);
    CHECK(hit->expires_ms == entry.expires_ms);
    REQUIRE(hit->value.size() == 5000);
    CHECK(std::equal(entry.value.bytes().begin(), entry.value.bytes().end(),
                     hit->value.bytes().begin()));
    CHECK_FALSE(get(tier, "fx-graph", "another key"));
    CHECK_FALSE(get(tier, "pgo", "secret/../key"));

    const fs::path path = entry_path(dir.path() / "cache", "fx-graph", "secret/../key");
    REQUIRE(fs::is_regular_file(path));
    CHECK(fs::file_size(path) == file_size_of("fx-graph", "secret/../key", 5000));
    CHECK(mode_of(path) == 0600);
    CHECK(mode_of(path.parent_path()) == 0700);
    CHECK(mode_of(path.parent_path().parent_path()) == 0700);
    CHECK(mode_of(dir.path() / "cache" / "v1") == 0700);
    CHECK(temp_files_under(dir.path()) == 0);
    CHECK(tier.size_bytes() == allocated_of(path));
    CHECK(tier.count() == 1);

    // Overwrite replaces the entry and its size.
    REQUIRE(tier.put("fx-graph", "secret/../key", make_entry(random_bytes(10))));
    CHECK(get(tier, "fx-graph", "secret/../key")->value.size() == 10);
    CHECK(tier.size_bytes() == charged_size_of("fx-graph", "secret/../key", 10));

    CHECK(tier.remove("fx-graph", "secret/../key").value() == true);
    CHECK(tier.remove("fx-graph", "secret/../key").value() == false);
    CHECK_FALSE(fs::exists(path));
    CHECK(tier.size_bytes() == 0);
}

TEST_CASE("disk tier rejects unsafe namespaces", "[store][disk]") {
    TempDir dir;
    Stats stats;
    DiskTier tier(dir.path(), options(), stats);
    using namespace std::string_view_literals;
    for (const std::string_view ns : {""sv, ".."sv, "a/b"sv, "UPPER"sv, "x\0y"sv}) {
        CHECK_FALSE(tier.put(ns, "k", make_entry("v")));
        CHECK_FALSE(tier.get(ns, "k"));
    }
    CHECK_FALSE(tier.put(std::string(33, 'a'), "k", make_entry("v")));
}

TEST_CASE("disk tier entries persist across instances", "[store][disk]") {
    TempDir dir;
    Stats stats;
    {
        DiskTier tier(dir.path(), options(), stats);
        REQUIRE(tier.put("pgo", "k1", make_entry("first value")));
        REQUIRE(tier.put("pgo", "k2", make_entry(random_bytes(1000))));
    }
    DiskTier tier(dir.path(), options(), stats);
    // Served before the scan is known to be done.
    const auto hit = get(tier, "pgo", "k1");
    REQUIRE(hit);
    CHECK(hit->value.text() == "first value");
    tier.wait_for_scan();
    CHECK(tier.count() == 2);
    CHECK(tier.size_bytes() ==
          charged_size_of("pgo", "k1", 11) + charged_size_of("pgo", "k2", 1000));
}

TEST_CASE("disk tier treats a corrupt file as a miss and removes it", "[store][disk]") {
    TempDir dir;
    Stats stats;
    DiskTier tier(dir.path(), options(), stats);
    REQUIRE(tier.put("pgo", "k", make_entry(random_bytes(2000))));
    const fs::path path = entry_path(dir.path(), "pgo", "k");

    SECTION("a flipped byte") {
        auto bytes = read_file(path);
        bytes[1000] ^= std::byte{1};
        write_file(path, bytes);
    }
    SECTION("truncated") {
        auto bytes = read_file(path);
        bytes.resize(bytes.size() / 2);
        write_file(path, bytes);
    }
    SECTION("a foreign file") {
        write_file(path, random_bytes(3000, 99));
    }
    SECTION("an empty file") {
        write_file(path, {});
    }

    CHECK_FALSE(get(tier, "pgo", "k"));
    CHECK_FALSE(fs::exists(path));
    CHECK(stats.tier("pgo", TierId::disk).corrupt == 1);
    CHECK_FALSE(get(tier, "pgo", "k"));
    CHECK(stats.tier("pgo", TierId::disk).corrupt == 1);
    // A fresh put works again.
    REQUIRE(tier.put("pgo", "k", make_entry("v")));
    CHECK(get(tier, "pgo", "k")->value.text() == "v");
}

TEST_CASE("disk tier shares a large value while a reply still holds it", "[store][disk]") {
    TempDir dir;
    Stats stats;
    DiskTier tier(dir.path(), options(), stats);
    const auto original = random_bytes(2 << 20, 1);
    REQUIRE(tier.put("fx-graph", "big", make_entry(original)));
    const fs::path path = entry_path(dir.path(), "fx-graph", "big");
    auto first = get(tier, "fx-graph", "big");
    REQUIRE(first);
    REQUIRE(std::ranges::equal(first->value.bytes(), original));

    SECTION("another read of the same file shares the held value") {
        const auto second = get(tier, "fx-graph", "big");
        REQUIRE(second);
        CHECK(second->value.shares_buffer_with(first->value));
        CHECK(second->created_ms == first->created_ms);
    }
    SECTION("a new version, even of the same size, is read from its file") {
        const auto changed = random_bytes(2 << 20, 2);
        REQUIRE(tier.put("fx-graph", "big", make_entry(changed)));
        const auto second = get(tier, "fx-graph", "big");
        REQUIRE(second);
        CHECK_FALSE(second->value.shares_buffer_with(first->value));
        CHECK(std::ranges::equal(second->value.bytes(), changed));
    }
    SECTION("once released, the file is read and verified again") {
        // A payload byte changed in place, the trailer kept: while the value
        // is held, reads get the bytes verified when it was read.
        auto bytes = read_file(path);
        bytes[4096] ^= std::byte{1};
        write_file(path, bytes);
        auto held = get(tier, "fx-graph", "big");
        REQUIRE(held);
        CHECK(held->value.shares_buffer_with(first->value));
        CHECK(std::ranges::equal(held->value.bytes(), original));
        first.reset();
        held.reset();
        CHECK_FALSE(get(tier, "fx-graph", "big")); // read again: the damage is found
        CHECK(stats.tier("fx-graph", TierId::disk).corrupt == 1);
    }
}

TEST_CASE("disk tier shares a large value stored compressed", "[store][disk]") {
    TempDir dir;
    Stats stats;
    DiskOptions compressing = options();
    compressing.compress_threshold = 1024;
    const bool small_store = GENERATE(false, true);
    if (small_store) {
        compressing.small_entry_max = 16 << 10; // the default: a few KiB go to small.mdb
    }
    DiskTier tier(dir.path(), compressing, stats);
    tier.wait_for_scan();
    REQUIRE(tier.put("fx-graph", "big", make_entry(std::string(4 << 20, 'z'))));
    CHECK(fs::exists(entry_path(dir.path(), "fx-graph", "big")) == !small_store);
    const auto first = get(tier, "fx-graph", "big");
    const auto second = get(tier, "fx-graph", "big");
    REQUIRE(first);
    REQUIRE(second);
    CHECK(second->value.shares_buffer_with(first->value));
    CHECK(second->value.text() == std::string(4 << 20, 'z'));
}

TEST_CASE("disk tier does not share values under the large-value size", "[store][disk]") {
    TempDir dir;
    Stats stats;
    DiskTier tier(dir.path(), options(), stats);
    REQUIRE(tier.put("fx-graph", "k", make_entry(random_bytes(100'000))));
    const auto first = get(tier, "fx-graph", "k");
    const auto second = get(tier, "fx-graph", "k");
    REQUIRE(first);
    REQUIRE(second);
    CHECK_FALSE(second->value.shares_buffer_with(first->value));
}

TEST_CASE("disk tier ignores a valid entry of another key at the path", "[store][disk]") {
    TempDir dir;
    Stats stats;
    DiskTier tier(dir.path(), options(), stats);
    const fs::path path = entry_path(dir.path(), "pgo", "k");
    write_file(path, encode("pgo", "not k", make_entry("other"), 1ULL << 40, 1));
    CHECK_FALSE(get(tier, "pgo", "k"));
    CHECK(tier.exists("pgo", "k").value() == false);
    CHECK(fs::exists(path));
    CHECK(stats.tier("pgo", TierId::disk).corrupt == 0);
}

TEST_CASE("disk tier drops expired entries", "[store][disk]") {
    TempDir dir;
    Stats stats;
    DiskTier tier(dir.path(), options(), stats);
    REQUIRE(tier.put("pgo", "old", make_entry("v", now_ms() - 1)));
    REQUIRE(tier.put("pgo", "new", make_entry("v", now_ms() + 60'000)));
    CHECK(tier.exists("pgo", "old").value() == false);
    CHECK(tier.exists("pgo", "new").value() == true);
    CHECK_FALSE(get(tier, "pgo", "old"));
    CHECK_FALSE(fs::exists(entry_path(dir.path(), "pgo", "old")));
    CHECK(get(tier, "pgo", "new"));
}

TEST_CASE("disk tier hit refreshes the file's mtime", "[store][disk]") {
    TempDir dir;
    Stats stats;
    DiskTier tier(dir.path(), options(), stats);
    REQUIRE(tier.put("pgo", "k", make_entry("v")));
    const fs::path path = entry_path(dir.path(), "pgo", "k");
    set_mtime(path, 1'000'000'000);
    REQUIRE(tier.exists("pgo", "k").value());
    CHECK(mtime_of(path) == 1'000'000'000);
    REQUIRE(get(tier, "pgo", "k"));
    CHECK(mtime_of(path) >= now_ms() / 1000 - 60);
}

TEST_CASE("disk tier scan removes leftover temporary files", "[store][disk]") {
    TempDir dir;
    const fs::path shard = dir.path() / "v1" / "pgo" / "ab";
    const fs::path leftover = shard / ".ab000000000000000000000000000000.2147483646.7.tmp";
    // This pid's, but not from this tier's counter range: an earlier daemon
    // of the same pid left it (pid 1 in a container, every time). Even with
    // a fresh mtime: clocks are not trusted for this.
    const fs::path own_earlier = shard / fmt::format(".ab000000000000000000000000000002.{}.7.tmp",
                                                     static_cast<long>(::getpid()));
    const fs::path stray = shard / "notes.txt";
    write_file(leftover, random_bytes(100));
    write_file(own_earlier, random_bytes(100));
    write_file(stray, random_bytes(100));
    Stats stats;
    DiskTier tier(dir.path(), options(), stats);
    tier.wait_for_scan();
    CHECK_FALSE(fs::exists(leftover));
    CHECK_FALSE(fs::exists(own_earlier));
    CHECK(fs::exists(stray));
    CHECK(tier.count() == 0);
    CHECK(tier.size_bytes() == 0);
}

TEST_CASE("disk tier evicts least recently used files", "[store][disk]") {
    TempDir dir;
    Stats stats;
    const std::uint64_t file_size = charged_size_of("pgo", "k0", 10'000);
    const std::uint64_t max_size = 9 * file_size + file_size / 2;
    REQUIRE(9 * file_size <= max_size);
    REQUIRE(10 * file_size > max_size);
    DiskTier tier(dir.path(), options(max_size), stats);
    tier.wait_for_scan();

    for (int i = 0; i < 8; ++i) {
        REQUIRE(tier.put("pgo", fmt::format("k{}", i), make_entry(random_bytes(10'000, i))));
    }
    // k0 and k1 become the most recently used.
    REQUIRE(get(tier, "pgo", "k0"));
    REQUIRE(get(tier, "pgo", "k1"));
    REQUIRE(tier.put("pgo", "k8", make_entry(random_bytes(10'000, 8))));
    CHECK(tier.size_bytes() == 9 * file_size);
    // The tenth file overflows: eviction goes down to 90% of max_size.
    REQUIRE(tier.put("pgo", "k9", make_entry(random_bytes(10'000, 9))));
    REQUIRE(wait_until([&] { return tier.size_bytes() <= max_size / 10 * 9; }));
    CHECK(tier.size_bytes() == 8 * file_size);
    CHECK(stats.tier("pgo", TierId::disk).evictions == 2);

    std::set<std::string> survivors;
    for (int i = 0; i < 10; ++i) {
        const std::string key = fmt::format("k{}", i);
        if (fs::exists(entry_path(dir.path(), "pgo", key))) {
            survivors.insert(key);
        }
    }
    CHECK(survivors == std::set<std::string>{"k0", "k1", "k4", "k5", "k6", "k7", "k8", "k9"});
}

TEST_CASE("disk tier eviction after a restart follows file mtimes", "[store][disk]") {
    TempDir dir;
    Stats stats;
    const std::uint64_t file_size = charged_size_of("pgo", "k0", 10'000);
    {
        DiskTier tier(dir.path(), options(), stats);
        for (int i = 0; i < 6; ++i) {
            REQUIRE(tier.put("pgo", fmt::format("k{}", i), make_entry(random_bytes(10'000, i))));
        }
    }
    // Oldest first: k3, k1, k5, k0, k2, k4.
    const int order[] = {3, 1, 5, 0, 2, 4};
    for (int rank = 0; rank < 6; ++rank) {
        set_mtime(entry_path(dir.path(), "pgo", fmt::format("k{}", order[rank])),
                  1'600'000'000 + rank * 100);
    }
    // Room for 6 files but not 7; eviction goes down to 5 (5.4 files' worth).
    const std::uint64_t max_size = 6 * file_size + file_size / 2;
    DiskTier tier(dir.path(), options(max_size), stats);
    tier.wait_for_scan();
    CHECK(tier.size_bytes() == 6 * file_size);
    REQUIRE(tier.put("pgo", "k6", make_entry(random_bytes(10'000, 6))));
    REQUIRE(wait_until([&] { return tier.size_bytes() <= max_size / 10 * 9; }));
    CHECK(tier.size_bytes() == 5 * file_size);
    CHECK_FALSE(fs::exists(entry_path(dir.path(), "pgo", "k3")));
    CHECK_FALSE(fs::exists(entry_path(dir.path(), "pgo", "k1")));
    for (const char* key : {"k5", "k0", "k2", "k4", "k6"}) {
        CHECK(fs::exists(entry_path(dir.path(), "pgo", key)));
    }
}

TEST_CASE("disk tier lists a namespace in pages", "[store][disk]") {
    TempDir dir;
    Stats stats;
    DiskTier tier(dir.path(), options(), stats);
    std::set<std::string> expected;
    for (int i = 0; i < 25; ++i) {
        const std::string key = fmt::format("key-{}", i);
        expected.insert(key);
        REQUIRE(tier.put("autotune", key,
                         make_entry(random_bytes(static_cast<std::size_t>(i) * 10, i))));
    }
    REQUIRE(tier.put("pgo", "elsewhere", make_entry("v")));

    std::vector<std::string> keys;
    std::vector<std::string> cursors;
    std::string cursor;
    do {
        const auto page = tier.list("autotune", cursor, 10);
        REQUIRE(page);
        cursors.push_back(page->next_cursor);
        for (const EntryInfo& info : page->entries) {
            keys.push_back(info.key);
            CHECK(info.size == std::stoul(info.key.substr(4)) * 10);
            CHECK(info.mtime_ms > 0);
        }
        if (!page->next_cursor.empty()) {
            CHECK(page->entries.size() == 10);
            CHECK(page->next_cursor == entry_hash("autotune", page->entries.back().key).hex());
        }
        cursor = page->next_cursor;
    } while (!cursor.empty() && cursors.size() < 10);

    REQUIRE(cursors.size() == 3);
    CHECK(cursors[2].empty());
    REQUIRE(keys.size() == 25);
    CHECK(std::set<std::string>(keys.begin(), keys.end()) == expected);
    // Ascending file-name (hash) order.
    for (std::size_t i = 1; i < keys.size(); ++i) {
        CHECK(entry_hash("autotune", keys[i - 1]).hex() < entry_hash("autotune", keys[i]).hex());
    }

    // A broken file is skipped, not listed.
    write_file(entry_path(dir.path(), "autotune", "key-3"), random_bytes(200));
    const auto all = tier.list("autotune", "", 100);
    REQUIRE(all);
    CHECK(all->entries.size() == 24);
    CHECK(all->next_cursor.empty());

    CHECK_FALSE(tier.list("autotune", "not-a-cursor", 10));
    const auto empty = tier.list("nothing-here", "", 10);
    REQUIRE(empty);
    CHECK(empty->entries.empty());
    CHECK(empty->next_cursor.empty());
}

TEST_CASE("disk tier clears one namespace", "[store][disk]") {
    TempDir dir;
    Stats stats;
    DiskTier tier(dir.path(), options(), stats);
    tier.wait_for_scan();
    for (int i = 0; i < 5; ++i) {
        REQUIRE(tier.put("fx-graph", fmt::format("k{}", i), make_entry("v")));
    }
    for (int i = 0; i < 3; ++i) {
        REQUIRE(tier.put("pgo", fmt::format("k{}", i), make_entry("v")));
    }
    CHECK(tier.clear("fx-graph").value() == 5);
    CHECK(tier.clear("fx-graph").value() == 0);
    CHECK(tier.clear("never-used").value() == 0);
    CHECK_FALSE(get(tier, "fx-graph", "k0"));
    CHECK(get(tier, "pgo", "k0"));
    CHECK(tier.count() == 3);
    CHECK(tier.size_bytes() == 3 * charged_size_of("pgo", "k0", 1));
}

TEST_CASE("disk tier with max_size 0 is disabled", "[store][disk]") {
    TempDir dir;
    Stats stats;
    DiskTier tier(dir.path() / "cache", options(0), stats);
    CHECK_FALSE(tier.enabled());
    CHECK(tier.scan_complete());
    REQUIRE(tier.put("pgo", "k", make_entry("v")));
    CHECK_FALSE(get(tier, "pgo", "k"));
    CHECK_FALSE(fs::exists(dir.path() / "cache"));
}

TEST_CASE("disk tier readers never see a partial entry", "[store][disk][concurrency]") {
    TempDir dir;
    Stats stats;
    DiskTier tier(dir.path(), files_only({1ULL << 30, 4096, 1}), stats);
    std::atomic<bool> stop{false};
    std::atomic<int> bad{0};
    std::atomic<int> hits{0};
    std::vector<std::thread> threads;
    for (int w = 0; w < 2; ++w) {
        threads.emplace_back([&, w] {
            for (int i = 0; i < 200; ++i) {
                // Every byte of a value equals its first; sizes vary.
                const auto size = static_cast<std::size_t>(1 + (i * 7919 + w) % 200'000);
                const char fill = static_cast<char>('a' + (i + w) % 26);
                tier.put("pgo", "shared", make_entry(std::string(size, fill)));
            }
        });
    }
    for (int r = 0; r < 2; ++r) {
        threads.emplace_back([&] {
            // At least one read after the writers are done, so hits > 0 even
            // if this thread starts late.
            bool last = false;
            do {
                last = stop;
                const auto result = tier.get("pgo", "shared");
                if (!result) {
                    ++bad;
                } else if (*result) {
                    ++hits;
                    const auto text = (*result)->value.text();
                    if (text.empty() || text.find_first_not_of(text[0]) != text.npos) {
                        ++bad;
                    }
                }
            } while (!last);
        });
    }
    threads[0].join();
    threads[1].join();
    stop = true;
    threads[2].join();
    threads[3].join();
    CHECK(bad == 0);
    CHECK(hits > 0);
    CHECK(stats.tier("pgo", TierId::disk).corrupt == 0);
    CHECK(temp_files_under(dir.path()) == 0);
}
