// SPDX-License-Identifier: MIT
#include "daemon/store/remote/redis_tier.hpp"

#include <algorithm>
#include <limits>

#include "daemon/store/log.hpp"
#include "daemon/store/request_arrival.hpp"
#include "proto/inductor_keys.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace pt2cache::daemon::store {

namespace {

void add(std::atomic<std::uint64_t>& counter, std::uint64_t amount = 1) {
    counter.fetch_add(amount, std::memory_order_relaxed);
}

StoreError to_store_error(const RedisError& error) {
    if (error.kind == RedisErrorKind::suspended) {
        return StoreError{Failure::unavailable, error.message};
    }
    const bool timeout =
        error.kind == RedisErrorKind::timeout || error.kind == RedisErrorKind::exhausted;
    return StoreError{timeout ? Failure::timeout : Failure::io, error.message};
}

StoreError no_redis_form(std::string_view ns) {
    return StoreError{Failure::unavailable,
                      fmt::format("namespace {} has no Redis form: never sent remote", ns)};
}

std::int64_t unix_ms_at(SteadyClock::time_point when) {
    const auto left = std::chrono::duration_cast<Milliseconds>(when - SteadyClock::now());
    return now_ms() + std::max<std::int64_t>(0, left.count());
}

unsigned flusher_count(const RedisTierOptions& options) {
    return std::clamp(options.flushers, 1U, 8U);
}

std::unique_ptr<RedisCluster> make_cluster(const RedisTierOptions& options,
                                           RemoteCounters& counters) {
    if (options.cluster == ClusterMode::off) {
        return nullptr;
    }
    ClusterOptions cluster;
    cluster.seed = options.endpoint;
    cluster.seeds = options.cluster_seeds;
    cluster.pool_size = options.pool_size;
    cluster.write_pool_size = flusher_count(options);
    cluster.breaker = options.breaker;
    cluster.read_from_replicas = options.read_from_replicas;
    return std::make_unique<RedisCluster>(std::move(cluster), counters);
}

RedisError not_connected() {
    return RedisError{RedisErrorKind::suspended, "remote tier not connected"};
}

} // namespace

RedisTier::RedisTier(RedisTierOptions options, Stats& stats)
    : m_options(std::move(options))
    , m_counters(stats.remote())
    , m_pool(m_options.endpoint, m_options.pool_size)
    , m_write_pool(m_options.endpoint, flusher_count(m_options))
    , m_cluster(make_cluster(m_options, m_counters))
    , m_mode(m_options.cluster == ClusterMode::off  ? Mode::single
             : m_options.cluster == ClusterMode::on ? Mode::cluster
                                                    : Mode::unknown)
    , m_breaker(m_options.breaker)
    , m_queue(m_options.queue) {
    m_counters.set_state(RemoteState::connecting);
    const unsigned flushers = flusher_count(m_options);
    m_running = flushers;
    for (unsigned i = 0; i < flushers; ++i) {
        m_flushers.emplace_back([this] { flusher_loop(); });
    }
}

RedisTier::~RedisTier() {
    m_stopping = true;
    m_queue.close();
    const auto deadline = SteadyClock::now() + m_options.shutdown_flush;
    const auto pending = m_queue.size();
    bool idle = false;
    while (!(idle = m_queue.wait_idle(std::min(deadline, SteadyClock::now() + Milliseconds(50)))) &&
           m_running > 0 && SteadyClock::now() < deadline) {
    }
    // Writes in flight stop within about 50 ms; what is left is dropped.
    m_abort = true;
    m_queue.notify();
    for (auto& thread : m_flushers) {
        thread.join();
    }
    const auto left = m_queue.drain();
    add(m_counters.shutdown_drops, left.size());
    update_gauges();
    if (!left.empty() || !idle) {
        remote_logger().warn("shutdown: {} queued writes not sent to Redis ({} were queued)",
                             left.size(), pending);
    } else if (pending > 0) {
        remote_logger().info("shutdown: {} queued writes sent to Redis", pending);
    }
    m_counters.set_state(RemoteState::disabled);
}

RemoteState RedisTier::state() const {
    std::lock_guard lock(m_state_mutex);
    return m_state;
}

void RedisTier::set_state(RemoteState state, std::int64_t until_ms) {
    // Called with m_state_mutex held.
    m_state = state;
    m_counters.set_state(state, until_ms);
}

