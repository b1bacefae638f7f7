// SPDX-License-Identifier: MIT
// The memory tier: a byte-bounded cache of shared, immutable values, evicting
// in CLOCK order.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "daemon/store/stats.hpp"
#include "daemon/store/tier.hpp"

#include <absl/container/flat_hash_map.h>

namespace pt2cache::daemon::store {

// Thread-safe cache bounded by bytes, evicting in CLOCK (second-chance) order,
// an approximation of LRU. An entry is charged its value size plus its key and
// namespace plus `k_entry_overhead`. A hit hands out the stored buffer (no
// copy). One reader-writer lock guards the list; no value bytes are
// allocated, copied or freed while it is held.
//
// Entries enter at the front of a list and are evicted from its back. A hit
// takes the lock shared and only marks its entry referenced (a relaxed atomic
// flag, written when not yet set), so concurrent hits never serialise. An
// eviction that meets a referenced entry at the back clears the mark and moves
// the entry to the front instead (its second chance): an entry hit since it
// last reached the front outlives every entry that was not, except that one
// put gives at most `k_max_second_chances` (then evicts the back entry as it
// is), so that a put after a burst of hits never walks the whole list under
// the lock.
class MemoryTier final : public Tier {
public:
    static constexpr std::uint64_t k_entry_overhead = 64;
    static constexpr std::size_t k_max_second_chances = 64;

    // The share of the capacity above which an entry bypasses the tier, in the
    // daemon (docs/architecture.md): a value larger than 1/8 of the tier would
    // evict much of everything else for one entry.
    static constexpr std::uint64_t k_bypass_divisor = 8;

    // `capacity_bytes` 0 disables the tier: it stores nothing. Entries charged
    // more than `max_entry_bytes` (0: the capacity) are not stored. Evictions are
    // counted in `stats`, which must outlive the tier.
    MemoryTier(std::uint64_t capacity_bytes, Stats& stats, std::uint64_t max_entry_bytes = 0);
    ~MemoryTier() override;
    MemoryTier(const MemoryTier&) = delete;
    MemoryTier& operator=(const MemoryTier&) = delete;

    std::string_view name() const override { return "memory"; }

    // Never fails; an expired entry is dropped and missed.
    tl::expected<std::optional<Entry>, StoreError> get(std::string_view ns,
                                                       std::string_view key) override;

    // Never fails. An entry charged more than the capacity or the largest
    // entry is not stored (and an older value of the same key is dropped).
    tl::expected<void, StoreError> put(std::string_view ns, std::string_view key,
                                       const Entry& entry) override;

    // `put` of each in turn, under one lock (a pipeline's puts).
    void put_many(std::span<const QuickPut> puts);
    // `put` if `still_current()` holds, called under the tier's lock (the
    // store's backfills, see Store::WriteCounts); nothing if it does not.
    void put_if(std::string_view ns, std::string_view key, const Entry& entry,
                const std::function<bool()>& still_current);
    tl::expected<bool, StoreError> remove(std::string_view ns, std::string_view key) override;
    tl::expected<std::uint64_t, StoreError> clear(std::string_view ns) override;

    // `get` without the wrapper; marks the entry referenced.
    std::optional<Entry> lookup(std::string_view ns, std::string_view key);

    // `lookup` without marking the entry: no effect on the eviction order.
    std::optional<Entry> peek(std::string_view ns, std::string_view key) const;

    // True when a live entry exists; leaves its mark alone.
    bool contains(std::string_view ns, std::string_view key) const;

    // Live entries of `ns` in ascending key order, after `cursor` (the last key
    // of the previous page; empty for the first page). `mtime_ms` is the
    // creation time. `next_cursor` is empty on the last page.
    ListPage list(std::string_view ns, std::string_view cursor, std::size_t limit) const;

    std::uint64_t size_bytes() const;
    std::size_t count() const;
    std::uint64_t capacity() const { return m_capacity; }
    std::uint64_t max_entry() const { return m_max_entry; }
    bool enabled() const { return m_capacity > 0; }

    // What an entry costs against the capacity.
    static std::uint64_t charge_of(std::string_view ns, std::string_view key,
                                   std::uint64_t value_size);

private:
    void put_many_if(std::span<const QuickPut> puts, const std::function<bool()>* still_current);
    struct Node {
        Node(std::string id_, std::size_t ns_size_, Entry entry_, std::uint64_t charge_)
            : id(std::move(id_))
            , ns_size(ns_size_)
            , entry(std::move(entry_))
            , charge(charge_) {}

        std::string id; // ns '\0' key
        std::size_t ns_size = 0;
        Entry entry;
        std::uint64_t charge = 0;
        // Hit since it last reached the front (written under a shared lock).
        mutable std::atomic<bool> referenced{false};

        std::string_view ns() const { return std::string_view(id).substr(0, ns_size); }
        std::string_view key() const { return std::string_view(id).substr(ns_size + 1); }
    };
    using List = std::list<Node>;
    // Keys view `Node::id`, which lives as long as its map entry. Flat: a
    // hit reads the table's slot and then the node, not a bucket and a chain
    // of nodes (the lookup's share of the daemon's samples on pipelined GETs
    // fell from about 14 % to 10 %), and a put allocates no map node.
    using Map = absl::flat_hash_map<std::string_view, List::iterator>;

    static std::string make_id(std::string_view ns, std::string_view key);
    // make_id in a buffer of the calling thread's (valid until its next call).
    static std::string_view scratch_id(std::string_view ns, std::string_view key);
    // Evicts into `out` until `charge` more bytes fit (`charge` is at most
    // the capacity), giving referenced entries their second chance. Requires
    // `m_mutex`, exclusive.
    void make_room_locked(std::uint64_t charge, List& out);
    // Unlinks `it` into `out`. Requires `m_mutex`.
    void unlink_locked(Map::iterator it, List& out);
    void count_evictions(const List& evicted);

    const std::uint64_t m_capacity;
    const std::uint64_t m_max_entry;
    Stats& m_stats;

    mutable std::shared_mutex m_mutex;
    List m_lru; // newest or last given a second chance first
    Map m_map;
    std::uint64_t m_size = 0;
};

} // namespace pt2cache::daemon::store
