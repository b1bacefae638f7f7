// SPDX-License-Identifier: MIT
// DiskIndex against a model (daemon/store/disk/disk_index.hpp): random
// records, erases, relocations, CLEARs, evictions and a startup merge, with
// the index's counts, totals, stores and whole LRU order compared to a plain
// list after each run.
#include <algorithm>
#include <cstdint>
#include <list>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "daemon/store/disk/disk_index.hpp"

#include <catch2/catch.hpp>

using namespace pt2cache::daemon::store;

namespace {

struct ModelEntry {
    std::string ns;
    Hash128 id;
    std::uint64_t size = 0;
    bool small = false;
};

// The index's documented behaviour, written the slow and obvious way.
class Model {
public:
    void record(const std::string& ns, const Hash128& id, std::uint64_t size, bool small) {
        if (auto it = find(id); it != m_lru.end()) {
            ModelEntry entry = *it;
            entry.size = size;
            entry.small = small;
            m_lru.erase(it);
            m_lru.push_front(entry);
            return;
        }
        m_lru.push_front(ModelEntry{ns, id, size, small});
    }
    void erase(const Hash128& id) {
        if (m_scanning) {
            m_erased.insert(key(id));
        }
        if (auto it = find(id); it != m_lru.end()) {
            m_lru.erase(it);
        }
    }
    void relocate(const Hash128& id, std::uint64_t size, bool small) {
        if (auto it = find(id); it != m_lru.end()) {
            it->size = size;
            it->small = small;
        }
    }
    void erase_small_of(const std::string& ns) {
        if (m_scanning) {
            m_cleared.insert(ns);
        }
        for (auto it = m_lru.begin(); it != m_lru.end();) {
            if (it->small && it->ns == ns) {
                if (m_scanning) {
                    m_erased.insert(key(it->id));
                }
                it = m_lru.erase(it);
            } else {
                ++it;
            }
        }
    }
    std::optional<ModelEntry> pop_least_recent() {
        if (m_lru.empty()) {
            return std::nullopt;
        }
        ModelEntry entry = m_lru.back();
        m_lru.pop_back();
        if (m_scanning) {
            m_erased.insert(key(entry.id));
        }
        return entry;
    }
    // `scanned` in the index's order: most recent first, small first.
    void merge_scan(std::vector<DiskIndex::ScannedFile> scanned) {
        std::stable_sort(scanned.begin(), scanned.end(), [](const auto& a, const auto& b) {
            if (a.mtime_ms != b.mtime_ms) {
                return a.mtime_ms > b.mtime_ms;
            }
            return a.small > b.small;
        });
        for (const auto& file : scanned) {
            if (m_erased.contains(key(file.id)) || find(file.id) != m_lru.end() ||
                (file.small && m_cleared.contains(file.ns))) {
                continue;
            }
            m_lru.push_back(ModelEntry{file.ns, file.id, file.size, file.small});
        }
        m_scanning = false;
        m_erased.clear();
        m_cleared.clear();
    }
    const std::list<ModelEntry>& lru() const { return m_lru; }

private:
    static std::pair<std::uint64_t, std::uint64_t> key(const Hash128& id) {
        return {id.high, id.low};
    }
    std::list<ModelEntry>::iterator find(const Hash128& id) {
        return std::find_if(m_lru.begin(), m_lru.end(),
                            [&](const ModelEntry& entry) { return entry.id == id; });
    }

