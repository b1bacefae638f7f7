// SPDX-License-Identifier: MIT
#include "daemon/inflight_budget.hpp"

#include <algorithm>
#include <optional>

#include <fmt/format.h>

namespace pt2cache::daemon {

void InflightBudget::begin_wait(const void* lease, std::uint64_t ticket, std::uint64_t held,
                                std::uint64_t wanted) {
    std::lock_guard lock(m_waiters_mutex);
    const auto after = std::find_if(m_waiters.begin(), m_waiters.end(),
                                    [&](const Waiter& waiter) { return waiter.ticket > ticket; });
    m_waiters.insert(after, Waiter{lease, ticket, held, wanted});
    m_waiting.store(m_waiters.size(), std::memory_order_relaxed);
}

void InflightBudget::end_wait(const void* lease) {
    std::lock_guard lock(m_waiters_mutex);
    std::erase_if(m_waiters, [&](const Waiter& waiter) { return waiter.lease == lease; });
    m_waiting.store(m_waiters.size(), std::memory_order_relaxed);
}

bool InflightBudget::try_take_for(const void* lease, std::uint64_t bytes) {
    if (m_waiting.load(std::memory_order_relaxed) == 0) {
        return try_take(bytes); // the usual case: nobody waits
    }
    std::uint64_t keep_free = 0;
    {
        std::lock_guard lock(m_waiters_mutex);
        if (!m_waiters.empty() && m_waiters.front().lease != lease) {
            keep_free = m_waiters.front().wanted;
        }
    }
    return try_take(bytes, keep_free);
}

bool InflightBudget::should_give_way(const void* lease) const {
    std::lock_guard lock(m_waiters_mutex);
    std::uint64_t waiting_held = 0;
    const Waiter* youngest = nullptr; // holding some
    for (const Waiter& waiter : m_waiters) {
        waiting_held += waiter.held;
        if (waiter.held > 0) {
            youngest = &waiter;
        }
    }
    // Bytes held by a request still arriving, or one being served, come back
    // without anyone giving way.
    return youngest != nullptr && youngest->lease == lease && waiting_held >= in_use();
}

namespace {
constexpr std::chrono::milliseconds k_longest_pause{50}; // between a waiter's looks for room
} // namespace

awaitable<bool> InflightLease::grow_to(std::uint64_t bytes, std::chrono::milliseconds patience) {
    if (bytes <= m_bytes) {
        co_return true;
    }
    const std::uint64_t more = bytes - m_bytes;
    if (m_budget.try_take_for(this, more)) {
        m_bytes = bytes;
        co_return true;
    }
    if (patience.count() <= 0) {
        co_return false;
    }
    // Others are receiving large requests: wait for them, polling, as a
    // queue of waiters would need a wake-up path through every give_back.
    if (m_ticket == 0) {
        m_ticket = m_budget.next_ticket();
    }
    m_budget.begin_wait(this, m_ticket, m_bytes, more);
    struct EndWait {
        InflightBudget& budget;
        const void* lease;
        ~EndWait() { budget.end_wait(lease); }
    } end_wait{m_budget, this};
    asio::steady_timer timer(co_await asio::this_coro::executor);
    const auto deadline = std::chrono::steady_clock::now() + patience;
    auto pause = std::chrono::milliseconds(1);
    // Told to give way for longer than the longest pause: every other
    // waiter has looked for room meanwhile, so it is no passing state.
    std::optional<std::chrono::steady_clock::time_point> told_since;
    while (std::chrono::steady_clock::now() < deadline) {
        timer.expires_after(pause);
        boost::system::error_code ec;
        co_await timer.async_wait(asio::redirect_error(use_awaitable, ec));
        if (m_budget.try_take_for(this, more)) {
            m_bytes = bytes;
            co_return true;
        }
        const auto now = std::chrono::steady_clock::now();
        if (!m_budget.should_give_way(this)) {
            told_since.reset();
        } else if (!told_since) {
            told_since = now;
        } else if (now - *told_since > 2 * k_longest_pause) {
            m_gave_way = true;
            co_return false;
        }
        pause = std::min(pause * 2, k_longest_pause);
    }
    co_return false;
}

std::string refusal_reason(const InflightLease& lease) {
    if (lease.gave_way()) {
        return "while every request holding some of it waited for more (this one, the latest "
               "to wait, gave way)";
    }
    return fmt::format("within {} s", k_inflight_patience.count() / 1000);
}

void InflightLease::resize_down(std::uint64_t bytes) {
    if (bytes < m_bytes) {
        m_budget.give_back(m_bytes - bytes);
        m_bytes = bytes;
    }
    if (m_bytes == 0) {
        m_ticket = 0; // the request is over: a later one waits behind those waiting now
    }
}

} // namespace pt2cache::daemon
