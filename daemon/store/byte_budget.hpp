// SPDX-License-Identifier: MIT
// A limit on bytes held at once, shared by threads without a lock: the
// in-flight budget of requests being received (daemon/inflight_budget.hpp)
// and the read budget of large values being read and sent (read_budget.hpp).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace pt2cache::daemon::store {

class ByteBudget {
public:
    enum class WhenEmpty {
        refuse_over_limit, // nothing larger than the limit is ever taken
        take_anything,     // anything is taken while nothing is held
    };

    explicit ByteBudget(std::uint64_t limit, WhenEmpty when_empty = WhenEmpty::refuse_over_limit)
        : m_limit(limit)
        , m_when_empty(when_empty) {}

    void set_limit(std::uint64_t limit) { m_limit.store(limit, std::memory_order_relaxed); }
    std::uint64_t limit() const { return m_limit.load(std::memory_order_relaxed); }
    std::uint64_t in_use() const { return m_in_use.load(std::memory_order_relaxed); }

    // Takes `bytes` if they fit under the limit now, leaving `keep_free`
    // bytes of it untaken (see WhenEmpty).
    bool try_take(std::uint64_t bytes, std::uint64_t keep_free = 0) {
        std::uint64_t used = m_in_use.load(std::memory_order_relaxed);
        for (;;) {
            const std::uint64_t limit = m_limit.load(std::memory_order_relaxed);
            const std::uint64_t room = limit - std::min(limit, keep_free);
            const bool fits = bytes <= room && used <= room - bytes;
            if (!fits && (used != 0 || m_when_empty == WhenEmpty::refuse_over_limit)) {
                return false;
            }
            if (m_in_use.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed)) {
                return true;
            }
        }
    }
    // Takes `bytes` whatever is held: for bytes already allocated.
    void take(std::uint64_t bytes) { m_in_use.fetch_add(bytes, std::memory_order_relaxed); }
    void give_back(std::uint64_t bytes) { m_in_use.fetch_sub(bytes, std::memory_order_relaxed); }

private:
    std::atomic<std::uint64_t> m_limit;
    std::atomic<std::uint64_t> m_in_use{0};
    const WhenEmpty m_when_empty;
};

} // namespace pt2cache::daemon::store
