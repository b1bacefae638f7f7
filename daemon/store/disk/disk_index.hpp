// SPDX-License-Identifier: MIT
// The disk tier's in-memory index: entries (files, and small entries in the
// LMDB store) in one LRU order with the space each is charged and the totals,
// so eviction knows what to remove without walking the disk, and a miss can
// be answered without looking.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/store/tier.hpp"
#include "daemon/store/xxh3.hpp"

#include <absl/container/flat_hash_map.h>
#include <absl/container/flat_hash_set.h>

namespace pt2cache::daemon::store {

// Thread-safe. Until `merge_scan` runs the index only knows the files touched
// since startup; the startup scan then adds the rest behind them.
class DiskIndex {
public:
    struct Victim {
        std::string ns;
        Hash128 id;
        std::uint64_t size = 0;
        bool small = false; // in the small-entry store, not a file
    };
    struct ScannedFile {
        std::string ns;
        Hash128 id;
        std::uint64_t size = 0;
        UnixMs mtime_ms = 0; // last access
        bool small = false;
    };

    // Records an entry as the most recently used, with the space it is
    // charged and the store that holds it.
    void record(std::string_view ns, const Hash128& id, std::uint64_t size, bool small = false);

    // A read of an entry from the store `small` names: the entry becomes the
    // most recently used, its charge and store as a write recorded them. A
    // read racing a write that moved the entry to the other store, or a
    // removal, changes nothing (once the startup scan is complete; before,
    // an entry it has not indexed yet is recorded as `record` does).
    void touch(std::string_view ns, const Hash128& id, std::uint64_t size, bool small);

    // Forgets a removed entry.
    void erase(const Hash128& id);

    // Changes the store and charge of a known entry, keeping its LRU place
    // (migration). Nothing when unknown.
    void relocate(const Hash128& id, std::uint64_t size, bool small);

    // Forgets every small entry of `ns` (CLEAR), including those the
    // startup scan read before it and has not merged yet.
    void erase_small_of(std::string_view ns);
    // Forgets every small entry (the store was replaced by an empty one), as
    // erase_small_of does for one namespace. A nonzero `salvage` begins the
    // salvage of the replaced store into the store of that generation
    // (ending any salvage before): from now until end_salvage(), the ids
    // erased or evicted and the namespaces cleared are remembered, so that
    // salvage_wanted() refuses them.
    void erase_all_small(std::uint64_t salvage = 0);

    // Whether the salvage into the store of `generation` may put back this
    // entry: that salvage still runs, and since it began the id was not
    // recorded, erased or evicted and its namespace not cleared.
    bool salvage_wanted(std::uint64_t generation, std::string_view ns, const Hash128& id) const;
    // Records an entry that salvage put back, if salvage_wanted() still
    // agrees: small, behind everything known (least recently used).
    void record_salvaged(std::uint64_t generation, std::string_view ns, const Hash128& id,
                         std::uint64_t size);
    // Ends the salvage into the store of `generation`, unless another began.
    void end_salvage(std::uint64_t generation);

    // Removes and returns the least recently used file, if any.
    std::optional<Victim> pop_least_recent();
    // Puts back a victim that could not be removed, as the least recently
    // used (unless it was recorded again since): it is still stored.
    void put_back(const Victim& victim);

    // Adds the startup scan's entries behind everything already known (older
    // mtime = less recently used), skipping entries recorded, erased or
    // evicted since startup, and small entries of a namespace CLEARed since:
    // the index knows better about those. An id found in both stores
    // (a migration interrupted after its commit leaves an identical file
    // behind) is kept once, preferably as small.
    void merge_scan(std::vector<ScannedFile> scanned);

    std::uint64_t total_bytes() const { return m_total.load(std::memory_order_relaxed); }
    // The part of total_bytes() charged to small entries.
    std::uint64_t small_bytes() const { return m_small_total.load(std::memory_order_relaxed); }
    std::uint64_t file_bytes() const { return total_bytes() - small_bytes(); }
    std::size_t count() const;
    // Whether a file of `id` is known (recorded, or found by the scan).
    bool contains(const Hash128& id) const;
    // Where the entry of `id` is: true in the small-entry store, false a
    // file, nullopt unknown.
    std::optional<bool> where(const Hash128& id) const;
    // count() plus how many of `others` the index does not hold, both under
    // one lock (an entry recorded meanwhile is counted once).
    std::size_t count_with(std::span<const Hash128> others) const;

private:
    static constexpr std::uint32_t k_none = UINT32_MAX;
    // An entry, in a slab (m_nodes) and in the LRU order, a doubly linked
    // list through slab positions: one allocation for all entries, not two
    // per entry (a million-entry start spent a third of its time there).
    // The slab keeps its size; removed entries' positions are reused.
    struct Node {
        Hash128 id;
        std::uint64_t size = 0;
        std::uint32_t ns_index = 0;
        std::uint32_t newer = k_none; // towards m_newest; a free node: next free
        std::uint32_t older = k_none; // towards m_oldest
        bool small = false;
    };

    std::uint32_t intern_locked(std::string_view ns);
    void add_total(const Node& node);
    void sub_total(const Node& node);
    // Stores `node` in a free slab position (not linked yet).
    std::uint32_t allocate_locked(const Node& node);
    // Unlinks the node at `at`, forgets its id and frees its position.
    void remove_locked(std::uint32_t at);
    // Forgets the small entries of the namespace `ns_index`, or all of them.
    void erase_small_locked(std::optional<std::uint32_t> ns_index);
    enum class End { newest, oldest };
    // Links the (unlinked) node at `at` as the list's newest or oldest.
    void link_end_locked(std::uint32_t at, End end);
    void unlink_locked(std::uint32_t at);

    mutable std::mutex m_mutex;
    std::vector<Node> m_nodes;
    std::uint32_t m_free = k_none; // free slab positions, chained through `newer`
    std::uint32_t m_newest = k_none;
    std::uint32_t m_oldest = k_none;
    absl::flat_hash_map<Hash128, std::uint32_t, Hash128Low> m_map; // id -> slab position
    std::vector<std::string> m_ns_names;
    std::map<std::string, std::uint32_t, std::less<>> m_ns_indexes;
    bool m_scanning = true;
    absl::flat_hash_set<Hash128, Hash128Low> m_erased_while_scanning;
    // Namespaces whose small entries a CLEAR removed while scanning; all of
    // them, when the store was replaced.
    std::set<std::string, std::less<>> m_small_cleared_while_scanning;
    bool m_all_small_cleared_while_scanning = false;
    // Between erase_all_small(generation) and end_salvage(generation): the
    // salvage's generation; 0 when none runs.
    std::uint64_t m_salvaging = 0;
    bool salvage_wanted_locked(std::uint64_t generation, std::string_view ns,
                               const Hash128& id) const;
    absl::flat_hash_set<Hash128, Hash128Low> m_erased_while_salvaging;
    std::set<std::string, std::less<>> m_cleared_while_salvaging;
    std::atomic<std::uint64_t> m_total{0};
    std::atomic<std::uint64_t> m_small_total{0};
};

} // namespace pt2cache::daemon::store
