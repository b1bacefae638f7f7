// SPDX-License-Identifier: MIT
#include "daemon/store/remote/redis_pool.hpp"

#include <algorithm>
#include <optional>
#include <utility>

#include <fmt/format.h>

namespace pt2cache::daemon::store {

RedisPool::Lease::~Lease() {
    if (m_connection) {
        m_pool->give_back(std::move(m_connection));
    }
}

RedisPool::RedisPool(RedisEndpoint endpoint, unsigned size)
    : m_endpoint(std::move(endpoint))
    , m_size(std::max(1U, size)) {}

tl::expected<RedisPool::Lease, RedisError> RedisPool::acquire(SteadyClock::time_point deadline,
                                                              const std::atomic<bool>* abort) {
    {
        std::unique_lock lock(m_mutex);
        for (;;) {
            if (!m_idle.empty()) {
                // Most recently returned first: the likeliest to be alive.
                auto connection = std::move(m_idle.back());
                m_idle.pop_back();
                return Lease(*this, std::move(connection), true);
            }
            if (m_open < m_size) {
                ++m_open;
                break;
            }
            if (m_returned.wait_until(lock, deadline) == std::cv_status::timeout &&
                m_idle.empty() && m_open >= m_size) {
                return tl::make_unexpected(
                    RedisError{RedisErrorKind::exhausted,
                               fmt::format("all {} Redis connections busy", m_size)});
            }
        }
    }
    // Connect outside the lock; the slot is reserved.
    auto opened = RedisConnection::open(m_endpoint, deadline, abort);
    if (!opened) {
        {
            std::lock_guard lock(m_mutex);
            --m_open;
        }
        m_returned.notify_one();
        return tl::make_unexpected(std::move(opened.error()));
    }
    return Lease(*this, std::make_unique<RedisConnection>(std::move(*opened)), false);
}

tl::expected<std::vector<RedisReplyPtr>, RedisError>
RedisPool::run(std::span<const RedisCommand> commands, SteadyClock::time_point deadline,
               Milliseconds& connecting, const std::atomic<bool>* abort) {
    const auto extended = [&] {
        return deadline + std::min(connecting, m_endpoint.connect_timeout);
    };
    std::optional<RedisError> error;
    for (int attempt = 0; attempt < 2; ++attempt) {
        auto lease = acquire(extended(), abort);
        if (!lease) {
            return tl::make_unexpected(std::move(lease.error()));
        }
        if (!lease->reused()) {
            connecting += (*lease)->connect_time();
        }
        auto replies = (*lease)->exchange(commands, extended(), abort);
        if (replies) {
            return replies;
        }
        error = std::move(replies.error());
        if (!(attempt == 0 && lease->reused() && error->kind == RedisErrorKind::io)) {
            break;
        }
        drop_idle();
    }
    return tl::make_unexpected(std::move(*error));
}

void RedisPool::give_back(std::unique_ptr<RedisConnection> connection) {
    {
        std::lock_guard lock(m_mutex);
        if (connection->usable()) {
            m_idle.push_back(std::move(connection));
        } else {
            --m_open;
        }
    }
    m_returned.notify_one();
    // A broken connection is closed here, outside the lock.
}

void RedisPool::drop_idle() {
    std::vector<std::unique_ptr<RedisConnection>> closing;
    {
        std::lock_guard lock(m_mutex);
        closing.swap(m_idle);
        m_open -= closing.size();
    }
    m_returned.notify_all();
}

std::size_t RedisPool::open_count() const {
    std::lock_guard lock(m_mutex);
    return m_open;
}

} // namespace pt2cache::daemon::store
