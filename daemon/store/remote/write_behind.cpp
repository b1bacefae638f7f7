// SPDX-License-Identifier: MIT
#include "daemon/store/remote/write_behind.hpp"

#include <algorithm>
#include <cassert>

namespace pt2cache::daemon::store {

WriteBehindQueue::WriteBehindQueue(WriteBehindOptions options)
    : m_options(options) {}

WriteBehindQueue::Lane& WriteBehindQueue::lane(const WriteItem& item) {
    return item.value.size() <= m_options.small_limit ? m_small : m_large;
}

void WriteBehindQueue::enqueue(WriteItem item, bool front) {
    m_bytes += item.bytes();
    Lane& to = lane(item);
    const auto at = to.insert(front ? to.begin() : to.end(), std::move(item));
    // The index views the key held by the list node, which stays put. The
    // callers removed any queued write of the key first.
    [[maybe_unused]] const bool fresh = m_queued.try_emplace(std::string_view(at->key), at).second;
    assert(fresh);
}

WriteItem WriteBehindQueue::dequeue(Lane::iterator at) {
    m_queued.erase(std::string_view(at->key)); // before the key moves out
    m_bytes -= at->bytes();
    Lane& from = lane(*at);
    WriteItem item = std::move(*at);
    from.erase(at);
    return item;
}

bool WriteBehindQueue::drop_oldest() {
    Lane* oldest = nullptr;
    if (!m_small.empty()) {
        oldest = &m_small;
    }
    if (!m_large.empty() &&
        (oldest == nullptr || m_large.front().queued_at < m_small.front().queued_at)) {
        oldest = &m_large;
    }
    if (oldest == nullptr) {
        return false;
    }
    WriteItem dropped = dequeue(oldest->begin());
    if (dropped.replaces_delete) {
        enqueue_delete(std::move(dropped.key), dropped.queued_at);
    }
    return true;
}

bool WriteBehindQueue::carries_delete_locked(std::string_view key) const {
    if (const auto found = m_queued.find(key); found != m_queued.end()) {
        if (found->second->erase || found->second->replaces_delete) {
            return true;
        }
    }
    return std::find(m_deletes_in_flight.begin(), m_deletes_in_flight.end(), key) !=
           m_deletes_in_flight.end();
}

void WriteBehindQueue::enqueue_delete(std::string key, Clock::time_point queued_at) {
    WriteItem item;
    item.key = std::move(key);
    item.erase = true;
    item.queued_at = queued_at;
    enqueue(std::move(item), true);
}

std::size_t WriteBehindQueue::remove_queued(std::string_view key) {
    const auto found = m_queued.find(key);
    if (found == m_queued.end()) {
        return 0;
    }
    dequeue(found->second);
    return 1;
}

bool WriteBehindQueue::in_flight(std::string_view key) const {
    return std::find(m_in_flight.begin(), m_in_flight.end(), key) != m_in_flight.end();
}

WriteBehindQueue::Lane::iterator WriteBehindQueue::first_ready(Lane& from) {
    return std::find_if(from.begin(), from.end(),
                        [&](const WriteItem& item) { return !in_flight(item.key); });
}

WriteBehindQueue::PushResult WriteBehindQueue::push(WriteItem item) {
    if (item.queued_at == Clock::time_point{}) {
        item.queued_at = Clock::now();
    }
    PushResult result;
    {
        std::lock_guard lock(m_mutex);
        if (!item.erase && carries_delete_locked(item.key)) {
            item.replaces_delete = true;
        }
        if (item.bytes() > m_options.capacity_bytes) {
            result.accepted = false;
            result.dropped = 1;
            // The older value must never be written after this one, and a
            // delete it would have taken over stays.
            const auto found = m_queued.find(item.key);
            if (found != m_queued.end() && !found->second->erase) {
                WriteItem older = dequeue(found->second);
                result.superseded = 1;
                if (older.replaces_delete) {
                    enqueue_delete(std::move(older.key), older.queued_at);
                }
            }
            return result;
        }
        // The older value must never be written after this one.
        result.superseded = remove_queued(item.key);
        while (m_bytes + item.bytes() > m_options.capacity_bytes && drop_oldest()) {
            ++result.dropped;
        }
        enqueue(std::move(item), false);
    }
    m_changed.notify_one();
    return result;
}

bool WriteBehindQueue::requeue(WriteItem item, bool at_back) {
    bool stored = false;
    {
        std::lock_guard lock(m_mutex);
        const bool erased = std::erase(m_erased_in_flight, item.key) > 0;
        std::erase(m_in_flight, item.key);
        std::erase(m_deletes_in_flight, item.key);
        const bool newer_queued = m_queued.contains(item.key);
        if (erased || newer_queued) {
            stored = true; // superseded: nothing of it is to be written
        } else if (m_bytes + item.bytes() <= m_options.capacity_bytes) {
            enqueue(std::move(item), !at_back);
            stored = true;
        } else if (item.erase || item.replaces_delete) {
            // No room for the write: the delete it is or carries (its key's
            // bytes) goes on all the same.
            enqueue_delete(std::move(item.key), item.queued_at);
            stored = true;
        }
    }
    m_changed.notify_all();
    return stored;
}

std::optional<WriteItem> WriteBehindQueue::pop(Clock::time_point wake_at) {
    std::unique_lock lock(m_mutex);
    const auto generation = m_generation;
    auto small = m_small.end();
    auto large = m_large.end();
    m_changed.wait_until(lock, wake_at, [&] {
        small = first_ready(m_small);
        large = first_ready(m_large);
        return small != m_small.end() || large != m_large.end() || m_closed ||
               m_generation != generation;
    });
    if (small == m_small.end() && large == m_large.end()) {
        return std::nullopt;
    }
    auto at = small;
    if (small == m_small.end() ||
        (large != m_large.end() && Clock::now() - large->queued_at >= m_options.large_aging)) {
        at = large;
    }
    WriteItem item = dequeue(at);
    m_in_flight.push_back(item.key);
    if (item.erase || item.replaces_delete) {
        m_deletes_in_flight.push_back(item.key);
    }
    return item;
}

void WriteBehindQueue::finished(std::string_view key) {
    {
        std::lock_guard lock(m_mutex);
        std::erase(m_in_flight, key);
        std::erase(m_erased_in_flight, key);
        std::erase(m_deletes_in_flight, key);
    }
    m_changed.notify_all();
}

bool WriteBehindQueue::abandon(const WriteItem& item) {
    bool queued = false;
    {
        std::lock_guard lock(m_mutex);
        const bool erased = std::erase(m_erased_in_flight, item.key) > 0;
        std::erase(m_in_flight, item.key);
        std::erase(m_deletes_in_flight, item.key);
        // A newer entry pushed meanwhile carries the delete (push saw it in
        // flight); an erase since was sent or queued by its own DEL.
        if ((item.erase || item.replaces_delete) && !erased && !m_queued.contains(item.key)) {
            enqueue_delete(item.key, item.queued_at);
            queued = true;
        }
    }
    m_changed.notify_all();
    return queued;
}

bool WriteBehindQueue::wait_settled(std::string_view key, Clock::time_point deadline) {
    std::unique_lock lock(m_mutex);
    return m_changed.wait_until(lock, deadline, [&] { return !in_flight(key); });
}

void WriteBehindQueue::wait(Clock::time_point wake_at) {
    std::unique_lock lock(m_mutex);
    const auto generation = m_generation;
    m_changed.wait_until(lock, wake_at, [&] { return m_closed || m_generation != generation; });
}

void WriteBehindQueue::notify() {
    {
        std::lock_guard lock(m_mutex);
        ++m_generation;
    }
    m_changed.notify_all();
}

void WriteBehindQueue::close() {
    {
        std::lock_guard lock(m_mutex);
        m_closed = true;
    }
    m_changed.notify_all();
}

bool WriteBehindQueue::wait_idle(Clock::time_point deadline) {
    std::unique_lock lock(m_mutex);
    return m_changed.wait_until(
        lock, deadline, [&] { return m_small.empty() && m_large.empty() && m_in_flight.empty(); });
}

std::vector<WriteItem> WriteBehindQueue::drain() {
    std::vector<WriteItem> out;
    {
        std::lock_guard lock(m_mutex);
        m_queued.clear(); // before the keys it views move out
        for (auto* from : {&m_small, &m_large}) {
            std::move(from->begin(), from->end(), std::back_inserter(out));
            from->clear();
        }
        m_bytes = 0;
    }
    m_changed.notify_all();
    return out;
}

std::size_t WriteBehindQueue::erase(std::string_view key) {
    std::lock_guard lock(m_mutex);
    // Once: a mark left over by a second DEL would drop a later delete of
    // the key that failed in flight (a review).
    if (in_flight(key) && std::find(m_erased_in_flight.begin(), m_erased_in_flight.end(), key) ==
                              m_erased_in_flight.end()) {
        m_erased_in_flight.emplace_back(key);
    }
    return remove_queued(key);
}

bool WriteBehindQueue::erasing(std::string_view key) const {
    std::lock_guard lock(m_mutex);
    return carries_delete_locked(key);
}

std::uint64_t WriteBehindQueue::bytes() const {
    std::lock_guard lock(m_mutex);
    return m_bytes;
}

std::size_t WriteBehindQueue::size() const {
    std::lock_guard lock(m_mutex);
    return m_small.size() + m_large.size();
}

} // namespace pt2cache::daemon::store
