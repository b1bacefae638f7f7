// SPDX-License-Identifier: MIT
// The whole daemon's budget for request bytes being received: large native
// bodies and long RESP commands take from it as their bytes arrive, so that a
// few clients announcing large values and sending slowly cannot exhaust the
// machine's memory. A request that finds no room waits (bounded) for others
// to finish, then is refused cleanly (see docs/architecture.md, "Limits on
// untrusted input").
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include "daemon/asio.hpp"

namespace pt2cache::daemon {

class InflightBudget {
public:
    explicit InflightBudget(std::uint64_t limit = 2ull << 30)
        : m_limit(limit) {}

    void set_limit(std::uint64_t limit) { m_limit.store(limit, std::memory_order_relaxed); }
    std::uint64_t limit() const { return m_limit.load(std::memory_order_relaxed); }
    std::uint64_t in_use() const { return m_in_use.load(std::memory_order_relaxed); }

    // Takes `bytes` if they fit under the limit now.
    bool try_take(std::uint64_t bytes);
    void give_back(std::uint64_t bytes);

private:
    std::atomic<std::uint64_t> m_limit;
    std::atomic<std::uint64_t> m_in_use{0};
};

// What one connection holds of the budget; given back when it shrinks or
// dies.
class InflightLease {
public:
    explicit InflightLease(InflightBudget& budget)
        : m_budget(budget) {}
    ~InflightLease() { resize_down(0); }
    InflightLease(const InflightLease&) = delete;
    InflightLease& operator=(const InflightLease&) = delete;

    std::uint64_t bytes() const { return m_bytes; }

    // Grows the lease to `bytes`, waiting up to `patience` for room. False
    // when there was none by then (the lease is unchanged).
    awaitable<bool> grow_to(std::uint64_t bytes, std::chrono::milliseconds patience);
    // Shrinks the lease to `bytes` (no-op when it holds less).
    void resize_down(std::uint64_t bytes);

private:
    InflightBudget& m_budget;
    std::uint64_t m_bytes = 0;
};

// How long a request waits for room in the budget before it is refused.
inline constexpr std::chrono::milliseconds k_inflight_patience{10'000};

// What a client holding budget must send within each k_inflight_patience
// not to be taken for stalled (Connection::read_some_watched).
inline constexpr std::uint64_t k_stall_progress = 64 << 10;

} // namespace pt2cache::daemon
