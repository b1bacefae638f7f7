// SPDX-License-Identifier: MIT
#include "daemon/store/remote/redis_cluster.hpp"

#include <algorithm>

#include "daemon/store/log.hpp"
#include "daemon/store/request_arrival.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace pt2cache::daemon::store {

namespace {

using Admission = CircuitBreaker::Admission;

// CLUSTER SLOTS's element limit: 64 per slot. A range of one slot served by
// a master and seven replicas, each node of 4 fields with a one-entry
// metadata map (Redis 7), counts 1 + 10 + 8 * 6 = 59.
constexpr std::uint64_t k_cluster_slots_max_elements = 64 * proto::k_cluster_slots;
// Its strings are host names (at most 255 bytes, cluster_topology.cpp), node
// ids (40) and metadata: none is a value, so none may take max_value_size
// (a node could make the daemon hold 528 MiB per refresh). As a whole, 4 KiB
// per slot (64 MiB): a range of one slot with the eight nodes above takes
// about 0.5 KiB with IP addresses, and 3.1 KiB if each also announces a
// 255-byte host name and an IPv6 address (48.6 MiB for 16,384 such ranges).
constexpr std::uint64_t k_cluster_slots_max_bulk = 1024;
constexpr std::uint64_t k_cluster_slots_max_bytes = 4096 * proto::k_cluster_slots;

std::int64_t steady_ms() {
    return std::chrono::duration_cast<Milliseconds>(SteadyClock::now().time_since_epoch()).count();
}

// The endpoint of a node: the seed's, with the node's host and port (TLS
// settings, credentials, timeouts and limits carry over). Cluster nodes have
// only database 0.
RedisEndpoint node_endpoint(const RedisEndpoint& seed, const ClusterAddress& address) {
    RedisEndpoint endpoint = seed;
    endpoint.unix_socket.clear();
    endpoint.host = address.host;
    endpoint.port = address.port;
    endpoint.db = 0;
    return endpoint;
}

const RedisCommand k_asking{{"ASKING"}, {RedisReply::Type::status}};
const RedisCommand k_readonly{{"READONLY"}, {RedisReply::Type::status}};

void add(std::atomic<std::uint64_t>& counter) {
    counter.fetch_add(1, std::memory_order_relaxed);
}

} // namespace

RedisCluster::Node::Node(ClusterAddress address_, const RedisEndpoint& endpoint,
                         const ClusterOptions& options)
    : address(std::move(address_))
    , pool(endpoint, options.pool_size)
    , write_pool(endpoint, options.write_pool_size)
    , breaker(options.breaker) {}

RedisCluster::RedisCluster(ClusterOptions options, RemoteCounters& counters)
    : m_options(std::move(options))
    , m_counters(counters) {
    m_master.fill(k_none);
    m_replicas.fill(k_none);
    auto add_seed = [&](const RedisEndpoint& endpoint) {
        RedisEndpoint seed = endpoint;
        seed.db = 0;
        ClusterAddress address;
        if (seed.unix_socket.empty()) {
            address = ClusterAddress{seed.host, seed.port};
        }
        m_nodes.push_back(std::make_unique<Node>(std::move(address), seed, m_options));
    };
    add_seed(m_options.seed);
    for (const auto& seed : m_options.seeds) {
        add_seed(seed);
    }
    m_seed_count = m_nodes.size();
}

std::uint16_t RedisCluster::node_index(const ClusterAddress& address) {
    for (std::size_t i = 0; i < m_nodes.size(); ++i) {
        if (m_nodes[i]->address == address) {
            return static_cast<std::uint16_t>(i);
        }
    }
    if (m_nodes.size() >= std::min<std::size_t>(m_options.max_nodes, k_none)) {
        return k_none;
    }
    m_nodes.push_back(
        std::make_unique<Node>(address, node_endpoint(m_options.seed, address), m_options));
    return static_cast<std::uint16_t>(m_nodes.size() - 1);
}