void RedisTier::on_success() {
    if (m_mode.load() == Mode::unknown) {
        return; // detect_mode says connected once requests know where to go
    }
    std::lock_guard lock(m_state_mutex);
    if (m_state == RemoteState::connected) {
        return;
    }
    if (m_ever_connected) {
        remote_logger().info("Redis at {} is back: remote tier resumed",
                             m_options.endpoint.describe());
    } else {
        remote_logger().info("connected to Redis at {}", m_options.endpoint.describe());
    }
    m_ever_connected = true;
    set_state(RemoteState::connected);
}

void RedisTier::on_failure(const RedisError& error, Admission admission) {
    if (!error.connectivity()) {
        m_breaker.release(admission);
        return;
    }
    // The other idle connections most likely lead to the same dead end.
    m_pool.drop_idle();
    m_write_pool.drop_idle();
    const auto until = m_breaker.failure(admission);
    std::lock_guard lock(m_state_mutex);
    if (until) {
        add(m_counters.suspensions);
        const auto cooldown = std::chrono::duration_cast<Milliseconds>(*until - SteadyClock::now());
        remote_logger().warn("Redis at {} unreachable ({}): remote tier suspended for {} ms",
                             m_options.endpoint.describe(), error.message, cooldown.count());
        set_state(RemoteState::suspended, unix_ms_at(*until));
    } else if (m_state == RemoteState::connected) {
        remote_logger().warn("Redis at {}: {}", m_options.endpoint.describe(), error.message);
        set_state(RemoteState::connecting);
    }
}

RedisTier::Admission RedisTier::admit_request() {
    const auto admission = m_breaker.admit();
    // After a failure, requests do not queue up behind a Redis that may be
    // frozen: until the flusher's probe (sent at once) or a probe admitted by
    // the breaker succeeds, they are answered locally.
    if (admission == Admission::allowed && state() != RemoteState::connected) {
        return Admission::refused;
    }
    return admission;
}

tl::expected<std::vector<RedisReplyPtr>, RedisError>
RedisTier::execute(RedisPool& pool, std::span<const RedisCommand> commands, Admission admission,
                   const std::atomic<bool>* abort) {
    // One deadline for waiting on the pool and the exchange; the time spent
    // connecting (bounded by the connect timeout) comes on top of it. A
    // client's request counts from its arrival: one that waited for a worker
    // past the deadline is answered locally, without asking Redis.
    const auto deadline = RequestArrival::deadline_after(m_options.endpoint.op_timeout);
    if (deadline <= SteadyClock::now()) {
        m_breaker.release(admission);
        return tl::make_unexpected(RedisError{RedisErrorKind::suspended,
                                              "the request waited for a worker past its deadline"});
    }
    Milliseconds connecting{0};
    auto replies = pool.run(commands, deadline, connecting, abort);
    if (replies) {
        m_breaker.success(admission);
        on_success();
        return replies;
    }
    auto error = std::move(replies.error());
    if (error.kind == RedisErrorKind::aborted) {
        m_breaker.release(admission);
    } else {
        count_failure(error);
        on_failure(error, admission);
    }
    return tl::make_unexpected(std::move(error));
}

void RedisTier::count_failure(const RedisError& error, bool protocol_counted) {
    const bool timeout =
        error.kind == RedisErrorKind::timeout || error.kind == RedisErrorKind::exhausted;
    add(timeout ? m_counters.timeouts : m_counters.errors);
    if (error.kind == RedisErrorKind::protocol && !protocol_counted) {
        add(m_counters.protocol_errors);
    }
}

tl::expected<std::vector<RedisReplyPtr>, RedisError>
RedisTier::run_keyed(std::string_view key, std::span<const RedisCommand> commands, Route route,
                     const std::atomic<bool>* abort) {
    const auto mode = m_mode.load();
    if (mode == Mode::cluster) {
        if (state() != RemoteState::connected) {
            return tl::make_unexpected(not_connected());
        }
        auto replies = m_cluster->execute(key, commands, route, abort);
        if (!replies && replies.error().kind != RedisErrorKind::suspended &&
            replies.error().kind != RedisErrorKind::aborted) {
            count_failure(replies.error());
        }
        if (m_cluster->refresh_due()) {
            m_queue.notify(); // a flusher refreshes the topology
        }
        return replies;
    }
    if (mode == Mode::unknown) {
        return tl::make_unexpected(not_connected());
    }
    const auto admission = route == Route::write ? m_breaker.admit() : admit_request();
    if (admission == Admission::refused) {
        return tl::make_unexpected(not_connected());
    }
    return execute(route == Route::write ? m_write_pool : m_pool, commands, admission, abort);
}

