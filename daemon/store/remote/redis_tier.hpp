// SPDX-License-Identifier: MIT
// The remote tier: Redis, shared by a fleet, with keys and values exactly as
// plain PyTorch writes them (`pt2:{cache_id}::{key}:c1`, value bytes as they
// are; proto::to_redis_key is the mapping). Entries of a namespace with no
// Redis form never leave the machine.
//
// - get: one GET on a pooled connection, bounded by the connect and operation
//   timeouts. While the circuit breaker holds the tier suspended, or after a
//   failure until a probe succeeds, it answers `Failure::unavailable` at once
//   (the store then answers locally).
// - put: queued (write-behind, see write_behind.hpp) and written by flusher
//   threads with `SET key value [EX n | PX n]`; the caller never waits for
//   Redis. Values over `max_value_size` (Redis's proto-max-bulk-len) are not
//   sent.
// - destruction flushes the queue for up to `shutdown_flush`, then drops and
//   counts the rest.
// Every call blocks (up to its deadline): never call it on an Asio thread.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <mutex>
#include <thread>
#include <vector>

#include "daemon/store/log.hpp"
#include "daemon/store/remote/circuit_breaker.hpp"
#include "daemon/store/remote/entry_signing.hpp"
#include "daemon/store/remote/redis_cluster.hpp"
#include "daemon/store/remote/redis_context.hpp"
#include "daemon/store/remote/redis_pool.hpp"
#include "daemon/store/remote/write_behind.hpp"
#include "daemon/store/stats.hpp"
#include "daemon/store/tier.hpp"

namespace pt2cache::daemon::store {

// remote.cluster: `detect` asks the seed's INFO cluster (cluster_enabled:1).
enum class ClusterMode { off, on, detect };

struct RedisTierOptions {
    RedisEndpoint endpoint;
    ClusterMode cluster = ClusterMode::off;
    std::vector<RedisEndpoint> cluster_seeds; // remote.cluster_nodes
    bool read_from_replicas = false;
    unsigned pool_size = 4;     // for gets and deletes; each flusher has one more of its own
    std::uint64_t expire_s = 0; // TTL of every write; 0: none
    std::uint64_t max_value_size = 512ULL << 20; // Redis's proto-max-bulk-len default
    WriteBehindOptions queue;
    BreakerOptions breaker;
    unsigned flushers = 2; // 1..8
    Milliseconds shutdown_flush{5000};
    // Between probes while connecting (the breaker's cool-downs apply once
    // it has opened).
    Milliseconds probe_interval{200};
    // Signed entries (docs/remote.md): every write also sets the companion
    // `pt2sig:{key}`, every get checks it. Null: off.
    std::shared_ptr<const EntrySigner> signer;
};

class RedisTier final : public Tier {
public:
    // Starts the flusher threads; the first one connects (the daemon serves
    // meanwhile, and whether Redis is up or not).
    RedisTier(RedisTierOptions options, Stats& stats);
    ~RedisTier() override;
    RedisTier(const RedisTier&) = delete;
    RedisTier& operator=(const RedisTier&) = delete;

    std::string_view name() const override { return "remote"; }

    tl::expected<std::optional<Entry>, StoreError> get(std::string_view ns,
                                                       std::string_view key) override;

    // Queues the write; fails only when nothing will be sent: no Redis form
    // (`unavailable`), over `max_value_size` or larger than the whole queue
    // (`too_large`).
    tl::expected<void, StoreError> put(std::string_view ns, std::string_view key,
                                       const Entry& entry) override;

    // DEL, and drops queued writes of the key.
    tl::expected<bool, StoreError> remove(std::string_view ns, std::string_view key) override;

    // Remote entries are shared by the fleet: a local `clear` leaves them.
    tl::expected<std::uint64_t, StoreError> clear(std::string_view ns) override;

    // Waits until every queued write is written (or given up); true when the
    // queue became idle within `timeout`.
    bool flush(Milliseconds timeout);

    // GETs and DELs in progress stop within about 50 ms (a transfer that
    // earns time as bytes arrive would otherwise hold shutdown past its
    // drain deadline); the write-behind queue keeps its own shutdown flush.
    void abandon_requests() override;

    const RedisTierOptions& options() const { return m_options; }
    RemoteState state() const;
    // The longest a get of a small value takes: connect plus operation timeout.
    Milliseconds get_budget() const {
        return m_options.endpoint.connect_timeout + m_options.endpoint.op_timeout;
    }