RedisCluster::Node* RedisCluster::route(std::uint16_t slot, Route route, bool& replica) {
    replica = false;
    std::shared_lock lock(m_mutex);
    const auto master = m_master[slot];
    if (master == k_none) {
        // Not known (yet): a seed answers, or redirects.
        const auto seed = m_next_replica.fetch_add(1, std::memory_order_relaxed) % m_seed_count;
        return m_nodes[seed].get();
    }
    if (route == Route::read && m_options.read_from_replicas && m_replicas[slot] != k_none) {
        const auto& set = m_replica_sets[m_replicas[slot]];
        if (!set.empty()) {
            Node* candidate =
                m_nodes[set[m_next_replica.fetch_add(1, std::memory_order_relaxed) % set.size()]]
                    .get();
            if (candidate->breaker.snapshot().state == CircuitBreaker::State::closed) {
                replica = true;
                return candidate;
            }
        }
    }
    return m_nodes[master].get();
}

tl::expected<std::vector<RedisReplyPtr>, RedisError>
RedisCluster::execute(std::string_view routing_key, std::span<const RedisCommand> commands,
                      Route route_kind, const std::atomic<bool>* abort) {
    const auto slot = proto::cluster_key_slot(routing_key);
    // A client's request counts from its arrival (RedisTier::execute): also
    // over the two keys of a signed entry whose companion is elsewhere.
    const auto deadline = RequestArrival::deadline_after(m_options.seed.op_timeout);
    if (deadline <= SteadyClock::now()) {
        return tl::make_unexpected(
            RedisError{RedisErrorKind::suspended, "the request waited past its deadline"});
    }
    Milliseconds connecting{0};
    bool replica = false;
    Node* node = route(slot, route_kind, replica);
    bool asking = false;
    // The commands still to run (a node that redirects some of them ran the
    // others: during a migration, a key it still holds), and their replies.
    std::vector<RedisCommand> pending(commands.begin(), commands.end());
    std::vector<std::size_t> pending_index(commands.size());
    for (std::size_t i = 0; i < commands.size(); ++i) {
        pending_index[i] = i;
    }
    std::vector<RedisReplyPtr> answered(commands.size());
    for (unsigned hop = 0;; ++hop) {
        const auto admission = node->breaker.admit();
        if (admission == Admission::refused) {
            request_refresh();
            return tl::make_unexpected(
                RedisError{RedisErrorKind::suspended,
                           fmt::format("cluster node {} suspended", node->address.describe())});
        }
        // ASKING goes before each command (it holds for one); READONLY once.
        std::vector<RedisCommand> sent;
        const bool prefixed = asking || replica;
        if (prefixed) {
            sent.reserve(pending.size() * 2 + 1);
            if (replica) {
                sent.push_back(k_readonly);
            }
            for (const auto& command : pending) {
                if (asking) {
                    sent.push_back(k_asking);
                }
                sent.push_back(command);
            }
        }
        RedisPool& pool = route_kind == Route::write ? node->write_pool : node->pool;
        auto replies = pool.run(prefixed ? std::span<const RedisCommand>(sent) : pending, deadline,
                                connecting, abort);
        if (!replies) {
            if (replies.error().connectivity()) {
                on_node_failure(*node, replies.error(), admission);
            } else {
                node->breaker.release(admission);
            }
            return replies;
        }
        node->breaker.success(admission);
        if (prefixed) {
            std::vector<RedisReplyPtr> kept;
            kept.reserve(pending.size());
            for (std::size_t i = 0; i < replies->size(); ++i) {
                const bool prefix = sent[i].args.front() == "ASKING" ||
                                    (replica && i == 0 && sent[i].args.front() == "READONLY");
                if (!prefix) {
                    kept.push_back(std::move((*replies)[i]));
                }
            }
            replies->swap(kept);
        }
        // Each reply answers its command, but a redirection: those commands
        // go on to the next node, alone.
        std::optional<Redirect> redirect;
        std::vector<RedisCommand> redirected;
        std::vector<std::size_t> redirected_index;
        for (std::size_t i = 0; i < replies->size(); ++i) {
            auto& reply = (*replies)[i];
            std::optional<Redirect> this_one;
            if (reply->type == RedisReply::Type::error) {
                this_one = parse_redirect(reply->text(), node->address.host);
            }
            if (!this_one) {
                answered[pending_index[i]] = std::move(reply);
                continue;
            }
            if (!redirect) {
                redirect = std::move(this_one);
            }
            redirected.push_back(pending[i]);
            redirected_index.push_back(pending_index[i]);
        }
        if (!redirect) {
            return answered;
        }
        pending = std::move(redirected);
        pending_index = std::move(redirected_index);
        if (hop >= m_options.max_redirects) {
            return tl::make_unexpected(RedisError{
                RedisErrorKind::reply,
                fmt::format("more than {} cluster redirections for slot {} (last to {})",
                            m_options.max_redirects, slot, redirect->target.describe())});
        }
        std::uint16_t target;
        {
            std::unique_lock lock(m_mutex);
            target = node_index(redirect->target);
            // Only for the slot asked: a node that names another one for
            // it is not believed about that other one.
            if (target != k_none && redirect->kind == Redirect::Kind::moved &&
                redirect->slot == slot) {
                m_master[redirect->slot] = target;
                m_replicas[redirect->slot] = k_none;
            }
            if (target != k_none) {
                node = m_nodes[target].get();
            }
        }
        if (target == k_none) {
            return tl::make_unexpected(
                RedisError{RedisErrorKind::reply,
                           fmt::format("redirected to {}: more than {} cluster nodes",
                                       redirect->target.describe(), m_options.max_nodes)});
        }
        replica = false;
        asking = redirect->kind == Redirect::Kind::ask;
        if (asking) {
            add(m_counters.cluster_asks);
        } else {
            add(m_counters.cluster_moves);
            request_refresh();
        }
    }
}

