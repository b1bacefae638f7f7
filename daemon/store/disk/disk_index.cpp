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

std::uint32_t DiskIndex::allocate_locked(const Node& node) {
    std::uint32_t at = m_free;
    if (at != k_none) {
        m_free = m_nodes[at].newer;
        m_nodes[at] = node;
    } else {
        at = static_cast<std::uint32_t>(m_nodes.size());
        m_nodes.push_back(node);
    }
    return at;
}

void DiskIndex::link_end_locked(std::uint32_t at, End end) {
    // The mirror images in one: `outward` points past the chosen end,
    // `inward` back into the list.
    const bool newest = end == End::newest;
    const auto outward = newest ? &Node::newer : &Node::older;
    const auto inward = newest ? &Node::older : &Node::newer;
    std::uint32_t& this_end = newest ? m_newest : m_oldest;
    std::uint32_t& other_end = newest ? m_oldest : m_newest;
    Node& node = m_nodes[at];
    node.*outward = k_none;
    node.*inward = this_end;
    (this_end != k_none ? m_nodes[this_end].*outward : other_end) = at;
    this_end = at;
}

void DiskIndex::unlink_locked(std::uint32_t at) {
    const Node& node = m_nodes[at];
    // The node's newer neighbour (or m_newest, when it is the newest) now
    // points past it to its older one, and the other way round.
    (node.newer != k_none ? m_nodes[node.newer].older : m_newest) = node.older;
    (node.older != k_none ? m_nodes[node.older].newer : m_oldest) = node.newer;
}

void DiskIndex::remove_locked(std::uint32_t at) {
    unlink_locked(at);
    Node& node = m_nodes[at];
    sub_total(node);
    m_map.erase(node.id);
    node.older = k_none;
    node.newer = m_free;
    m_free = at;
}

void DiskIndex::record(std::string_view ns, const Hash128& id, std::uint64_t size, bool small) {
    std::lock_guard lock(m_mutex);
    if (const auto it = m_map.find(id); it != m_map.end()) {
        const std::uint32_t at = it->second;
        Node& node = m_nodes[at];
        sub_total(node);
        node.size = size;
        node.small = small;
        add_total(node);
        unlink_locked(at);
        link_end_locked(at, End::newest);
        return;
    }
    const std::uint32_t at =
        allocate_locked(Node{id, size, intern_locked(ns), k_none, k_none, small});
    link_end_locked(at, End::newest);
    add_total(m_nodes[at]);
    // Last: should it throw (no memory), the table never names a position
    // that holds no entry.
    m_map.emplace(id, at);
}

void DiskIndex::touch(std::string_view ns, const Hash128& id, std::uint64_t size, bool small) {
    {
        std::lock_guard lock(m_mutex);
        if (const auto it = m_map.find(id); it != m_map.end()) {
            const std::uint32_t at = it->second;
            if (m_nodes[at].small == small) {
                unlink_locked(at);
                link_end_locked(at, End::newest);
            }
            return;
        }
        if (!m_scanning) {
            return;
        }
    }
    record(ns, id, size, small);
}

void DiskIndex::erase(const Hash128& id) {
    std::lock_guard lock(m_mutex);
    if (m_scanning) {
        m_erased_while_scanning.insert(id);
    }
    if (m_salvaging != 0) {
        m_erased_while_salvaging.insert(id);
    }
    const auto it = m_map.find(id);
    if (it != m_map.end()) {
        remove_locked(it->second);
    }
}

void DiskIndex::relocate(const Hash128& id, std::uint64_t size, bool small) {
    std::lock_guard lock(m_mutex);
    const auto it = m_map.find(id);
    if (it == m_map.end()) {
        return;
    }
    Node& node = m_nodes[it->second];
    sub_total(node);
    node.size = size;
    node.small = small;
    add_total(node);
}

void DiskIndex::erase_small_of(std::string_view ns) {
    std::lock_guard lock(m_mutex);
    if (m_scanning) {
        // The scan may have read small entries of `ns` before the CLEAR
        // removed them: the merge must not add them back.
        m_small_cleared_while_scanning.emplace(ns);
    }
    if (m_salvaging != 0) {
        m_cleared_while_salvaging.emplace(ns);
    }
    const auto index = m_ns_indexes.find(ns);
    if (index == m_ns_indexes.end()) {
        return;
    }
    erase_small_locked(index->second);
}

void DiskIndex::erase_all_small(std::uint64_t salvage) {
    std::lock_guard lock(m_mutex);
    if (m_scanning) {
        m_all_small_cleared_while_scanning = true;
    }
    erase_small_locked(std::nullopt);
    m_salvaging = salvage;
    m_erased_while_salvaging = {};
    m_cleared_while_salvaging = {};
}

bool DiskIndex::salvage_wanted_locked(std::uint64_t generation, std::string_view ns,
                                      const Hash128& id) const {
    return m_salvaging != 0 && m_salvaging == generation && !m_map.contains(id) &&
           !m_erased_while_salvaging.contains(id) && !m_cleared_while_salvaging.contains(ns);
}

bool DiskIndex::salvage_wanted(std::uint64_t generation, std::string_view ns,
                               const Hash128& id) const {
    std::lock_guard lock(m_mutex);
    return salvage_wanted_locked(generation, ns, id);
}

void DiskIndex::record_salvaged(std::uint64_t generation, std::string_view ns, const Hash128& id,
                                std::uint64_t size) {
    std::lock_guard lock(m_mutex);
    if (!salvage_wanted_locked(generation, ns, id)) {
        return;
    }
    const std::uint32_t at =
        allocate_locked(Node{id, size, intern_locked(ns), k_none, k_none, true});
    link_end_locked(at, End::oldest);
    add_total(m_nodes[at]);
    m_map.emplace(id, at); // last, as in record()
}

