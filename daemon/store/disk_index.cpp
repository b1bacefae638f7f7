// SPDX-License-Identifier: MIT
#include "daemon/store/disk_index.hpp"

#include <algorithm>

namespace pt2cache::daemon::store {

namespace {

// Files merged per lock acquisition, so requests are not held up by a big scan.
constexpr std::size_t k_merge_batch = 4096;

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

void DiskIndex::record(std::string_view ns, const Hash128& id, std::uint64_t size) {
    std::lock_guard lock(m_mutex);
    if (const auto it = m_map.find(id); it != m_map.end()) {
        Node& node = *it->second;
        m_total.fetch_sub(node.size, std::memory_order_relaxed);
        m_total.fetch_add(size, std::memory_order_relaxed);
        node.size = size;
        m_lru.splice(m_lru.begin(), m_lru, it->second);
        return;
    }
    m_lru.push_front(Node{id, intern_locked(ns), size});
    m_map.emplace(id, m_lru.begin());
    m_total.fetch_add(size, std::memory_order_relaxed);
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
    m_total.fetch_sub(it->second->size, std::memory_order_relaxed);
    m_lru.erase(it->second);
    m_map.erase(it);
}

std::optional<DiskIndex::Victim> DiskIndex::pop_least_recent() {
    std::lock_guard lock(m_mutex);
    if (m_lru.empty()) {
        return std::nullopt;
    }
    const Node node = m_lru.back();
    m_map.erase(node.id);
    m_lru.pop_back();
    m_total.fetch_sub(node.size, std::memory_order_relaxed);
    return Victim{m_ns_names[node.ns_index], node.id, node.size};
}

void DiskIndex::merge_scan(std::vector<ScannedFile> scanned) {
    // Most recent first, so appending keeps the oldest at the back.
    std::sort(scanned.begin(), scanned.end(),
              [](const ScannedFile& a, const ScannedFile& b) { return a.mtime_ms > b.mtime_ms; });
    for (std::size_t start = 0; start < scanned.size(); start += k_merge_batch) {
        const std::size_t end = std::min(scanned.size(), start + k_merge_batch);
        std::lock_guard lock(m_mutex);
        for (std::size_t i = start; i < end; ++i) {
            const ScannedFile& file = scanned[i];
            if (m_map.contains(file.id) || m_erased_while_scanning.contains(file.id)) {
                continue;
            }
            m_lru.push_back(Node{file.id, intern_locked(file.ns), file.size});
            m_map.emplace(file.id, std::prev(m_lru.end()));
            m_total.fetch_add(file.size, std::memory_order_relaxed);
        }
    }
    std::lock_guard lock(m_mutex);
    m_scanning = false;
    m_erased_while_scanning = {};
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