    std::list<ModelEntry> m_lru; // most recent first
    std::set<std::pair<std::uint64_t, std::uint64_t>> m_erased;
    std::set<std::string> m_cleared; // CLEARed namespaces, while scanning
    bool m_scanning = true;
};

Hash128 id_of(unsigned n) {
    // Collisions in the low half too: the table must compare whole ids.
    return Hash128{0x9e3779b97f4a7c15ull * (n + 1), n % 7};
}

void check_same(DiskIndex& index, Model& model, unsigned pool) {
    std::uint64_t total = 0;
    std::uint64_t small = 0;
    for (const auto& entry : model.lru()) {
        total += entry.size;
        small += entry.small ? entry.size : 0;
    }
    REQUIRE(index.count() == model.lru().size());
    REQUIRE(index.total_bytes() == total);
    REQUIRE(index.small_bytes() == small);
    for (unsigned n = 0; n < pool; ++n) {
        const Hash128 id = id_of(n);
        const auto it = std::find_if(model.lru().begin(), model.lru().end(),
                                     [&](const ModelEntry& entry) { return entry.id == id; });
        INFO("id " << n);
        REQUIRE(index.contains(id) == (it != model.lru().end()));
        REQUIRE(index.where(id) ==
                (it != model.lru().end() ? std::optional<bool>(it->small) : std::nullopt));
    }
    // The whole LRU order, by evicting everything.
    std::size_t popped = 0;
    while (auto expected = model.pop_least_recent()) {
        INFO("eviction " << popped);
        const auto victim = index.pop_least_recent();
        REQUIRE(victim);
        REQUIRE(victim->id == expected->id);
        REQUIRE(victim->ns == expected->ns);
        REQUIRE(victim->size == expected->size);
        REQUIRE(victim->small == expected->small);
        ++popped;
    }
    REQUIRE_FALSE(index.pop_least_recent());
    REQUIRE(index.count() == 0);
    REQUIRE(index.total_bytes() == 0);
}

} // namespace

TEST_CASE("disk index: random operations and a startup merge match a model", "[index]") {
    const std::vector<std::string> namespaces{"fxgraph", "autotune", "aotautograd"};
    constexpr unsigned k_pool = 300;
    for (unsigned seed = 1; seed <= 24; ++seed) {
        INFO("seed " << seed);
        std::mt19937 random(seed);
        auto pick = [&](unsigned n) { return static_cast<unsigned>(random() % n); };
        DiskIndex index;
        Model model;
        auto operate = [&](unsigned count) {
            for (unsigned i = 0; i < count; ++i) {
                const unsigned n = pick(k_pool);
                const std::string& ns = namespaces[n % namespaces.size()];
                switch (pick(10)) {
                case 0:
                case 1:
                case 2:
                case 3: {
                    const std::uint64_t size = 1 + pick(5000);
                    const bool small = pick(2) == 0;
                    index.record(ns, id_of(n), size, small);
                    model.record(ns, id_of(n), size, small);
                    break;
                }
                case 4:
                case 5:
                    index.erase(id_of(n));
                    model.erase(id_of(n));
                    break;
                case 6: {
                    const std::uint64_t size = 1 + pick(5000);
                    const bool small = pick(2) == 0;
                    index.relocate(id_of(n), size, small);
                    model.relocate(id_of(n), size, small);
                    break;
                }
                case 7:
                    if (pick(8) == 0) {
                        index.erase_small_of(ns);
                        model.erase_small_of(ns);
                    }
                    break;
                default: {
                    const auto victim = index.pop_least_recent();
                    const auto expected = model.pop_least_recent();
                    REQUIRE(victim.has_value() == expected.has_value());
                    if (victim) {
                        REQUIRE(victim->id == expected->id);
                    }
                    break;
                }
                }
            }
        };
        // Before the scan is merged (entries touched since startup) ...
        operate(400);
        // ... the scan: distinct times, some ids twice (both stores: the
        // small record must win), some touched or erased meanwhile.
        std::vector<DiskIndex::ScannedFile> scanned;
        for (unsigned k = 0; k < 250; ++k) {
            const unsigned n = pick(k_pool);
            const std::int64_t time = 1'000'000 + static_cast<std::int64_t>(k) * 3;
            scanned.push_back(
                {namespaces[n % namespaces.size()], id_of(n), 1 + pick(5000), time, pick(2) == 0});
            if (pick(5) == 0) {
                scanned.push_back({namespaces[n % namespaces.size()], id_of(n), 1 + pick(5000),
                                   time, !scanned.back().small});
            }
        }
        index.merge_scan(scanned);
        model.merge_scan(scanned);
        // ... and after it.
        operate(600);
        check_same(index, model, k_pool);
    }
}

