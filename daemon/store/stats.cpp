// SPDX-License-Identifier: MIT
#include "daemon/store/stats.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <ctime>
#include <iterator>
#include <mutex>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace pt2cache::daemon::store {

namespace {

std::int64_t steady_ns() {
    using namespace std::chrono;
    return duration_cast<nanoseconds>(steady_clock::now().time_since_epoch()).count();
}

nlohmann::json tier_json(const TierCounters& counters) {
    const auto load = [](const std::atomic<std::uint64_t>& value) {
        return value.load(std::memory_order_relaxed);
    };
    return {
        {"hits", load(counters.hits)},           {"misses", load(counters.misses)},
        {"puts", load(counters.puts)},           {"bytes_in", load(counters.bytes_in)},
        {"bytes_out", load(counters.bytes_out)}, {"evictions", load(counters.evictions)},
        {"corrupt", load(counters.corrupt)},     {"errors", load(counters.errors)},
    };
}

nlohmann::json remote_json(const RemoteCounters& remote, std::int64_t now_ms) {
    const auto load = [](const std::atomic<std::uint64_t>& value) {
        return value.load(std::memory_order_relaxed);
    };
    const auto state = static_cast<RemoteState>(remote.state.load(std::memory_order_relaxed));
    const auto until = remote.suspended_until_ms.load(std::memory_order_relaxed);
    return {
        {"state", remote_state_text(state, until, now_ms)},
        {"hits", load(remote.hits)},
        {"misses", load(remote.misses)},
        {"errors", load(remote.errors)},
        {"timeouts", load(remote.timeouts)},
        {"suspensions", load(remote.suspensions)},
        {"skipped", load(remote.skipped)},
        {"coalesced", load(remote.coalesced)},
        {"backfills", load(remote.backfills)},
        {"queued", load(remote.queued)},
        {"written", load(remote.written)},
        {"queue_drops", load(remote.queue_drops)},
        {"shutdown_drops", load(remote.shutdown_drops)},
        {"oversize_skips", load(remote.oversize_skips)},
        {"protocol_errors", load(remote.protocol_errors)},
        {"cluster_moves", load(remote.cluster_moves)},
        {"cluster_asks", load(remote.cluster_asks)},
        {"topology_refreshes", load(remote.topology_refreshes)},
        {"rejected_unsigned", load(remote.rejected_unsigned)},
        {"rejected_bad_signature", load(remote.rejected_bad_signature)},
        {"queue_bytes", load(remote.queue_bytes)},
        {"queue_entries", load(remote.queue_entries)},
    };
}

} // namespace

std::string remote_state_text(RemoteState state, std::int64_t until_ms, std::int64_t now_ms) {
    switch (state) {
    case RemoteState::disabled:
        return "disabled";
    case RemoteState::connecting:
        return "connecting";
    case RemoteState::connected:
        return "connected";
    case RemoteState::suspended:
        break;
    }
    if (until_ms <= now_ms) {
        return "connecting";
    }
    const auto seconds = static_cast<std::time_t>(until_ms / 1000);
    std::tm utc{};
    ::gmtime_r(&seconds, &utc);
    return fmt::format("suspended until {:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
                       utc.tm_year + 1900, utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min,
                       utc.tm_sec, until_ms % 1000);
}

std::string_view tier_name(TierId tier) {
    switch (tier) {
    case TierId::memory:
        return "memory";
    case TierId::disk:
        return "disk";
    case TierId::remote:
        return "remote";
    }
    return "unknown";
}

std::string_view latency_op_name(LatencyOp op) {
    switch (op) {
    case LatencyOp::get:
        return "get";
    case LatencyOp::put:
        return "put";
    case LatencyOp::exists:
        return "exists";
    case LatencyOp::del:
        return "delete";
    case LatencyOp::list:
        return "list";
    case LatencyOp::clear:
        return "clear";
    case LatencyOp::bundle_begin:
        return "bundle_begin";
    case LatencyOp::bundle_end:
        return "bundle_end";
    }
    return "unknown";
}

std::string_view latency_tier_name(LatencyTier tier) {
    return tier == LatencyTier::none ? std::string_view("none")
                                     : tier_name(static_cast<TierId>(tier));
}

std::string_view request_result_name(RequestResult result) {
    switch (result) {
    case RequestResult::ok:
        return "ok";
    case RequestResult::miss:
        return "miss";
    case RequestResult::error:
        return "error";
    }
    return "unknown";
}

