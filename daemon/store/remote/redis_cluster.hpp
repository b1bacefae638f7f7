// SPDX-License-Identifier: MIT
// Routing of the remote tier's commands over a Redis Cluster (docs/remote.md,
// "Cluster"): a slot map from CLUSTER SLOTS, one connection pool pair and one
// circuit breaker per node (a dead shard costs only its own slots), MOVED and
// ASK followed within the operation's deadline.
//
// Commands are routed by one key (`execute`'s `routing_key`): every key they
// name must be in that key's slot (the same key, or a companion whose hash tag
// is that key). Node endpoints are copies of the seed endpoint with the host
// and port changed, so its credentials, timeouts and limits carry over.
//
// Thread-safe. Every call blocks (up to its deadline): never on an Asio thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <string_view>
#include <vector>

#include "daemon/store/remote/circuit_breaker.hpp"
#include "daemon/store/remote/cluster_topology.hpp"
#include "daemon/store/remote/redis_context.hpp"
#include "daemon/store/remote/redis_pool.hpp"
#include "daemon/store/stats.hpp"
#include "proto/cluster_slot.hpp"

namespace pt2cache::daemon::store {

struct ClusterOptions {
    RedisEndpoint seed;                     // remote.url / host / port / unix_socket
    std::vector<RedisEndpoint> seeds;       // remote.cluster_nodes
    unsigned pool_size = 4;                 // per node, for gets and deletes
    unsigned write_pool_size = 2;           // per node, for the flushers and topology queries
    BreakerOptions breaker;                 // per node
    bool read_from_replicas = false;        // gets go to a replica (READONLY) when one is known
    unsigned max_redirects = 2;             // MOVED / ASK followed per operation
    Milliseconds refresh_min_interval{250}; // between refreshes asked for by MOVED or failures
    Milliseconds refresh_period{10000};     // a refresh at least this often
    std::size_t max_nodes = 1024;           // nodes known at most (redirections to more fail)
};

class RedisCluster {
public:
    enum class Route {
        read,  // a get: the gets pool, a replica when read_from_replicas
        write, // a write or delete from a flusher: the write pool of the master
        erase, // a delete from a request: the gets pool of the master
    };

    RedisCluster(ClusterOptions options, RemoteCounters& counters);
    RedisCluster(const RedisCluster&) = delete;
    RedisCluster& operator=(const RedisCluster&) = delete;

    // Runs `commands` on the node serving `routing_key`'s slot, following at
    // most `max_redirects` MOVED / ASK replies, all by one deadline (the op
    // timeout, plus at most one connect timeout). A node whose breaker is
    // open is not tried: `suspended`. Connectivity failures feed the node's
    // breaker and ask for a topology refresh.
    tl::expected<std::vector<RedisReplyPtr>, RedisError>
    execute(std::string_view routing_key, std::span<const RedisCommand> commands, Route route,
            const std::atomic<bool>* abort = nullptr);

    // Asks CLUSTER SLOTS of a known master (or a seed) and replaces the slot
    // map. One refresh at a time: a call while another runs returns at once
    // (`exhausted`).
    tl::expected<void, RedisError> refresh(const std::atomic<bool>* abort = nullptr);

    // A refresh was asked for (by MOVED or a failure) and the minimum interval
    // has passed, or the period has.
    bool refresh_due() const;
    void request_refresh() { m_refresh_wanted.store(true, std::memory_order_relaxed); }

    // Nodes known, and slots whose master is known.
    std::size_t node_count() const;
    std::size_t slots_known() const;

private:
    struct Node {
        Node(ClusterAddress address, const RedisEndpoint& endpoint, const ClusterOptions& options);
        ClusterAddress address; // empty host for a seed given as a Unix socket
        RedisPool pool;
        RedisPool write_pool;
        CircuitBreaker breaker;
    };
    static constexpr std::uint16_t k_none = 0xFFFF;

    // The node for `slot` (a replica for reads when configured and healthy);
    // a seed when the slot's master is not known.
    Node* route(std::uint16_t slot, Route route, bool& replica);
    // Index of the node at `address`, added when new; k_none past max_nodes.
    // Called with m_mutex held exclusively.
    std::uint16_t node_index(const ClusterAddress& address);
    void on_node_failure(Node& node, const RedisError& error, CircuitBreaker::Admission admission);
    tl::expected<void, RedisError> refresh_from(Node& node, const std::atomic<bool>* abort);

    const ClusterOptions m_options;
    RemoteCounters& m_counters;

    mutable std::shared_mutex m_mutex;          // the node list and the slot maps
    std::vector<std::unique_ptr<Node>> m_nodes; // seeds first; never shrinks
    std::size_t m_seed_count = 0;
    std::array<std::uint16_t, proto::k_cluster_slots> m_master{};   // slot -> node
    std::array<std::uint16_t, proto::k_cluster_slots> m_replicas{}; // slot -> m_replica_sets
    std::vector<std::vector<std::uint16_t>> m_replica_sets;

    std::mutex m_refresh_mutex;
    std::atomic<bool> m_refresh_wanted{true};
    std::atomic<std::int64_t> m_last_refresh_ms{0}; // steady clock
    std::atomic<unsigned> m_next_replica{0};
};

} // namespace pt2cache::daemon::store