bool RedisTier::companion_elsewhere(std::string_view redis_key) const {
    return m_options.signer && cluster_active() && !signature_shares_slot(redis_key);
}

tl::expected<std::vector<RedisReplyPtr>, RedisError>
RedisTier::run_each(std::initializer_list<std::string_view> keys,
                    std::span<const RedisCommand> commands, Route route,
                    const std::atomic<bool>* abort) {
    std::vector<RedisReplyPtr> all;
    std::size_t i = 0;
    for (const auto key : keys) {
        auto replies = run_keyed(key, commands.subspan(i++, 1), route, abort);
        if (!replies) {
            return replies;
        }
        all.push_back(std::move(replies->front()));
    }
    return all;
}

tl::expected<bool, StoreError> RedisTier::with_ttl(Entry& entry, const RedisReply& pttl,
                                                   std::string_view redis_key) {
    // PTTL: milliseconds left, -1 for none, -2 for a key gone between the
    // GET and the PTTL (expired or deleted meanwhile), 0 for one expiring
    // now: both a miss. Anything else (an error reply, such as an ACL
    // refusal) leaves the expiry unknown: the value is not used, since a
    // copy kept here without its TTL would be served for ever.
    if (pttl.type != RedisReply::Type::integer || pttl.integer < -2) {
        add(m_counters.errors);
        return tl::make_unexpected(
            StoreError{Failure::io, fmt::format("PTTL {:?}: Redis answered {:?}; the value is "
                                                "not used (its expiry is unknown)",
                                                redis_key, pttl.text())});
    }
    if (pttl.integer == -2 || pttl.integer == 0) {
        return false;
    }
    if (pttl.integer > 0) {
        // Saturating: an expiry past the range of the clock is none.
        const bool representable =
            pttl.integer <= std::numeric_limits<UnixMs>::max() - entry.created_ms;
        entry.expires_ms = representable ? entry.created_ms + pttl.integer : 0;
    }
    return true;
}

tl::expected<std::optional<Entry>, StoreError> RedisTier::get(std::string_view ns,
                                                              std::string_view key) {
    const auto redis_key = proto::to_redis_key(ns, key);
    if (!redis_key) {
        return tl::make_unexpected(no_redis_form(ns));
    }
    if (m_queue.erasing(*redis_key)) {
        add(m_counters.misses); // deleted: Redis's copy is on its way out
        return std::nullopt;
    }
    if (m_options.signer) {
        return get_signed(*redis_key);
    }
    // With its TTL, in the same round trip: a value kept here after its
    // expiry in Redis would be served for ever (a backfill has no TTL).
    const RedisCommand commands[2] = {
        {{"GET", *redis_key}, {RedisReply::Type::string, RedisReply::Type::nil}},
        {{"PTTL", *redis_key}, {RedisReply::Type::integer}}};
    auto replies = run_keyed(*redis_key, commands, Route::read, &m_abandon);
    if (!replies) {
        if (replies.error().kind == RedisErrorKind::suspended) {
            add(m_counters.skipped);
        }
        return tl::make_unexpected(to_store_error(replies.error()));
    }
    const RedisReply& reply = *replies->front();
    switch (reply.type) {
    case RedisReply::Type::nil:
        add(m_counters.misses);
        return std::nullopt;
    case RedisReply::Type::string: {
        Entry entry;
        entry.value = reply.data;
        entry.created_ms = now_ms();
        auto live = with_ttl(entry, *(*replies)[1], *redis_key);
        if (!live) {
            return tl::make_unexpected(std::move(live.error()));
        }
        if (!*live) {
            add(m_counters.misses);
            return std::nullopt;
        }
        add(m_counters.hits);
        return entry;
    }
    default:
        add(m_counters.errors);
        return tl::make_unexpected(StoreError{
            Failure::io, fmt::format("GET {:?}: Redis answered {:?}", *redis_key, reply.text())});
    }
}