void RedisCluster::on_node_failure(Node& node, const RedisError& error, Admission admission) {
    node.pool.drop_idle();
    node.write_pool.drop_idle();
    request_refresh();
    if (const auto until = node.breaker.failure(admission)) {
        add(m_counters.suspensions);
        const auto cooldown = std::chrono::duration_cast<Milliseconds>(*until - SteadyClock::now());
        remote_logger().warn("Redis cluster node {} unreachable ({}): its slots are answered "
                             "locally for {} ms",
                             node.address.host.empty() ? m_options.seed.describe()
                                                       : node.address.describe(),
                             error.message, cooldown.count());
    }
}

bool RedisCluster::refresh_due() const {
    const auto since = steady_ms() - m_last_refresh_ms.load(std::memory_order_relaxed);
    if (since >= m_options.refresh_period.count()) {
        return true;
    }
    return m_refresh_wanted.load(std::memory_order_relaxed) &&
           since >= m_options.refresh_min_interval.count();
}

tl::expected<void, RedisError> RedisCluster::refresh(const std::atomic<bool>* abort) {
    std::unique_lock running(m_refresh_mutex, std::try_to_lock);
    if (!running.owns_lock()) {
        return tl::make_unexpected(
            RedisError{RedisErrorKind::exhausted, "another topology refresh is running"});
    }
    m_refresh_wanted.store(false, std::memory_order_relaxed);
    m_last_refresh_ms.store(steady_ms(), std::memory_order_relaxed);
    // Candidates: the masters known, whose breakers are closed, then the seeds.
    std::vector<Node*> candidates;
    {
        std::shared_lock lock(m_mutex);
        std::vector<bool> seen(m_nodes.size(), false);
        for (const auto master : m_master) {
            if (master != k_none && !seen[master]) {
                seen[master] = true;
                if (m_nodes[master]->breaker.snapshot().state == CircuitBreaker::State::closed) {
                    candidates.push_back(m_nodes[master].get());
                }
            }
        }
        for (std::size_t i = 0; i < m_seed_count; ++i) {
            candidates.push_back(m_nodes[i].get());
        }
    }
    // A few tries, each with its own deadline: enough to get past a dead node.
    constexpr std::size_t k_tries = 3;
    RedisError last{RedisErrorKind::connect, "no cluster node to ask"};
    for (std::size_t i = 0; i < candidates.size() && i < k_tries; ++i) {
        auto done = refresh_from(*candidates[i], abort);
        if (done) {
            add(m_counters.topology_refreshes);
            return {};
        }
        last = std::move(done.error());
        if (last.kind == RedisErrorKind::aborted) {
            break;
        }
    }
    m_refresh_wanted.store(true, std::memory_order_relaxed);
    return tl::make_unexpected(std::move(last));
}