void DiskIndex::end_salvage(std::uint64_t generation) {
    std::lock_guard lock(m_mutex);
    if (m_salvaging == generation) {
        m_salvaging = 0;
        m_erased_while_salvaging = {};
        m_cleared_while_salvaging = {};
    }
}

void DiskIndex::erase_small_locked(std::optional<std::uint32_t> ns_index) {
    for (std::uint32_t at = m_newest; at != k_none;) {
        const Node& node = m_nodes[at];
        const std::uint32_t older = node.older;
        if (node.small && (!ns_index || node.ns_index == *ns_index)) {
            if (m_scanning) {
                m_erased_while_scanning.insert(node.id);
            }
            remove_locked(at);
        }
        at = older;
    }
}

std::optional<DiskIndex::Victim> DiskIndex::pop_least_recent() {
    std::lock_guard lock(m_mutex);
    if (m_oldest == k_none) {
        return std::nullopt;
    }
    const Node node = m_nodes[m_oldest];
    if (m_scanning) {
        m_erased_while_scanning.insert(node.id); // evicted (a full LMDB map)
    }
    if (m_salvaging != 0) {
        m_erased_while_salvaging.insert(node.id);
    }
    remove_locked(m_oldest);
    return Victim{m_ns_names[node.ns_index], node.id, node.size, node.small};
}

void DiskIndex::put_back(const Victim& victim) {
    std::lock_guard lock(m_mutex);
    if (m_map.contains(victim.id)) {
        return;
    }
    const std::uint32_t at = allocate_locked(
        Node{victim.id, victim.size, intern_locked(victim.ns), k_none, k_none, victim.small});
    link_end_locked(at, End::oldest);
    add_total(m_nodes[at]);
    m_map.emplace(victim.id, at); // last, as in record()
}

void DiskIndex::merge_scan(std::vector<ScannedFile> scanned) {
    // Most recent first, so appending keeps the oldest at the back; of two
    // records of one id the small one first, so that it is the one kept.
    // Sorted as compact keys, never looking at `scanned`: a million entries
    // must index fast, and a filled cache holds many equal times.
    struct Key {
        UnixMs time;
        std::uint32_t position;
        bool small;
    };
    std::vector<Key> order;
    order.reserve(scanned.size());
    for (std::size_t i = 0; i < scanned.size(); ++i) {
        order.push_back(Key{scanned[i].mtime_ms, static_cast<std::uint32_t>(i), scanned[i].small});
    }
    std::sort(order.begin(), order.end(), [](const Key& a, const Key& b) {
        if (a.time != b.time) {
            return a.time > b.time;
        }
        return a.small > b.small;
    });
    {
        std::lock_guard lock(m_mutex);
        m_map.reserve(m_map.size() + scanned.size());
        m_nodes.reserve(m_nodes.size() + scanned.size());
    }
    std::string_view last_ns;
    std::uint32_t last_ns_index = 0;
    for (std::size_t start = 0; start < order.size(); start += k_merge_batch) {
        const std::size_t end = std::min(order.size(), start + k_merge_batch);
        std::lock_guard lock(m_mutex);
        for (std::size_t i = start; i < end; ++i) {
            // `order` visits `scanned`, and each id its place in the map, at
            // random: fetch the record 2 × k_prefetch_ahead ahead (a miss per
            // record was a sixth of a 1 M-entry start), and the map's group
            // of the one k_prefetch_ahead ahead (its record is in cache).
            if (i + 2 * k_prefetch_ahead < order.size()) {
                const auto* ahead = reinterpret_cast<const char*>(
                    &scanned[order[i + 2 * k_prefetch_ahead].position]);
                __builtin_prefetch(ahead);
                __builtin_prefetch(ahead + sizeof(ScannedFile) - 1);
            }
            if (i + k_prefetch_ahead < order.size()) {
                m_map.prefetch(scanned[order[i + k_prefetch_ahead].position].id);
            }
            const ScannedFile& file = scanned[order[i].position];
            if (!m_erased_while_scanning.empty() && m_erased_while_scanning.contains(file.id)) {
                continue;
            }
            // A small entry written after the CLEAR was recorded when
            // written, so it is in the map already: skipping loses nothing.
            if (file.small && (m_all_small_cleared_while_scanning ||
                               (!m_small_cleared_while_scanning.empty() &&
                                m_small_cleared_while_scanning.contains(file.ns)))) {
                continue;
            }
            if (m_map.contains(file.id)) {
                continue;
            }
            if (last_ns.empty() || file.ns != last_ns) {
                last_ns_index = intern_locked(file.ns);
                last_ns = file.ns;
            }
            const std::uint32_t at = allocate_locked(
                Node{file.id, file.size, last_ns_index, k_none, k_none, file.small});
            // Behind everything known: the scan's records are older than any
            // entry touched since startup.
            link_end_locked(at, End::oldest);
            add_total(m_nodes[at]);
            m_map.emplace(file.id, at); // last, as in record()
        }
    }
    std::lock_guard lock(m_mutex);
    m_scanning = false;
    m_erased_while_scanning = {};
    m_small_cleared_while_scanning = {};
    m_all_small_cleared_while_scanning = false;
}

std::optional<bool> DiskIndex::where(const Hash128& id) const {
    std::lock_guard lock(m_mutex);
    const auto it = m_map.find(id);
    if (it == m_map.end()) {
        return std::nullopt;
    }
    return m_nodes[it->second].small;
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