namespace {

std::atomic<std::uint64_t> g_next_stats_serial{1};

// A thread's recently used namespaces, so that a request's counters cost no
// lock (the map's shared lock is a cache line every I/O thread writes).
// Keyed by the Stats object's serial, never its address, which a later
// object may reuse.
struct RecentNamespace {
    std::uint64_t stats_serial = 0;
    std::string name;
    NamespaceCounters* counters = nullptr;
};
constexpr std::size_t k_recent_namespaces = 4;
thread_local std::array<RecentNamespace, k_recent_namespaces> t_recent;
thread_local std::size_t t_recent_next = 0;

} // namespace

Stats::Stats()
    : m_serial(g_next_stats_serial.fetch_add(1, std::memory_order_relaxed))
    , m_started_ns(steady_ns())
    , m_reset_ns(m_started_ns) {}

std::atomic<unsigned> g_next_latency_shard{0};

latency::Snapshot NamespaceCounters::latency_snapshot(int series) const {
    latency::Snapshot sum;
    for (const auto& shard : shards) {
        sum += shard.latency[series].snapshot();
    }
    return sum;
}

bool NamespaceCounters::latency_empty(int series) const {
    return std::all_of(std::begin(shards), std::end(shards),
                       [&](const LatencyShard& shard) { return shard.latency[series].empty(); });
}

std::uint64_t NamespaceCounters::request_count(LatencyOp op, RequestResult result) const {
    std::uint64_t sum = 0;
    for (const auto& shard : shards) {
        sum += shard.requests[static_cast<int>(op)][static_cast<int>(result)].load(
            std::memory_order_relaxed);
    }
    return sum;
}

void NamespaceCounters::reset_latency() {
    for (auto& shard : shards) {
        for (auto& histogram : shard.latency) {
            histogram.reset();
        }
        for (auto& per_op : shard.requests) {
            for (auto& count : per_op) {
                count.store(0, std::memory_order_relaxed);
            }
        }
    }
}

NamespaceCounters& Stats::ns(std::string_view ns) {
    for (const RecentNamespace& recent : t_recent) {
        if (recent.stats_serial == m_serial && recent.name == ns) {
            return *recent.counters;
        }
    }
    {
        std::shared_lock lock(m_mutex);
        if (auto it = m_namespaces.find(ns); it != m_namespaces.end()) {
            RecentNamespace& slot = t_recent[t_recent_next];
            t_recent_next = (t_recent_next + 1) % k_recent_namespaces;
            slot.stats_serial = m_serial;
            slot.name.assign(ns);
            slot.counters = it->second.get();
            return *it->second;
        }
        if (m_namespaces.size() >= k_max_namespaces) {
            // Past the limit: no counters are made, shared or exclusive.
            if (auto other = m_namespaces.find(k_other_namespace); other != m_namespaces.end()) {
                return *other->second;
            }
        }
    }
    // First sight of `ns`: allocate outside the lock, insert under it. A racing
    // thread may have inserted meanwhile; `try_emplace` then keeps its counters.
    auto fresh = std::make_unique<NamespaceCounters>();
    std::string name(ns);
    std::unique_lock lock(m_mutex);
    if (m_namespaces.size() >= k_max_namespaces && !m_namespaces.contains(name)) {
        name = k_other_namespace;
    }
    auto [it, inserted] = m_namespaces.try_emplace(std::move(name), std::move(fresh));
    return *it->second;
}

double Stats::uptime_seconds() const {
    return static_cast<double>(steady_ns() - m_started_ns) / 1e9;
}

double Stats::since_reset_seconds() const {
    return static_cast<double>(steady_ns() - m_reset_ns.load(std::memory_order_relaxed)) / 1e9;
}

std::vector<LatencySeries> Stats::latency() const {
    std::vector<LatencySeries> series;
    std::shared_lock lock(m_mutex);
    for (const auto& [name, counters] : m_namespaces) {
        for (int op = 0; op < k_latency_op_count; ++op) {
            for (int tier = 0; tier <= static_cast<int>(LatencyTier::none); ++tier) {
                const auto latency_op = static_cast<LatencyOp>(op);
                const auto latency_tier = static_cast<LatencyTier>(tier);
                if (latency_op != LatencyOp::get && latency_tier != LatencyTier::none) {
                    continue;
                }
                const int index = latency_series(latency_op, latency_tier);
                if (!counters->latency_empty(index)) {
                    series.push_back(
                        {latency_op, latency_tier, name, counters->latency_snapshot(index)});
                }
            }
        }
    }
    return series;
}

std::vector<RequestCount> Stats::request_counts() const {
    std::vector<RequestCount> counts;
    std::shared_lock lock(m_mutex);
    for (const auto& [name, counters] : m_namespaces) {
        for (int op = 0; op < k_latency_op_count; ++op) {
            for (int result = 0; result < k_request_result_count; ++result) {
                const auto count = counters->request_count(static_cast<LatencyOp>(op),
                                                           static_cast<RequestResult>(result));
                if (count != 0) {
                    counts.push_back({static_cast<LatencyOp>(op),
                                      static_cast<RequestResult>(result), name, count});
                }
            }
        }
    }
    return counts;
}

