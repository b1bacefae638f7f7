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
#include <mutex>
#include <string>
#include <vector>

#include "daemon/asio.hpp"
#include "daemon/store/byte_budget.hpp"

namespace pt2cache::daemon {

class InflightBudget : public store::ByteBudget {
public:
    explicit InflightBudget(std::uint64_t limit = 2ull << 30)
        : ByteBudget(limit) {}

    // Leases waiting for room, oldest first (by the ticket each took when
    // its request first waited: a request growing in steps keeps its place
    // from one step to the next), with what each holds and wants more. The
    // oldest one's room is kept for it: others take only what
    // leaves it free, so that requests arriving after it cannot take every
    // room that frees before it looks again (a review: a 10 MiB SET among
    // 4 MiB ones was refused 19 of 20 times). When every byte in use is held
    // by waiters, none can finish before another gives up: the youngest
    // holding some is told to, then the next, until the oldest fits. A
    // request longer than the whole budget is refused before it waits (its
    // length is known: a native frame's header, a RESP bulk length), so the
    // oldest always fits once the others are gone.
    std::uint64_t next_ticket() { return m_next_ticket.fetch_add(1, std::memory_order_relaxed); }
    void begin_wait(const void* lease, std::uint64_t ticket, std::uint64_t held,
                    std::uint64_t wanted);
    void end_wait(const void* lease);
    bool should_give_way(const void* lease) const;
    // try_take for `lease`, leaving the oldest waiter's room unless it is
    // that waiter.
    bool try_take_for(const void* lease, std::uint64_t bytes);

private:
    struct Waiter {
        const void* lease;
        std::uint64_t ticket;
        std::uint64_t held;
        std::uint64_t wanted;
    };

    mutable std::mutex m_waiters_mutex;
    std::vector<Waiter> m_waiters;         // oldest first; a few, and only while the budget is full
    std::atomic<std::size_t> m_waiting{0}; // m_waiters.size(), read without the lock
    std::atomic<std::uint64_t> m_next_ticket{1};
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
    // when there was none by then, or when this lease was told to give way
    // (gave_way(); the lease is unchanged either way).
    awaitable<bool> grow_to(std::uint64_t bytes, std::chrono::milliseconds patience);
    bool gave_way() const { return m_gave_way; }
    // Shrinks the lease to `bytes` (no-op when it holds less).
    void resize_down(std::uint64_t bytes);

private:
    InflightBudget& m_budget;
    std::uint64_t m_bytes = 0;
    bool m_gave_way = false;
    // The request's place among waiters: taken at its first wait, kept
    // until the lease is given back whole (0 when none).
    std::uint64_t m_ticket = 0;
};

// How long a request waits for room in the budget before it is refused.
inline constexpr std::chrono::milliseconds k_inflight_patience{10'000};

// Why `lease` got no room, for a log line or an error: its patience ran out,
// or it gave way to the other waiting requests.
std::string refusal_reason(const InflightLease& lease);

// What a client holding budget must send within each k_inflight_patience
// not to be taken for stalled (Connection::read_some_watched).
inline constexpr std::uint64_t k_stall_progress = 64 << 10;

} // namespace pt2cache::daemon
