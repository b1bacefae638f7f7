// SPDX-License-Identifier: MIT
#include "daemon/store/remote/write_behind.hpp"

#include <algorithm>

namespace pt2cache::daemon::store {

WriteBehindQueue::WriteBehindQueue(WriteBehindOptions options)
    : m_options(options) {}

std::deque<WriteItem>& WriteBehindQueue::lane(const WriteItem& item) {
    return item.value.size() <= m_options.small_limit ? m_small : m_large;
}

bool WriteBehindQueue::drop_oldest() {
    std::deque<WriteItem>* oldest = nullptr;
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
    m_bytes -= oldest->front().bytes();
    oldest->pop_front();
    return true;
}

WriteBehindQueue::PushResult WriteBehindQueue::push(WriteItem item) {
    if (item.queued_at == Clock::time_point{}) {
        item.queued_at = Clock::now();
    }
    PushResult result;
    {
        std::lock_guard lock(m_mutex);
        if (item.bytes() > m_options.capacity_bytes) {
            return {false, 1};
        }
        while (m_bytes + item.bytes() > m_options.capacity_bytes && drop_oldest()) {
            ++result.dropped;
        }
        m_bytes += item.bytes();
        lane(item).push_back(std::move(item));
    }
    m_changed.notify_one();
    return result;
}

bool WriteBehindQueue::requeue(WriteItem item) {
    bool stored = false;
    {
        std::lock_guard lock(m_mutex);
        --m_in_flight;
        if (m_bytes + item.bytes() <= m_options.capacity_bytes) {
            m_bytes += item.bytes();
            lane(item).push_front(std::move(item));
            stored = true;
        }
    }
    m_changed.notify_all();
    return stored;
}

std::optional<WriteItem> WriteBehindQueue::pop(Clock::time_point wake_at) {
    std::unique_lock lock(m_mutex);
    const auto generation = m_generation;
    m_changed.wait_until(lock, wake_at, [&] {
        return !m_small.empty() || !m_large.empty() || m_closed || m_generation != generation;
    });
    if (m_small.empty() && m_large.empty()) {
        return std::nullopt;
    }
    std::deque<WriteItem>* from = &m_small;
    if (m_small.empty() ||
        (!m_large.empty() && Clock::now() - m_large.front().queued_at >= m_options.large_aging)) {
        from = &m_large;
    }
    WriteItem item = std::move(from->front());
    from->pop_front();
    m_bytes -= item.bytes();
    ++m_in_flight;
    return item;
}

void WriteBehindQueue::finished() {
    {
        std::lock_guard lock(m_mutex);
        --m_in_flight;
    }
    m_changed.notify_all();
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
        lock, deadline, [&] { return m_small.empty() && m_large.empty() && m_in_flight == 0; });
}

std::vector<WriteItem> WriteBehindQueue::drain() {
    std::vector<WriteItem> out;
    {
        std::lock_guard lock(m_mutex);
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
    std::size_t erased = 0;
    std::lock_guard lock(m_mutex);
    for (auto* from : {&m_small, &m_large}) {
        for (auto it = from->begin(); it != from->end();) {
            if (it->key == key) {
                m_bytes -= it->bytes();
                it = from->erase(it);
                ++erased;
            } else {
                ++it;
            }
        }
    }
    return erased;
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