void Stats::reset() {
    const auto zero = [](std::atomic<std::uint64_t>& value) {
        value.store(0, std::memory_order_relaxed);
    };
    {
        std::shared_lock lock(m_mutex);
        for (const auto& [name, counters] : m_namespaces) {
            for (auto& tier : counters->tiers) {
                for (auto* counter :
                     {&tier.hits, &tier.misses, &tier.puts, &tier.bytes_in, &tier.bytes_out,
                      &tier.evictions, &tier.corrupt, &tier.errors}) {
                    zero(*counter);
                }
            }
            counters->reset_latency();
        }
    }
    for (auto* counter : {&m_daemon.connections_accepted,
                          &m_daemon.peers_refused,
                          &m_daemon.protocol_errors,
                          &m_daemon.requests,
                          &m_daemon.connections_over_limit,
                          &m_daemon.inflight_refused,
                          &m_daemon.stalled_requests,
                          &m_daemon.reads_refused,
                          &m_daemon.small_store_recoveries,
                          &m_daemon.small_store_salvaged,
                          &m_remote.hits,
                          &m_remote.misses,
                          &m_remote.errors,
                          &m_remote.timeouts,
                          &m_remote.suspensions,
                          &m_remote.skipped,
                          &m_remote.coalesced,
                          &m_remote.backfills,
                          &m_remote.queued,
                          &m_remote.written,
                          &m_remote.queue_drops,
                          &m_remote.shutdown_drops,
                          &m_remote.oversize_skips,
                          &m_remote.protocol_errors}) {
        zero(*counter);
    }
    m_daemon.small_store_writes.reset();
    m_reset_ns.store(steady_ns(), std::memory_order_relaxed);
}

nlohmann::json Stats::to_json() const {
    const auto load = [](const std::atomic<std::uint64_t>& value) {
        return value.load(std::memory_order_relaxed);
    };
    nlohmann::json namespaces = nlohmann::json::object();
    {
        std::shared_lock lock(m_mutex);
        for (const auto& [name, counters] : m_namespaces) {
            nlohmann::json tiers = nlohmann::json::object();
            for (int i = 0; i < k_tier_count; ++i) {
                tiers[std::string(tier_name(static_cast<TierId>(i)))] =
                    tier_json(counters->tiers[i]);
            }
            namespaces[name] = std::move(tiers);
        }
    }
    nlohmann::json latency_rows = nlohmann::json::array();
    for (const auto& series : latency()) {
        const auto& snapshot = series.snapshot;
        latency_rows.push_back({
            {"op", latency_op_name(series.op)},
            {"tier", latency_tier_name(series.tier)},
            {"ns", series.ns},
            {"count", snapshot.count()},
            {"sum_us", static_cast<double>(snapshot.sum_ns) / 1e3},
            {"p50_us", snapshot.quantile_ns(0.5) / 1e3},
            {"p99_us", snapshot.quantile_ns(0.99) / 1e3},
            {"p999_us", snapshot.quantile_ns(0.999) / 1e3},
        });
    }
    nlohmann::json request_rows = nlohmann::json::array();
    for (const auto& count : request_counts()) {
        request_rows.push_back({{"op", latency_op_name(count.op)},
                                {"ns", count.ns},
                                {"result", request_result_name(count.result)},
                                {"count", count.count}});
    }
    return {
        {"uptime_s", uptime_seconds()},
        {"requests", std::move(request_rows)},
        {"since_reset_s", since_reset_seconds()},
        {"latency", std::move(latency_rows)},
        {"daemon",
         {
             {"connections_accepted", load(m_daemon.connections_accepted)},
             {"connections_active", load(m_daemon.connections_active)},
             {"peers_refused", load(m_daemon.peers_refused)},
             {"protocol_errors", load(m_daemon.protocol_errors)},
             {"requests", load(m_daemon.requests)},
             {"connections_over_limit", load(m_daemon.connections_over_limit)},
             {"inflight_refused", load(m_daemon.inflight_refused)},
             {"stalled_requests", load(m_daemon.stalled_requests)},
             {"reads_refused", load(m_daemon.reads_refused)},
             {"small_store_recoveries", load(m_daemon.small_store_recoveries)},
             {"small_store_salvaged", load(m_daemon.small_store_salvaged)},
         }},
        {"namespaces", std::move(namespaces)},
        {"remote", remote_json(m_remote, std::chrono::duration_cast<std::chrono::milliseconds>(
                                             std::chrono::system_clock::now().time_since_epoch())
                                             .count())},
    };
}

} // namespace pt2cache::daemon::store