tl::expected<void, RedisError> RedisCluster::refresh_from(Node& node,
                                                          const std::atomic<bool>* abort) {
    // One range per slot, each with a master and replicas of 4 fields and a
    // metadata map (Redis 7), is a valid reply of well over 65536 elements.
    const RedisCommand command{{"CLUSTER", "SLOTS"},
                               {RedisReply::Type::array},
                               k_cluster_slots_max_elements,
                               k_cluster_slots_max_bulk,
                               k_cluster_slots_max_bytes};
    Milliseconds connecting{0};
    auto replies = node.write_pool.run(
        std::span(&command, 1), SteadyClock::now() + m_options.seed.op_timeout, connecting, abort);
    if (!replies) {
        if (replies.error().kind == RedisErrorKind::protocol) {
            add(m_counters.protocol_errors);
        }
        return tl::make_unexpected(std::move(replies.error()));
    }
    const RedisReply& reply = *replies->front();
    const auto asked_host =
        node.address.host.empty() ? std::string("127.0.0.1") : node.address.host;
    if (reply.type == RedisReply::Type::error) {
        return tl::make_unexpected(
            RedisError{RedisErrorKind::reply, fmt::format("CLUSTER SLOTS: {}", reply.text())});
    }
    auto ranges = parse_cluster_slots(reply, asked_host);
    if (!ranges) {
        add(m_counters.protocol_errors);
        remote_logger().warn("Redis cluster node {}: CLUSTER SLOTS reply refused: {}",
                             node.address.describe(), ranges.error());
        return tl::make_unexpected(RedisError{RedisErrorKind::protocol, ranges.error()});
    }
    std::unique_lock lock(m_mutex);
    std::array<std::uint16_t, proto::k_cluster_slots> master;
    std::array<std::uint16_t, proto::k_cluster_slots> replicas;
    master.fill(k_none);
    replicas.fill(k_none);
    std::vector<std::vector<std::uint16_t>> sets;
    for (const auto& range : *ranges) {
        const auto index = node_index(range.master);
        if (index == k_none) {
            continue;
        }
        std::vector<std::uint16_t> set;
        for (const auto& address : range.replicas) {
            const auto replica = node_index(address);
            if (replica != k_none) {
                set.push_back(replica);
            }
        }
        const auto set_index = static_cast<std::uint16_t>(sets.size());
        sets.push_back(std::move(set));
        for (unsigned slot = range.first; slot <= range.last; ++slot) {
            master[slot] = index;
            replicas[slot] = set_index;
        }
    }
    m_master = master;
    m_replicas = replicas;
    m_replica_sets = std::move(sets);
    return {};
}

std::size_t RedisCluster::node_count() const {
    std::shared_lock lock(m_mutex);
    return m_nodes.size();
}

std::size_t RedisCluster::slots_known() const {
    std::shared_lock lock(m_mutex);
    return static_cast<std::size_t>(
        std::count_if(m_master.begin(), m_master.end(), [](auto v) { return v != k_none; }));
}

} // namespace pt2cache::daemon::store
