// SPDX-License-Identifier: MIT
#include "daemon/inflight_budget.hpp"

#include <algorithm>

namespace pt2cache::daemon {

bool InflightBudget::try_take(std::uint64_t bytes) {
    std::uint64_t used = m_in_use.load(std::memory_order_relaxed);
    for (;;) {
        const std::uint64_t limit = m_limit.load(std::memory_order_relaxed);
        if (bytes > limit || used > limit - bytes) {
            return false;
        }
        if (m_in_use.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed)) {
            return true;
        }
    }
}

void InflightBudget::give_back(std::uint64_t bytes) {
    m_in_use.fetch_sub(bytes, std::memory_order_relaxed);
}

awaitable<bool> InflightLease::grow_to(std::uint64_t bytes, std::chrono::milliseconds patience) {
    if (bytes <= m_bytes) {
        co_return true;
    }
    const std::uint64_t more = bytes - m_bytes;
    if (m_budget.try_take(more)) {
        m_bytes = bytes;
        co_return true;
    }
    if (patience.count() <= 0) {
        co_return false;
    }
    // Others are receiving large requests: wait for them, polling, as a
    // queue of waiters would need a wake-up path through every give_back.
    asio::steady_timer timer(co_await asio::this_coro::executor);
    const auto deadline = std::chrono::steady_clock::now() + patience;
    auto pause = std::chrono::milliseconds(1);
    while (std::chrono::steady_clock::now() < deadline) {
        timer.expires_after(pause);
        boost::system::error_code ec;
        co_await timer.async_wait(asio::redirect_error(use_awaitable, ec));
        if (m_budget.try_take(more)) {
            m_bytes = bytes;
            co_return true;
        }
        pause = std::min(pause * 2, std::chrono::milliseconds(50));
    }
    co_return false;
}

void InflightLease::resize_down(std::uint64_t bytes) {
    if (bytes < m_bytes) {
        m_budget.give_back(m_bytes - bytes);
        m_bytes = bytes;
    }
}

} // namespace pt2cache::daemon
