// SPDX-License-Identifier: MIT
// A bounded pool of Redis connections, opened on demand. Thread-safe.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "daemon/store/remote/redis_context.hpp"

namespace pt2cache::daemon::store {

class RedisPool {
public:
    // One connection lent to one thread; returned to the pool when the lease
    // ends if it is still usable, closed otherwise.
    class Lease {
    public:
        Lease(RedisPool& pool, std::unique_ptr<RedisConnection> connection, bool reused)
            : m_pool(&pool)
            , m_connection(std::move(connection))
            , m_reused(reused) {}
        Lease(Lease&&) noexcept = default;
        Lease& operator=(Lease&&) = delete;
        ~Lease();

        RedisConnection& operator*() const { return *m_connection; }
        RedisConnection* operator->() const { return m_connection.get(); }
        // True when the connection had been used before (it may have gone
        // stale since: Redis restarted, an idle timeout).
        bool reused() const { return m_reused; }

    private:
        RedisPool* m_pool;
        std::unique_ptr<RedisConnection> m_connection;
        bool m_reused;
    };

    RedisPool(RedisEndpoint endpoint, unsigned size);
    RedisPool(const RedisPool&) = delete;
    RedisPool& operator=(const RedisPool&) = delete;

    // An idle connection, or a new one when fewer than `size` are open; else
    // waits for one to be returned until `deadline` (`exhausted`). A new
    // connection's connect takes up to the endpoint's connect timeout on top
    // of `deadline`; its setup must be done by `deadline` plus that time.
    tl::expected<Lease, RedisError> acquire(SteadyClock::time_point deadline,
                                            const std::atomic<bool>* abort = nullptr);

    // Runs `commands` on a pooled connection: waiting for it and the exchange
    // by `deadline`, plus the time spent connecting (added to `connecting`,
    // at most one connect timeout in all). A reused connection that broke at
    // once was stale (Redis restarted, or closed it): it is replaced and the
    // commands tried once more on a fresh one, within the same deadline.
    tl::expected<std::vector<RedisReplyPtr>, RedisError>
    run(std::span<const RedisCommand> commands, SteadyClock::time_point deadline,
        Milliseconds& connecting, const std::atomic<bool>* abort = nullptr);

    // Closes every idle connection: after a connection broke, the others
    // were most likely opened to the same, now gone, server.
    void drop_idle();

    const RedisEndpoint& endpoint() const { return m_endpoint; }
    // Connections open (idle or lent).
    std::size_t open_count() const;

private:
    void give_back(std::unique_ptr<RedisConnection> connection);

    const RedisEndpoint m_endpoint;
    const std::size_t m_size;
    mutable std::mutex m_mutex;
    std::condition_variable m_returned;
    std::vector<std::unique_ptr<RedisConnection>> m_idle;
    std::size_t m_open = 0; // idle + lent + being opened
};

} // namespace pt2cache::daemon::store