TEST_CASE("disk index: a large merge keeps every entry, the least recent evicted first",
          "[index]") {
    constexpr unsigned k_count = 200'000;
    DiskIndex index;
    std::vector<DiskIndex::ScannedFile> scanned;
    scanned.reserve(k_count);
    for (unsigned n = 0; n < k_count; ++n) {
        // Times in blocks of equal milliseconds, as a fast fill leaves them.
        scanned.push_back({"autotune", Hash128{n * 0x9e3779b97f4a7c15ull, n}, 300,
                           static_cast<std::int64_t>(n / 1000), n % 2 == 0});
    }
    index.merge_scan(std::move(scanned));
    REQUIRE(index.count() == k_count);
    REQUIRE(index.total_bytes() == std::uint64_t{300} * k_count);
    REQUIRE(index.small_bytes() == std::uint64_t{300} * k_count / 2);
    std::int64_t last_time = -1;
    for (unsigned i = 0; i < k_count; ++i) {
        const auto victim = index.pop_least_recent();
        REQUIRE(victim);
        const auto n = static_cast<std::int64_t>(victim->id.low);
        REQUIRE(n / 1000 >= last_time); // least recent first
        last_time = n / 1000;
    }
    REQUIRE_FALSE(index.pop_least_recent());
}

TEST_CASE("disk index: a salvage wants only what did not change since it began", "[index]") {
    DiskIndex index;
    index.merge_scan({});
    const auto id = [](std::uint64_t n) { return Hash128{n, n}; };
    for (std::uint64_t n = 1; n <= 6; ++n) {
        index.record(n == 6 ? "tune" : "pgo", id(n), 100, true);
    }
    index.record("fx", id(9), 5000, false);
    constexpr std::uint64_t k_generation = 7;
    CHECK_FALSE(index.salvage_wanted(k_generation, "pgo", id(1))); // none running

    index.erase_all_small(k_generation);
    REQUIRE(index.count() == 1); // the file stays
    CHECK(index.salvage_wanted(k_generation, "pgo", id(1)));
    CHECK_FALSE(index.salvage_wanted(k_generation + 1, "pgo", id(1))); // another store
    CHECK_FALSE(index.salvage_wanted(k_generation, "fx", id(9)));      // known: a file
    index.record("pgo", id(2), 100, true);                             // put again
    index.erase(id(3));                                                // removed (nothing there)
    index.record("pgo", id(4), 100, true);                             // put, then evicted
    REQUIRE(index.pop_least_recent()->id == id(9));
    REQUIRE(index.pop_least_recent()->id == id(2));
    REQUIRE(index.pop_least_recent()->id == id(4));
    index.erase_small_of("tune"); // cleared
    for (const std::uint64_t n : {2, 3, 4}) {
        CHECK_FALSE(index.salvage_wanted(k_generation, "pgo", id(n)));
    }
    CHECK_FALSE(index.salvage_wanted(k_generation, "tune", id(6)));
    CHECK(index.salvage_wanted(k_generation, "pgo", id(5)));

    // Recorded behind everything, small; refused when no longer wanted.
    index.record("pgo", id(2), 100, true);
    index.record_salvaged(k_generation, "pgo", id(1), 300);
    index.record_salvaged(k_generation, "pgo", id(3), 300);
    index.record_salvaged(k_generation, "tune", id(6), 300);
    CHECK(index.count() == 2);
    CHECK(index.small_bytes() == 400);
    CHECK(index.where(id(1)) == true);
    index.end_salvage(k_generation + 1); // not this one's: goes on
    index.record_salvaged(k_generation, "pgo", id(5), 300);
    index.end_salvage(k_generation);
    CHECK_FALSE(index.salvage_wanted(k_generation, "pgo", id(8)));
    index.record_salvaged(k_generation, "pgo", id(8), 300);
    CHECK(index.count() == 3);
    // Least recent first: the salvaged ones, the later behind the earlier.
    CHECK(index.pop_least_recent()->id == id(5));
    CHECK(index.pop_least_recent()->id == id(1));
    CHECK(index.pop_least_recent()->id == id(2));
}
