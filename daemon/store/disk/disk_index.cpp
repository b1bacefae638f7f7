// SPDX-License-Identifier: MIT
#include "daemon/store/disk/disk_index.hpp"

#include <algorithm>

namespace pt2cache::daemon::store {

namespace {

// Files merged per lock acquisition, so requests are not held up by a big scan.
constexpr std::size_t k_merge_batch = 4096;
// How many records merge_scan fetches ahead of the one it indexes.
constexpr std::size_t k_prefetch_ahead = 8;

} // namespace

std::uint32_t DiskIndex::intern_locked(std::string_view ns) {
    if (const auto it = m_ns_indexes.find(ns); it != m_ns_indexes.end()) {
        return it->second;
    }
    const auto index = static_cast<std::uint32_t>(m_ns_names.size());
    m_ns_names.emplace_back(ns);
    m_ns_indexes.emplace(std::string(ns), index);
    return index;
}

void DiskIndex::add_total(const Node& node) {
    m_total.fetch_add(node.size, std::memory_order_relaxed);
    if (node.small) {
        m_small_total.fetch_add(node.size, std::memory_order_relaxed);
    }
}

void DiskIndex::sub_total(const Node& node) {
    // The small part first: file_bytes() never sees it larger than the total.
    if (node.small) {
        m_small_total.fetch_sub(node.size, std::memory_order_relaxed);
    }
    m_total.fetch_sub(node.size, std::memory_order_relaxed);
}

void DiskIndex::record(std::string_view ns, const Hash128& id, std::uint64_t size, bool small) {
    std::lock_guard lock(m_mutex);
    if (const auto it = m_map.find(id); it != m_map.end()) {
        Node& node = *it->second;
        sub_total(node);
        node.size = size;
        node.small = small;
        add_total(node);
        m_lru.splice(m_lru.begin(), m_lru, it->second);
        return;
    }
    m_lru.push_front(Node{id, intern_locked(ns), size, small});
    m_map.emplace(id, m_lru.begin());
    add_total(m_lru.front());
}

void DiskIndex::erase(const Hash128& id) {
    std::lock_guard lock(m_mutex);
    if (m_scanning) {
        m_erased_while_scanning.insert(id);
    }
    const auto it = m_map.find(id);
    if (it == m_map.end()) {
        return;
    }
    sub_total(*it->second);
    m_lru.erase(it->second);
    m_map.erase(it);
}

void DiskIndex::relocate(const Hash128& id, std::uint64_t size, bool small) {
    std::lock_guard lock(m_mutex);
    const auto it = m_map.find(id);
    if (it == m_map.end()) {
        return;
    }
    sub_total(*it->second);
    it->second->size = size;
    it->second->small = small;
    add_total(*it->second);
}

void DiskIndex::erase_small_of(std::string_view ns) {
    std::lock_guard lock(m_mutex);
    const auto index = m_ns_indexes.find(ns);
    if (index == m_ns_indexes.end()) {
        return;
    }
    for (auto it = m_lru.begin(); it != m_lru.end();) {
        if (it->small && it->ns_index == index->second) {
            if (m_scanning) {
                m_erased_while_scanning.insert(it->id);
            }
            sub_total(*it);
            m_map.erase(it->id);
            it = m_lru.erase(it);
        } else {
            ++it;
        }
    }
}

std::optional<DiskIndex::Victim> DiskIndex::pop_least_recent() {
    std::lock_guard lock(m_mutex);
    if (m_lru.empty()) {
        return std::nullopt;
    }
    const Node node = m_lru.back();
    m_map.erase(node.id);
    m_lru.pop_back();
    sub_total(node);
    return Victim{m_ns_names[node.ns_index], node.id, node.size, node.small};
}

void DiskIndex::merge_scan(std::vector<ScannedFile> scanned) {
    // Most recent first, so appending keeps the oldest at the back; of two
    // records of one id the small one first, so that it is the one kept.
    // Sorted as (time, position) pairs: a million entries must index fast.
    std::vector<std::pair<UnixMs, std::uint32_t>> order;
    order.reserve(scanned.size());
    for (std::size_t i = 0; i < scanned.size(); ++i) {
        order.emplace_back(scanned[i].mtime_ms, static_cast<std::uint32_t>(i));
    }
    std::sort(order.begin(), order.end(), [&](const auto& a, const auto& b) {
        if (a.first != b.first) {
            return a.first > b.first;
        }
        return scanned[a.second].small > scanned[b.second].small;
    });
    {
        std::lock_guard lock(m_mutex);
        m_map.reserve(m_map.size() + scanned.size());
    }
    std::string_view last_ns;
    std::uint32_t last_ns_index = 0;
    for (std::size_t start = 0; start < order.size(); start += k_merge_batch) {
        const std::size_t end = std::min(order.size(), start + k_merge_batch);
        std::lock_guard lock(m_mutex);
        for (std::size_t i = start; i < end; ++i) {
            // `order` visits `scanned` at random: fetch a few records ahead
            // (a miss per record was a sixth of a 1 M-entry start).
            if (i + k_prefetch_ahead < order.size()) {
                const auto* ahead =
                    reinterpret_cast<const char*>(&scanned[order[i + k_prefetch_ahead].second]);
                __builtin_prefetch(ahead);
                __builtin_prefetch(ahead + sizeof(ScannedFile) - 1);
            }
            const ScannedFile& file = scanned[order[i].second];
            if (!m_erased_while_scanning.empty() && m_erased_while_scanning.contains(file.id)) {
                continue;
            }
            const auto [it, added] = m_map.try_emplace(file.id, m_lru.end());
            if (!added) {
                continue;
            }
            if (last_ns.empty() || file.ns != last_ns) {
                last_ns_index = intern_locked(file.ns);
                last_ns = file.ns;
            }
            m_lru.push_back(Node{file.id, last_ns_index, file.size, file.small});
            it->second = std::prev(m_lru.end());
            add_total(m_lru.back());
        }
    }
    std::lock_guard lock(m_mutex);
    m_scanning = false;
    m_erased_while_scanning = {};
}

std::optional<bool> DiskIndex::where(const Hash128& id) const {
    std::lock_guard lock(m_mutex);
    const auto it = m_map.find(id);
    if (it == m_map.end()) {
        return std::nullopt;
    }
    return it->second->small;
}

bool DiskIndex::contains(const Hash128& id) const {
    std::lock_guard lock(m_mutex);
    return m_map.contains(id);
}

std::size_t DiskIndex::count_with(std::span<const Hash128> others) const {
    std::lock_guard lock(m_mutex);
    return m_map.size() + static_cast<std::size_t>(std::count_if(
                              others.begin(), others.end(),
                              [this](const Hash128& id) { return !m_map.contains(id); }));
}

std::size_t DiskIndex::count() const {
    std::lock_guard lock(m_mutex);
    return m_map.size();
}

} // namespace pt2cache::daemon::store