    // Whether the Redis is a cluster (false also while not yet known).
    bool cluster_active() const { return m_mode.load() == Mode::cluster; }
    bool cluster_mode_known() const { return m_mode.load() != Mode::unknown; }
    const RedisCluster* cluster() const { return m_cluster.get(); }

private:
    using Admission = CircuitBreaker::Admission;
    using Route = RedisCluster::Route;
    enum class Mode { unknown, single, cluster };

    // Runs `commands` about `key`: on the cluster node serving it, or on the
    // one Redis (the gets pool, or the flushers' for Route::write). A request
    // the breaker (the node's, in a cluster) refuses fails with `suspended`.
    tl::expected<std::vector<RedisReplyPtr>, RedisError>
    run_keyed(std::string_view key, std::span<const RedisCommand> commands, Route route,
              const std::atomic<bool>* abort = nullptr);
    // Signing on, in a cluster, and the key has a '}' of its own: its
    // companion `pt2sig:{key}` may be in another slot.
    bool companion_elsewhere(std::string_view redis_key) const;
    // commands[i] routed by the i-th key, one exchange each.
    tl::expected<std::vector<RedisReplyPtr>, RedisError>
    run_each(std::initializer_list<std::string_view> keys, std::span<const RedisCommand> commands,
             Route route, const std::atomic<bool>* abort = nullptr);
    // Sets `entry`'s expiry from the PTTL reply that came with its GET;
    // false when the key was gone or expiring, an error (counted) when the
    // reply gives no expiry.
    tl::expected<bool, StoreError> with_ttl(Entry& entry, const RedisReply& pttl,
                                            std::string_view redis_key);
    // Counts a failed operation (errors, timeouts, protocol_errors).
    void count_failure(const RedisError& error, bool protocol_counted = false);
    // Detects (remote.cluster = auto) whether the seed is a cluster node.
    void detect_mode(Admission admission);

    // The breaker's admission for a get or delete; refused as well while a
    // failure has not been followed by a successful probe.
    Admission admit_request();
    // Runs `commands` on a pooled connection (retrying once on a fresh one
    // when a reused connection turns out stale), and tells the breaker how it
    // went. Counts errors and timeouts.
    tl::expected<std::vector<RedisReplyPtr>, RedisError>
    execute(RedisPool& pool, std::span<const RedisCommand> commands, Admission admission,
            const std::atomic<bool>* abort = nullptr);
    void on_success();
    void on_failure(const RedisError& error, Admission admission);
    void set_state(RemoteState state, std::int64_t until_ms = 0);

    void flusher_loop();
    // Sends a queued entry: a SET, or the DEL of a delete not sent when it
    // was made.
    void write(WriteItem item);
    // Queues the DEL of `redis_key` (WriteItem::erase).
    void defer_delete(std::string redis_key);
    void probe();
    void update_gauges();
    void log_refused_write(const WriteItem& item, std::string_view reason);

    // Signed entries (redis_tier_signed.cpp).
    tl::expected<std::optional<Entry>, StoreError> get_signed(const std::string& redis_key);
    // `commands` (a SET) followed by the SET of its companion, same TTL;
    // `companion` holds the strings the new command views.
    void add_signature(std::vector<RedisCommand>& commands,
                       std::array<std::string, 2>& companion) const;

    const RedisTierOptions m_options;
    RemoteCounters& m_counters;
    RedisPool m_pool;       // gets and deletes: `pool_size` connections
    RedisPool m_write_pool; // the flushers' own (one each): writes never hold up gets
    std::unique_ptr<RedisCluster> m_cluster; // unless remote.cluster = false
    std::atomic<Mode> m_mode{Mode::unknown};
    CircuitBreaker m_breaker;
    WriteBehindQueue m_queue;

    mutable std::mutex m_state_mutex;
    RemoteState m_state = RemoteState::connecting;
    bool m_ever_connected = false;

    std::atomic<bool> m_stopping{false};
    std::atomic<bool> m_abort{false};
    std::atomic<bool> m_abandon{false}; // requests (gets, removes): abandon_requests()
    std::atomic<unsigned> m_running{0};
    LogThrottle m_refusal_log;
    LogThrottle m_rejection_log;
    LogThrottle m_topology_log;
    std::vector<std::thread> m_flushers;
};

} // namespace pt2cache::daemon::store