tl::expected<void, StoreError> RedisTier::put(std::string_view ns, std::string_view key,
                                              const Entry& entry) {
    auto redis_key = proto::to_redis_key(ns, key);
    if (!redis_key) {
        return tl::make_unexpected(no_redis_form(ns));
    }
    if (entry.value.size() > m_options.max_value_size) {
        add(m_counters.oversize_skips);
        return tl::make_unexpected(StoreError{
            Failure::too_large, fmt::format("value of {} bytes not sent: Redis accepts at most {}",
                                            entry.value.size(), m_options.max_value_size)});
    }
    std::int64_t ttl_ms = static_cast<std::int64_t>(m_options.expire_s) * 1000;
    if (entry.expires_ms != 0) {
        const auto left = entry.expires_ms - now_ms();
        if (left <= 0) {
            return {}; // already expired: nothing worth sharing
        }
        ttl_ms = ttl_ms == 0 ? left : std::min(ttl_ms, left);
    }
    WriteItem item{std::move(*redis_key), entry.value, ttl_ms};
    const auto bytes = item.bytes();
    const auto pushed = m_queue.push(std::move(item));
    add(m_counters.queue_drops, pushed.dropped);
    update_gauges();
    if (!pushed.accepted) {
        return tl::make_unexpected(StoreError{
            Failure::too_large,
            fmt::format("{} bytes do not fit the write-behind queue ({} bytes): not sent", bytes,
                        m_options.queue.capacity_bytes)});
    }
    add(m_counters.queued);
    return {};
}

tl::expected<bool, StoreError> RedisTier::remove(std::string_view ns, std::string_view key) {
    const auto redis_key = proto::to_redis_key(ns, key);
    if (!redis_key) {
        return false;
    }
    const bool dequeued = m_queue.erase(*redis_key) > 0;
    update_gauges();
    // A write of the key still in flight could land after the DEL and bring
    // the entry back: the DEL waits for it (a failed one is not retried).
    if (!m_queue.wait_settled(*redis_key, SteadyClock::now() + 2 * m_options.endpoint.op_timeout)) {
        add(m_counters.timeouts);
        // Queued behind that write (the erase above took any delete it
        // carried): else, the write failing, Redis kept the value (a review).
        defer_delete(*redis_key);
        return tl::make_unexpected(
            StoreError{Failure::timeout,
                       fmt::format("DEL {:?}: its write to Redis is still going on", *redis_key)});
    }
    std::vector<RedisCommand> commands{{{"DEL", *redis_key}, {RedisReply::Type::integer}}};
    std::string companion; // signed entries: the signature goes too (same slot: its hash tag)
    if (m_options.signer) {
        companion = signature_key(*redis_key);
        commands.push_back({{"DEL", companion}, {RedisReply::Type::integer}});
    }
    auto replies = companion_elsewhere(*redis_key)
                       ? run_each({*redis_key, companion}, commands, Route::erase, &m_abandon)
                       : run_keyed(*redis_key, commands, Route::erase, &m_abandon);
    if (!replies) {
        const auto kind = replies.error().kind;
        if (kind == RedisErrorKind::suspended) {
            add(m_counters.skipped);
        }
        if (kind == RedisErrorKind::suspended || kind == RedisErrorKind::exhausted ||
            replies.error().connectivity()) {
            // Not sent, or not known to have been done: the DEL goes behind,
            // after any write of the key queued before it, and gets miss the
            // key meanwhile. Answered locally, Redis kept the value and every
            // get after it served it back (a review: DEL answered 1, the
            // value back once Redis was, also after a restart).
            defer_delete(*redis_key);
        }
        return tl::make_unexpected(to_store_error(replies.error()));
    }
    const RedisReply& reply = *replies->front();
    if (reply.type != RedisReply::Type::integer) {
        add(m_counters.errors);
        if (reply.is_transient_error()) {
            // -BUSY and the like: sent again later, and answered locally
            // meanwhile, as when Redis does not answer.
            defer_delete(*redis_key);
            return tl::make_unexpected(StoreError{
                Failure::unavailable, fmt::format("DEL {:?}: {}", *redis_key, reply.text())});
        }
        return tl::make_unexpected(
            StoreError{Failure::io, fmt::format("DEL {:?}: {}", *redis_key, reply.text())});
    }
    return dequeued || reply.integer > 0;
}

void RedisTier::defer_delete(std::string redis_key) {
    WriteItem item;
    item.key = std::move(redis_key);
    item.erase = true;
    const auto pushed = m_queue.push(std::move(item));
    add(m_counters.queue_drops, pushed.dropped);
    if (pushed.accepted) {
        add(m_counters.queued);
    }
    update_gauges();
}

tl::expected<std::uint64_t, StoreError> RedisTier::clear(std::string_view) {
    return 0;
}

void RedisTier::abandon_requests() {
    m_abandon = true;
}

bool RedisTier::flush(Milliseconds timeout) {
    return m_queue.wait_idle(SteadyClock::now() + timeout);
}

void RedisTier::update_gauges() {
    m_counters.queue_bytes.store(m_queue.bytes(), std::memory_order_relaxed);
    m_counters.queue_entries.store(m_queue.size(), std::memory_order_relaxed);
}

} // namespace pt2cache::daemon::store
