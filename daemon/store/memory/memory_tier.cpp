// SPDX-License-Identifier: MIT
#include "daemon/store/memory/memory_tier.hpp"

#include <algorithm>
#include <vector>

namespace pt2cache::daemon::store {

MemoryTier::MemoryTier(std::uint64_t capacity_bytes, Stats& stats, std::uint64_t max_entry_bytes)
    : m_capacity(capacity_bytes)
    , m_max_entry(max_entry_bytes == 0 ? capacity_bytes : std::min(max_entry_bytes, capacity_bytes))
    , m_stats(stats) {}

MemoryTier::~MemoryTier() = default;

std::uint64_t MemoryTier::charge_of(std::string_view ns, std::string_view key,
                                    std::uint64_t value_size) {
    return value_size + ns.size() + key.size() + k_entry_overhead;
}

std::string MemoryTier::make_id(std::string_view ns, std::string_view key) {
    std::string id;
    id.reserve(ns.size() + 1 + key.size());
    id.append(ns);
    id.push_back('\0');
    id.append(key);
    return id;
}

std::string_view MemoryTier::scratch_id(std::string_view ns, std::string_view key) {
    thread_local std::string id;
    id.assign(ns);
    id.push_back('\0');
    id.append(key);
    return id;
}

void MemoryTier::unlink_locked(Map::iterator it, List& out) {
    const List::iterator node = it->second;
    m_size -= node->charge;
    // Erase the map entry first: its key views the node's id.
    m_map.erase(it);
    out.splice(out.end(), m_lru, node);
}

void MemoryTier::count_evictions(const List& evicted) {
    for (const Node& node : evicted) {
        m_stats.tier(node.ns(), TierId::memory).evictions.fetch_add(1, std::memory_order_relaxed);
    }
}

void MemoryTier::make_room_locked(std::uint64_t charge, List& out) {
    std::size_t chances = 0;
    while (!m_lru.empty() && m_size + charge > m_capacity) {
        const List::iterator oldest = std::prev(m_lru.end());
        if (oldest->referenced.load(std::memory_order_relaxed) && chances < k_max_second_chances) {
            oldest->referenced.store(false, std::memory_order_relaxed);
            m_lru.splice(m_lru.begin(), m_lru, oldest);
            ++chances;
            continue;
        }
        unlink_locked(m_map.find(oldest->id), out);
    }
}

std::optional<Entry> MemoryTier::lookup(std::string_view ns, std::string_view key) {
    if (!enabled()) {
        return std::nullopt;
    }
    const std::string_view id = scratch_id(ns, key);
    {
        std::shared_lock lock(m_mutex);
        const auto it = m_map.find(id);
        if (it == m_map.end()) {
            return std::nullopt;
        }
        const Node& node = *it->second;
        // The clock only for an entry that can expire.
        if (node.entry.expires_ms == 0 || !node.entry.expired(now_ms())) {
            // A plain load first: a hot entry's line is then only read.
            if (!node.referenced.load(std::memory_order_relaxed)) {
                node.referenced.store(true, std::memory_order_relaxed);
            }
            return node.entry; // copies a pointer, not the bytes
        }
    }
    List dropped; // destroyed after the lock is released
    std::lock_guard lock(m_mutex);
    const auto it = m_map.find(id);
    if (it != m_map.end() && it->second->entry.expired(now_ms())) {
        unlink_locked(it, dropped);
    }
    return std::nullopt;
}

tl::expected<std::optional<Entry>, StoreError> MemoryTier::get(std::string_view ns,
                                                               std::string_view key) {
    return lookup(ns, key);
}

tl::expected<void, StoreError> MemoryTier::put(std::string_view ns, std::string_view key,
                                               const Entry& entry) {
    const QuickPut put{ns, key, entry};
    put_many(std::span(&put, 1));
    return {};
}

void MemoryTier::put_many(std::span<const QuickPut> puts) {
    put_many_if(puts, nullptr);
}

void MemoryTier::put_if(std::string_view ns, std::string_view key, const Entry& entry,
                        const std::function<bool()>& still_current) {
    const QuickPut put{ns, key, entry};
    put_many_if(std::span(&put, 1), &still_current);
}

void MemoryTier::put_many_if(std::span<const QuickPut> puts,
                             const std::function<bool()>* still_current) {
    if (!enabled()) {
        return;
    }
    // Build the list nodes before locking, so the critical section only
    // relinks them (and fills slots of the flat map). Looking keys up first,
    // to build no node for a stored key, was tried: pipelined SETs of new
    // keys (what a compile puts) cost more, and those of stored keys no less
    // beyond the spread of tests/bench/request-instructions.
    List fresh;
    for (const QuickPut& put : puts) {
        fresh.emplace_back(make_id(put.ns, put.key), put.ns.size(), put.entry,
                           charge_of(put.ns, put.key, put.entry.value.size()));
    }
    List replaced; // destroyed after the lock is released
    List evicted;
    {
        std::lock_guard lock(m_mutex);
        if (still_current != nullptr && !(*still_current)()) {
            replaced.splice(replaced.end(), fresh); // stored nothing
        }
        while (!fresh.empty()) {
            const List::iterator node = fresh.begin();
            const auto it = m_map.find(node->id);
            if (node->charge > m_max_entry) {
                // Not stored; the older value (if any) is gone, so it is never
                // served after a newer put.
                if (it != m_map.end()) {
                    unlink_locked(it, replaced);
                }
                replaced.splice(replaced.end(), fresh, node);
                continue;
            }
            if (it != m_map.end()) {
                // A stored key takes the new entry in place: its map slot,
                // which views its id, stays (no erase and re-insert), and
                // `node` carries the old entry out, freed after the lock.
                const List::iterator stored = it->second;
                m_size -= stored->charge;
                std::swap(stored->entry, node->entry);
                std::swap(stored->charge, node->charge);
                stored->referenced.store(false, std::memory_order_relaxed);
                replaced.splice(replaced.end(), fresh, node);
                // Out of the list while room is made: not evicted itself.
                List moving;
                moving.splice(moving.end(), m_lru, stored);
                make_room_locked(stored->charge, evicted);
                m_lru.splice(m_lru.begin(), moving, stored);
                m_size += stored->charge;
                continue;
            }
            make_room_locked(node->charge, evicted);
            // The map first: should its growth throw (no memory), the list
            // holds no node the map does not name.
            m_map.emplace(node->id, node);
            m_lru.splice(m_lru.begin(), fresh, node); // `node` now names the element in m_lru
            m_size += node->charge;
        }
    }
    count_evictions(evicted);
}

tl::expected<bool, StoreError> MemoryTier::remove(std::string_view ns, std::string_view key) {
    if (!enabled()) {
        return false;
    }
    const std::string_view id = scratch_id(ns, key);
    List removed;
    std::lock_guard lock(m_mutex);
    const auto it = m_map.find(id);
    if (it == m_map.end()) {
        return false;
    }
    unlink_locked(it, removed);
    return true;
}

tl::expected<std::uint64_t, StoreError> MemoryTier::clear(std::string_view ns) {
    List removed;
    std::uint64_t count = 0;
    std::lock_guard lock(m_mutex);
    for (auto node = m_lru.begin(); node != m_lru.end();) {
        const auto next = std::next(node);
        if (node->ns() == ns) {
            unlink_locked(m_map.find(node->id), removed);
            ++count;
        }
        node = next;
    }
    return count;
}

std::optional<Entry> MemoryTier::peek(std::string_view ns, std::string_view key) const {
    if (!enabled()) {
        return std::nullopt;
    }
    const std::string_view id = scratch_id(ns, key);
    std::shared_lock lock(m_mutex);
    const auto it = m_map.find(id);
    if (it == m_map.end() || it->second->entry.expired(now_ms())) {
        return std::nullopt;
    }
    return it->second->entry; // copies a pointer, not the bytes
}

bool MemoryTier::contains(std::string_view ns, std::string_view key) const {
    if (!enabled()) {
        return false;
    }
    const std::string_view id = scratch_id(ns, key);
    std::shared_lock lock(m_mutex);
    const auto it = m_map.find(id);
    return it != m_map.end() &&
           (it->second->entry.expires_ms == 0 || !it->second->entry.expired(now_ms()));
}

ListPage MemoryTier::list(std::string_view ns, std::string_view cursor, std::size_t limit) const {
    limit = std::max<std::size_t>(limit, 1);
    const UnixMs now = now_ms();
    std::vector<EntryInfo> all;
    {
        // Listing is an administrative request; copying keys under the lock
        // is acceptable here.
        std::shared_lock lock(m_mutex);
        for (const Node& node : m_lru) {
            if (node.ns() == ns && !node.entry.expired(now) && node.key() > cursor) {
                all.push_back(
                    {std::string(node.key()), node.entry.value.size(), node.entry.created_ms});
            }
        }
    }
    std::sort(all.begin(), all.end(),
              [](const EntryInfo& a, const EntryInfo& b) { return a.key < b.key; });
    ListPage page;
    if (all.size() > limit) {
        all.resize(limit);
        page.next_cursor = all.back().key;
    }
    page.entries = std::move(all);
    return page;
}

std::uint64_t MemoryTier::size_bytes() const {
    std::shared_lock lock(m_mutex);
    return m_size;
}

std::size_t MemoryTier::count() const {
    std::shared_lock lock(m_mutex);
    return m_map.size();
}

} // namespace pt2cache::daemon::store
