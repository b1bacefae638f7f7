// SPDX-License-Identifier: MIT
// The disk tier's small-entry store (LMDB, small.mdb): routing by size, no
// stale copy across stores, verification of every value, eviction under
// max_size across both stores, a broken small.mdb, a full map, migration.
#include <atomic>
#include <fcntl.h>
#include <map>
#include <random>
#include <set>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

#include "daemon/store/disk/disk_entry.hpp"
#include "daemon/store/disk/disk_layout.hpp"
#include "daemon/store/disk/disk_small_store.hpp"
#include "daemon/store/disk/disk_tier.hpp"
#include "tests/daemon/store/helpers.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>
#include <fmt/format.h>

using namespace pt2cache::daemon::store;
using pt2cache::tests::make_entry;
using pt2cache::tests::random_bytes;
using pt2cache::tests::TempDir;
using pt2cache::tests::wait_until;
namespace fs = std::filesystem;

namespace {

DiskOptions small_options(DiskWriteMode mode, std::uint64_t max_size = 1ULL << 30) {
    DiskOptions options{max_size, 1ULL << 40, 1};
    options.write_mode = mode;
    options.small_entry_max = 16 << 10;
    return options;
}

fs::path entry_path(const fs::path& root, std::string_view ns, std::string_view key) {
    const std::string hex = entry_hash(ns, key).hex();
    return root / "v1" / std::string(ns) / hex.substr(0, 2) / hex;
}

std::string value_of(DiskTier& tier, std::string_view ns, std::string_view key) {
    auto entry = tier.get(ns, key);
    REQUIRE(entry);
    return *entry ? std::string((*entry)->value.text()) : std::string("<miss>");
}

std::string text_of(const std::vector<std::byte>& bytes) {
    return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

bool in_small(DiskTier& tier, std::string_view ns, std::string_view key) {
    return tier.small_store() != nullptr && tier.small_store()->contains(ns, entry_hash(ns, key));
}

std::size_t entry_files(const fs::path& root) {
    std::size_t count = 0;
    if (!fs::exists(root / "v1")) {
        return 0;
    }
    for (const auto& item : fs::recursive_directory_iterator(root / "v1")) {
        count +=
            item.is_regular_file() && parse_entry_name(item.path().filename().string()) ? 1 : 0;
    }
    return count;
}

// What `du` counts for the entries: allocated blocks of every regular file
// but the LMDB lock file (directories are not charged either).
std::uint64_t du_of_entries(const fs::path& root) {
    std::uint64_t total = 0;
    for (const auto& item : fs::recursive_directory_iterator(root)) {
        struct stat info {};
        if (item.path().filename() == "small.mdb-lock" ||
            ::lstat(item.path().c_str(), &info) != 0 || !S_ISREG(info.st_mode)) {
            continue;
        }
        total += static_cast<std::uint64_t>(info.st_blocks) * 512;
    }
    return total;
}

// Stores `bytes` as the raw value of (ns, key) in the small.mdb under `root`.
void put_raw(const fs::path& root, std::string_view ns, std::string_view key,
             std::span<const std::byte> bytes) {
    bool recovered = false;
    auto store = SmallStore::open((root / "small.mdb").string(), 64ULL << 20, recovered);
    REQUIRE(store);
    const SmallWrite writes[] = {{ns, entry_hash(ns, key), {bytes, {}, {}}, 0}};
    REQUIRE((*store)->write(writes, 1));
}

auto modes() {
    return Catch::Generators::values({DiskWriteMode::sync, DiskWriteMode::async});
}

} // namespace

TEST_CASE("one write stores a batch in any order, the later of two writes of a key",
          "[store][disk][small]") {
    // SmallStore::write puts in key order, not in the order given: the batch
    // here is in hash order across two namespaces, and every key is written
    // three times, interleaved with the others. Each key must hold its last
    // value, value and meta record alike.
    TempDir dir;
    bool recovered = false;
    auto store = SmallStore::open((dir.path() / "small.mdb").string(), 64ULL << 20, recovered);
    REQUIRE(store);
    struct Key {
        std::string ns;
        std::string key;
    };
    std::vector<Key> keys;
    for (int i = 0; i < 300; ++i) {
        keys.push_back({i % 2 == 0 ? "autotune" : "fx-graph", fmt::format("key-{}", i)});
    }
    std::vector<std::vector<std::byte>> values;
    std::vector<SmallWrite> writes;
    values.reserve(keys.size() * 3);
    for (int round = 0; round < 3; ++round) {
        for (std::size_t i = 0; i < keys.size(); ++i) {
            // Sizes differ between rounds, so a meta record of the wrong
            // round shows.
            values.push_back(random_bytes(100 + 50 * round + i, i * 3 + round));
            writes.push_back(SmallWrite{keys[i].ns,
                                        entry_hash(keys[i].ns, keys[i].key),
                                        {values.back(), {}, {}},
                                        static_cast<UnixMs>(1 + round)});
        }
    }
    REQUIRE((*store)->write(writes, 1));
    for (std::size_t i = 0; i < keys.size(); ++i) {
        const auto stored = (*store)->read(keys[i].ns, entry_hash(keys[i].ns, keys[i].key));
        REQUIRE(stored);
        REQUIRE(stored->has_value());
        CHECK(**stored == values[2 * keys.size() + i]);
    }
    std::map<std::string, std::uint32_t> last_sizes; // by id
    for (std::size_t i = 0; i < keys.size(); ++i) {
        last_sizes[entry_hash(keys[i].ns, keys[i].key).hex()] =
            static_cast<std::uint32_t>(values[2 * keys.size() + i].size());
    }
    std::size_t records = 0;
    REQUIRE((*store)->load_meta([&](SmallRecord&& record) {
        ++records;
        CHECK(record.size == last_sizes.at(record.id.hex()));
        CHECK(record.atime_ms == 3);
    }));
    CHECK(records == keys.size());
}

TEST_CASE("small entries live in small.mdb, large ones in files", "[store][disk][small]") {
    const DiskWriteMode mode = GENERATE(modes());
    TempDir dir;
    Stats stats;
    const auto big = random_bytes(20'000, 7);
    {
        DiskTier tier(dir.path(), small_options(mode), stats);
        REQUIRE(tier.small_store() != nullptr);
        REQUIRE(tier.put("autotune", "small", make_entry(std::string(200, 'a'))));
        REQUIRE(tier.put("fx-graph", "large", make_entry(big)));
        // Read your writes, queued or not.
        CHECK(value_of(tier, "autotune", "small") == std::string(200, 'a'));
        CHECK(value_of(tier, "fx-graph", "large") == text_of(big));
        tier.wait_for_writes();
        CHECK(in_small(tier, "autotune", "small"));
        CHECK_FALSE(fs::exists(entry_path(dir.path(), "autotune", "small")));
        CHECK(fs::exists(entry_path(dir.path(), "fx-graph", "large")));
        CHECK_FALSE(in_small(tier, "fx-graph", "large"));
        CHECK(tier.exists("autotune", "small").value());
        CHECK(tier.entry_count() == 2);
    }
    DiskTier reopened(dir.path(), small_options(mode), stats);
    reopened.wait_for_scan();
    CHECK(reopened.count() == 2);
    CHECK(reopened.known_absent("autotune", "other"));
    CHECK_FALSE(reopened.known_absent("autotune", "small"));
    CHECK_FALSE(reopened.known_absent("fx-graph", "large"));
    CHECK(value_of(reopened, "autotune", "small") == std::string(200, 'a'));
    CHECK(value_of(reopened, "fx-graph", "large") == text_of(big));
    CHECK(stats.tier("autotune", TierId::disk).corrupt == 0);
    CHECK(stats.tier("autotune", TierId::disk).errors == 0);
}

TEST_CASE("an entry that changes store leaves no copy behind", "[store][disk][small]") {
    const DiskWriteMode mode = GENERATE(modes());
    TempDir dir;
    Stats stats;
    const auto big = random_bytes(30'000, 3);
    {
        DiskTier tier(dir.path(), small_options(mode), stats);
        REQUIRE(tier.put("fx-graph", "k", make_entry("small-1")));
        tier.wait_for_writes();
        REQUIRE(in_small(tier, "fx-graph", "k"));
        REQUIRE(tier.put("fx-graph", "k", make_entry(big)));
        tier.wait_for_writes();
        CHECK_FALSE(in_small(tier, "fx-graph", "k"));
        CHECK(fs::exists(entry_path(dir.path(), "fx-graph", "k")));
        CHECK(value_of(tier, "fx-graph", "k") == text_of(big));
        REQUIRE(tier.put("fx-graph", "k", make_entry("small-2")));
        tier.wait_for_writes();
        CHECK_FALSE(fs::exists(entry_path(dir.path(), "fx-graph", "k")));
        CHECK(value_of(tier, "fx-graph", "k") == "small-2");
        CHECK(tier.count() == 1);
        CHECK(tier.remove("fx-graph", "k").value());
        CHECK_FALSE(in_small(tier, "fx-graph", "k"));
        CHECK(value_of(tier, "fx-graph", "k") == "<miss>");
        REQUIRE(tier.put("fx-graph", "k", make_entry("small-3")));
    }
    DiskTier reopened(dir.path(), small_options(mode), stats);
    CHECK(value_of(reopened, "fx-graph", "k") == "small-3");
    reopened.wait_for_scan();
    CHECK(reopened.count() == 1);
}

TEST_CASE("a broken small value is a counted miss and sets small.mdb aside",
          "[store][disk][small]") {
    // LMDB wrote the value whole: bytes that fail verification were damaged
    // in the file since, and the page's offsets and sizes may be too, which
    // a delete there would follow. The store is replaced by an empty one.
    const DiskWriteMode mode = GENERATE(modes());
    TempDir dir;
    Stats stats;
    const Entry entry = make_entry(random_bytes(300, 5));
    const auto good = encode("pgo", "k", entry, 1ULL << 40, 1);
    const auto other = encode("pgo", "other", entry, 1ULL << 40, 1);
    std::vector<std::byte> stored;
    std::string what;
    SECTION("a flipped payload byte") {
        stored = good;
        stored[good.size() / 2] ^= std::byte{0x40};
        what = "checksum";
    }
    SECTION("truncated") {
        stored.assign(good.begin(), good.end() - 10);
        what = "truncated";
    }
    SECTION("extended") {
        stored = good;
        stored.push_back(std::byte{0});
        what = "extended";
    }
    SECTION("swapped: another key's valid entry") {
        stored = other;
        what = "swapped";
    }
    SECTION("garbage") {
        stored = random_bytes(300, 9);
        what = "garbage";
    }
    put_raw(dir.path(), "pgo", "k", stored);
    put_raw(dir.path(), "pgo", "sound", encode("pgo", "sound", entry, 1ULL << 40, 1));
    DiskTier tier(dir.path(), small_options(mode), stats);
    tier.wait_for_scan();
    tier.hold_salvage(true); // until the end: a salvage would put "sound" back meanwhile
    INFO(what);
    CHECK(tier.count() == 2);
    CHECK(tier.exists("pgo", "k").value() == (what == "checksum"));
    CHECK(tier.small_store()->quarantines() == 0);
    CHECK(value_of(tier, "pgo", "k") == "<miss>");
    CHECK(stats.tier("pgo", TierId::disk).corrupt == 1);
    CHECK(tier.small_store()->quarantines() == 1);
    CHECK(stats.daemon().small_store_recoveries == 1);
    CHECK(fs::exists(dir.path() / "small.mdb.broken"));
    CHECK_FALSE(in_small(tier, "pgo", "k"));
    // The other entries went with the file; the key can be stored again.
    CHECK(tier.count() == 0);
    CHECK_FALSE(in_small(tier, "pgo", "sound"));
    REQUIRE(tier.put("pgo", "k", entry));
    tier.wait_for_writes();
    auto hit = tier.get("pgo", "k");
    REQUIRE(hit);
    REQUIRE(*hit);
    CHECK(std::equal(entry.value.bytes().begin(), entry.value.bytes().end(),
                     (*hit)->value.bytes().begin(), (*hit)->value.bytes().end()));
    // The salvage brings back the sound entry, not the broken one (put again).
    tier.hold_salvage(false);
    tier.wait_for_salvage();
    CHECK(stats.daemon().small_store_salvaged == 1);
    CHECK(value_of(tier, "pgo", "sound") != "<miss>");
    CHECK(tier.count() == 2);
}

TEST_CASE("list, scan, clear and remove see both stores", "[store][disk][small]") {
    const DiskWriteMode mode = GENERATE(modes());
    TempDir dir;
    Stats stats;
    DiskTier tier(dir.path(), small_options(mode), stats);
    std::set<std::string> keys;
    for (int i = 0; i < 40; ++i) {
        const std::string key = fmt::format("k{}", i);
        const auto value = random_bytes(i % 4 == 0 ? 20'000 : 100, static_cast<std::uint64_t>(i));
        REQUIRE(tier.put("fx-graph", key, make_entry(value)));
        keys.insert(key);
    }
    REQUIRE(tier.put("autotune", "a", make_entry("x")));
    std::set<std::string> listed;
    std::string cursor;
    std::string previous_hash;
    int pages = 0;
    do {
        auto page = tier.list("fx-graph", cursor, 7);
        REQUIRE(page);
        for (const auto& info : page->entries) {
            // One ascending hash order across both stores.
            const std::string hash = entry_hash("fx-graph", info.key).hex();
            CHECK(hash > previous_hash);
            previous_hash = hash;
            CHECK(listed.insert(info.key).second);
        }
        cursor = page->next_cursor;
        ++pages;
    } while (!cursor.empty() && pages < 100);
    CHECK(listed == keys);

    std::set<std::string> scanned;
    cursor.clear();
    pages = 0;
    do {
        auto page = tier.scan_entries(cursor, 5, 0, {});
        REQUIRE(page);
        for (const auto& info : page->entries) {
            scanned.insert(info.ns + "/" + info.key);
        }
        cursor = page->next_cursor;
        ++pages;
    } while (!cursor.empty() && pages < 100);
    CHECK(scanned.size() == 41);
    CHECK(scanned.contains("autotune/a"));

    CHECK(tier.remove("fx-graph", "k1").value());
    CHECK(tier.remove("fx-graph", "k4").value());
    CHECK(tier.clear("fx-graph").value() == 38);
    CHECK(value_of(tier, "fx-graph", "k2") == "<miss>");
    CHECK(value_of(tier, "fx-graph", "k8") == "<miss>");
    CHECK(value_of(tier, "autotune", "a") == "x");
    tier.wait_for_scan();
    CHECK(tier.count() == 1);
    CHECK(tier.entry_count() == 1);
}

TEST_CASE("eviction across both stores keeps du within max_size", "[store][disk][small]") {
    const DiskWriteMode mode = GENERATE(modes());
    TempDir dir;
    Stats stats;
    constexpr std::uint64_t k_max_size = 3ULL << 20;
    const std::size_t sizes[] = {150, 200, 900, 3000, 9000, 25'000, 60'000};
    std::mt19937 random(11);
    {
        DiskTier tier(dir.path(), small_options(mode, k_max_size), stats);
        tier.wait_for_scan();
        for (int i = 0; i < 1500; ++i) {
            const std::size_t size = sizes[random() % std::size(sizes)];
            REQUIRE(tier.put("autotune", fmt::format("k{}", i),
                             make_entry(random_bytes(size, static_cast<std::uint64_t>(i)))));
            if (i % 100 == 0) {
                // Keep two entries, one of each store, hot.
                REQUIRE(tier.put("autotune", "hot-small", make_entry("h")));
                REQUIRE(tier.put("autotune", "hot-large", make_entry(random_bytes(40'000, 1))));
            }
            if (i % 10 == 0) {
                // Recency is the write's: let the puts before these reads land
                // first (a read of a queued write is answered from the queue).
                tier.wait_for_writes();
                CHECK(value_of(tier, "autotune", "hot-small") == "h");
                CHECK(value_of(tier, "autotune", "hot-large") != "<miss>");
            }
        }
        tier.wait_for_writes();
        // Eviction settles: du of the entries (files and small.mdb) within max_size.
        CHECK(wait_until([&] { return du_of_entries(dir.path()) <= k_max_size; },
                         std::chrono::seconds(20)));
        INFO("du " << du_of_entries(dir.path()) << ", tier " << tier.size_bytes());
        CHECK(du_of_entries(dir.path()) <= k_max_size);
        CHECK(tier.size_bytes() <= k_max_size);
        CHECK(stats.tier("autotune", TierId::disk).evictions > 0);
        CHECK(value_of(tier, "autotune", "hot-small") == "h");
        CHECK(value_of(tier, "autotune", "hot-large") != "<miss>");
        CHECK(entry_files(dir.path()) > 0);
        CHECK(tier.small_bytes_charged() > 0);
    }
    // The LRU order and the index survive a restart.
    DiskTier reopened(dir.path(), small_options(mode, k_max_size), stats);
    reopened.wait_for_scan();
    CHECK(du_of_entries(dir.path()) <= k_max_size);
    CHECK(value_of(reopened, "autotune", "hot-small") == "h");
    CHECK(stats.tier("autotune", TierId::disk).corrupt == 0);
}

TEST_CASE("a small.mdb LMDB refuses is moved aside and replaced", "[store][disk][small]") {
    TempDir dir;
    Stats stats;
    const fs::path path = dir.path() / "small.mdb";
    std::string what;
    SECTION("garbage") {
        pt2cache::tests::write_file(path, random_bytes(64 << 10, 3));
        what = "garbage";
    }
    SECTION("another LMDB version") {
        {
            DiskTier tier(dir.path(), small_options(DiskWriteMode::sync), stats);
            REQUIRE(tier.put("pgo", "k", make_entry("v")));
        }
        // MDB_meta.mm_version follows mm_magic after the 16-byte page header,
        // in both meta pages.
        const int fd = ::open(path.c_str(), O_RDWR);
        REQUIRE(fd >= 0);
        const std::uint32_t version = 999;
        for (const off_t page : {0, 4096}) {
            REQUIRE(::pwrite(fd, &version, sizeof version, page + 16 + 4) == sizeof version);
        }
        ::close(fd);
        what = "version";
    }
    SECTION("truncated") {
        {
            DiskTier tier(dir.path(), small_options(DiskWriteMode::sync), stats);
            std::vector<std::pair<std::string, std::string>> batch;
            for (int i = 0; i < 300; ++i) {
                REQUIRE(tier.put("pgo", fmt::format("k{}", i), make_entry(std::string(3000, 'x'))));
            }
        }
        REQUIRE(fs::file_size(path) > 16 * 4096);
        fs::resize_file(path, 3 * 4096);
        what = "truncated";
    }
    SECTION("a symbolic link") {
        fs::create_symlink(dir.path() / "elsewhere", path);
        what = "link";
    }
    INFO(what);
    const auto before = stats.daemon().small_store_recoveries.load();
    DiskTier tier(dir.path(), small_options(DiskWriteMode::sync), stats);
    CHECK(stats.daemon().small_store_recoveries == before + 1);
    CHECK(fs::exists(fs::symlink_status(dir.path() / "small.mdb.broken")));
    REQUIRE(tier.small_store() != nullptr);
    CHECK(value_of(tier, "pgo", "k") == "<miss>");
    REQUIRE(tier.put("pgo", "k", make_entry("fresh")));
    CHECK(value_of(tier, "pgo", "k") == "fresh");
    CHECK(in_small(tier, "pgo", "k"));
}

TEST_CASE("a full LMDB map fails puts cleanly and evicts", "[store][disk][small]") {
    const DiskWriteMode mode = GENERATE(modes());
    TempDir dir;
    Stats stats;
    DiskOptions options = small_options(mode);
    options.small_map_size = 1 << 20;
    DiskTier tier(dir.path(), options, stats);
    tier.wait_for_scan();
    bool failed = false;
    int written = 0;
    for (int i = 0; i < 2000 && !failed; ++i) {
        const auto put = tier.put("pgo", fmt::format("k{}", i), make_entry(std::string(1500, 'v')));
        if (mode == DiskWriteMode::async) {
            tier.wait_for_writes();
            failed = stats.tier("pgo", TierId::disk).errors > 0;
        } else {
            failed = !put;
        }
        written += failed ? 0 : 1;
    }
    REQUIRE(failed);
    CHECK(written > 100);
    // The evictor makes room (a quarter of the store); puts work again.
    CHECK(wait_until([&] { return stats.tier("pgo", TierId::disk).evictions > 0; }));
    CHECK(wait_until([&] {
        const auto put = tier.put("pgo", "after", make_entry(std::string(1500, 'a')));
        tier.wait_for_writes();
        return put && in_small(tier, "pgo", "after");
    }));
    CHECK(value_of(tier, "pgo", "after") == std::string(1500, 'a'));
    CHECK(value_of(tier, "pgo", fmt::format("k{}", written - 1)) == std::string(1500, 'v'));
}

TEST_CASE("small entry files migrate into small.mdb, readable throughout", "[store][disk][small]") {
    TempDir dir;
    Stats stats;
    constexpr int k_small = 600;
    {
        DiskOptions files = small_options(DiskWriteMode::sync);
        files.small_entry_max = 0;
        DiskTier tier(dir.path(), files, stats);
        for (int i = 0; i < k_small; ++i) {
            REQUIRE(tier.put("autotune", fmt::format("k{}", i), make_entry(fmt::format("v{}", i))));
        }
        for (int i = 0; i < 3; ++i) {
            REQUIRE(tier.put("fx-graph", fmt::format("big{}", i),
                             make_entry(random_bytes(40'000, static_cast<std::uint64_t>(i)))));
        }
        CHECK(tier.small_store() == nullptr);
    }
    REQUIRE(entry_files(dir.path()) == k_small + 3);
    REQUIRE_FALSE(fs::exists(dir.path() / "small.mdb"));

    DiskTier tier(dir.path(), small_options(DiskWriteMode::async), stats);
    std::atomic<int> misses{0};
    std::atomic<int> wrong{0};
    std::atomic<int> rounds{0};
    std::atomic<bool> done{false};
    std::thread reader([&] {
        for (int round = 0; round < 1000 && !done; ++round) {
            for (int i = 0; i < k_small; i += 7) {
                auto got = tier.get("autotune", fmt::format("k{}", i));
                if (!got || !*got) {
                    ++misses;
                } else if ((*got)->value.text() != fmt::format("v{}", i)) {
                    ++wrong;
                }
            }
            ++rounds;
        }
    });
    tier.wait_for_migration();
    done = true;
    reader.join();
    CHECK(rounds > 0);
    CHECK(misses == 0);
    CHECK(wrong == 0);
    CHECK(entry_files(dir.path()) == 3);
    for (int i = 0; i < k_small; ++i) {
        REQUIRE(in_small(tier, "autotune", fmt::format("k{}", i)));
        REQUIRE(value_of(tier, "autotune", fmt::format("k{}", i)) == fmt::format("v{}", i));
    }
    CHECK(tier.count() == k_small + 3);
    CHECK(stats.tier("autotune", TierId::disk).corrupt == 0);
}

TEST_CASE("small and large entries under concurrent puts, gets and removes",
          "[store][disk][small][concurrency]") {
    // A model per thread: each thread owns its keys, so what get answers must
    // be exactly what the model holds; the other threads make the races.
    // Values alternate between the stores, so entries move between them.
    const DiskWriteMode mode = GENERATE(modes());
    TempDir dir;
    Stats stats;
    constexpr int k_threads = 3;
    constexpr int k_keys = 12;
    std::vector<std::map<std::string, std::string>> models(k_threads);
    std::atomic<int> wrong{0};
    std::atomic<int> failures{0};
    {
        DiskOptions options = small_options(mode);
        options.write_queue_bytes = 256 << 10;
        DiskTier tier(dir.path(), options, stats);
        std::vector<std::thread> threads;
        for (int t = 0; t < k_threads; ++t) {
            threads.emplace_back([&, t] {
                std::mt19937 random(static_cast<unsigned>(t) + 1);
                auto& model = models[static_cast<std::size_t>(t)];
                for (int i = 0; i < 400; ++i) {
                    const std::string key = fmt::format("t{}-k{}", t, random() % k_keys);
                    const unsigned op = random() % 4;
                    if (op <= 1) {
                        const std::size_t size = random() % 2 == 0 ? 40 : 20'000;
                        std::string value = fmt::format("{}={}:", key, i);
                        value.resize(size, static_cast<char>('a' + i % 26));
                        failures += tier.put("fx-graph", key, make_entry(value)) ? 0 : 1;
                        model[key] = value;
                    } else if (op == 2) {
                        auto got = tier.get("fx-graph", key);
                        const auto it = model.find(key);
                        if (!got) {
                            ++failures;
                        } else if (*got ? it == model.end() || (*got)->value.text() != it->second
                                        : it != model.end()) {
                            ++wrong;
                        }
                    } else {
                        failures += tier.remove("fx-graph", key) ? 0 : 1;
                        model.erase(key);
                    }
                }
            });
        }
        for (auto& thread : threads) {
            thread.join();
        }
    }
    CHECK(failures == 0);
    CHECK(wrong == 0);
    // After a restart every key holds exactly its model's value, in one store.
    DiskTier reopened(dir.path(), small_options(mode), stats);
    for (int t = 0; t < k_threads; ++t) {
        for (int k = 0; k < k_keys; ++k) {
            const std::string key = fmt::format("t{}-k{}", t, k);
            const auto& model = models[static_cast<std::size_t>(t)];
            const auto it = model.find(key);
            CHECK(value_of(reopened, "fx-graph", key) ==
                  (it == model.end() ? std::string("<miss>") : it->second));
            CHECK_FALSE((in_small(reopened, "fx-graph", key) &&
                         fs::exists(entry_path(dir.path(), "fx-graph", key))));
        }
    }
    CHECK(stats.tier("fx-graph", TierId::disk).corrupt == 0);
    CHECK(stats.tier("fx-graph", TierId::disk).errors == 0);
}
