// SPDX-License-Identifier: MIT
// SmallStore::compact: the copy keeps every entry, byte for byte, with its
// meta record, and leaves the erased entries' pages behind. (Faults during a
// compaction: test_disk_small_faults.cpp.)
#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "daemon/store/disk/disk_layout.hpp"
#include "daemon/store/disk/disk_small_store.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>
#include <fmt/format.h>

using namespace pt2cache::daemon::store;
using pt2cache::tests::TempDir;
namespace fs = std::filesystem;

TEST_CASE("compaction keeps every entry and its bytes, and frees the erased ones' space",
          "[store][disk][small]") {
    // 12,000 entries of 3000 bytes, a third of them erased: the 8,000 left
    // (24 MB, so the copy commits more than once) are all in the compacted
    // file, byte for byte, with their meta records, and the file shrank.
    TempDir dir;
    const std::string path = (dir.path() / "small.mdb").string();
    bool recovered = false;
    auto opened = SmallStore::open(path, 256ULL << 20, recovered);
    REQUIRE(opened);
    auto& store = **opened;
    constexpr int k_count = 12'000;
    const auto key_of = [](int i) { return fmt::format("k{}", i); };
    const auto value_of = [](int i) {
        std::string value = fmt::format("value {:06} ", i);
        value.resize(3000, static_cast<char>('a' + i % 26));
        return value;
    };
    for (int start = 0; start < k_count; start += 1000) {
        std::vector<std::string> values;
        values.reserve(1000); // the writes point into them
        std::vector<SmallWrite> writes;
        for (int i = start; i < start + 1000; ++i) {
            values.push_back(value_of(i));
            writes.push_back({"pgo",
                              entry_hash("pgo", key_of(i)),
                              {std::as_bytes(std::span(values[i - start])), {}, {}},
                              1'700'000'000'000 + i});
        }
        REQUIRE(store.write(writes, 1));
    }
    std::vector<SmallKeyRef> erased;
    for (int i = 1; i < k_count; i += 3) {
        erased.push_back({"pgo", entry_hash("pgo", key_of(i))});
    }
    REQUIRE(store.erase(erased) == erased.size());
    const auto before = fs::file_size(path);

    REQUIRE(store.compact());
    CHECK(fs::file_size(path) < before);
    CHECK(store.size() == k_count - erased.size());
    std::vector<SmallRecord> records;
    REQUIRE(store.load_meta([&](SmallRecord&& record) { records.push_back(std::move(record)); }));
    REQUIRE(records.size() == k_count - erased.size());
    std::sort(records.begin(), records.end(),
              [](const auto& a, const auto& b) { return a.atime_ms < b.atime_ms; });
    int kept = 0;
    int wrong = 0;
    for (int i = 0; i < k_count; ++i) {
        auto read = store.read("pgo", entry_hash("pgo", key_of(i)));
        REQUIRE(read);
        if (i % 3 == 1) {
            wrong += *read ? 1 : 0; // erased: must be gone
            continue;
        }
        const std::string want = value_of(i);
        const auto& record = records[static_cast<std::size_t>(kept++)];
        const bool same = *read && std::string(reinterpret_cast<const char*>((*read)->data()),
                                               (*read)->size()) == want;
        const bool meta = record.id == entry_hash("pgo", key_of(i)) && record.ns == "pgo" &&
                          record.atime_ms == 1'700'000'000'000 + i && record.size == want.size();
        wrong += same && meta ? 0 : 1;
    }
    CHECK(kept == k_count - static_cast<int>(erased.size()));
    CHECK(wrong == 0);
}
