// Counters per namespace and tier, plus daemon-wide ones. Counting is lock-free
// once a namespace has been seen; the first sight of a namespace takes a lock.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/store/latency.hpp"

#include <nlohmann/json_fwd.hpp>

namespace pt2cache::daemon::store {

enum class TierId { memory = 0, disk = 1, remote = 2 };
inline constexpr int k_tier_count = 3;
std::string_view tier_name(TierId tier);

struct TierCounters {
    std::atomic<std::uint64_t> hits{0};
    std::atomic<std::uint64_t> misses{0};
    std::atomic<std::uint64_t> puts{0};
    std::atomic<std::uint64_t> bytes_in{0};  // bytes stored into the tier
    std::atomic<std::uint64_t> bytes_out{0}; // bytes served from the tier
    std::atomic<std::uint64_t> evictions{0};
    std::atomic<std::uint64_t> corrupt{0};
    std::atomic<std::uint64_t> errors{0};
};

// The operations whose latency is measured (docs/operations.md, "Latency").
enum class LatencyOp { get = 0, put, exists, del, list, clear, bundle_begin, bundle_end };
inline constexpr int k_latency_op_count = 8;
std::string_view latency_op_name(LatencyOp op); // "get", "put", "exists", "delete", ...

// Where a request's answer came from: the tier a GET hit in, or `none` (a GET
// miss, and every other operation).
enum class LatencyTier { memory = 0, disk = 1, remote = 2, none = 3 };
std::string_view latency_tier_name(LatencyTier tier);
inline LatencyTier latency_tier(TierId tier) {
    return static_cast<LatencyTier>(tier);
}

// Histograms are kept for GET x {memory, disk, remote, none} and for each
// other operation x none.
inline constexpr int k_latency_series = 4 + (k_latency_op_count - 1);
inline constexpr int latency_series(LatencyOp op, LatencyTier tier) {
    return op == LatencyOp::get ? static_cast<int>(tier) : 3 + static_cast<int>(op);
}

// How a measured request ended: `ok` (a GET or BUNDLE_BEGIN hit, a PUT
// stored, an EXISTS or DEL that found the entry, a LIST or CLEAR served),
// `miss` (a miss, or NOT_STORED), `error` (any error reply).
enum class RequestResult { ok = 0, miss = 1, error = 2 };
inline constexpr int k_request_result_count = 3;
std::string_view request_result_name(RequestResult result);

// The latency histograms and request counts are sharded: a thread records
// into its own shard (threads take shards in turn), so the I/O threads never
// write the same cache lines on the hot path; reports add the shards up.
inline constexpr int k_latency_shards = 4;

// The next thread's shard, modulo k_latency_shards.
extern std::atomic<unsigned> g_next_latency_shard;

// This thread's shard, in [0, k_latency_shards).
inline int latency_shard() {
    thread_local int shard = -1;
    if (shard < 0) {
        shard = static_cast<int>(g_next_latency_shard.fetch_add(1, std::memory_order_relaxed) %
                                 k_latency_shards);
    }
    return shard;
}

struct alignas(64) LatencyShard {
    latency::Histogram latency[k_latency_series];
    std::atomic<std::uint64_t> requests[k_latency_op_count][k_request_result_count]{};
};

struct NamespaceCounters {
    TierCounters tiers[k_tier_count];
    LatencyShard shards[k_latency_shards];
    TierCounters& tier(TierId id) { return tiers[static_cast<int>(id)]; }
    // One request: its result and its latency in ns.
    void record(LatencyOp op, LatencyTier tier, RequestResult result, std::uint64_t ns) {
        auto& shard = shards[latency_shard()];
        shard.requests[static_cast<int>(op)][static_cast<int>(result)].fetch_add(
            1, std::memory_order_relaxed);
        shard.latency[latency_series(op, tier)].record(ns);
    }
    // The shards added up.
    latency::Snapshot latency_snapshot(int series) const;
    bool latency_empty(int series) const;
    std::uint64_t request_count(LatencyOp op, RequestResult result) const;
    // Zeroes the histograms and request counts.
    void reset_latency();
};

// Requests of one namespace, op and result, for reports.
struct RequestCount {
    LatencyOp op;
    RequestResult result;
    std::string ns;
    std::uint64_t count;
};

// One non-empty latency series, for reports.
struct LatencySeries {
    LatencyOp op;
    LatencyTier tier;
    std::string ns;
    latency::Snapshot snapshot;
};

struct DaemonCounters {
    std::atomic<std::uint64_t> connections_accepted{0};
    std::atomic<std::uint64_t> connections_active{0};
    std::atomic<std::uint64_t> peers_refused{0};
    std::atomic<std::uint64_t> protocol_errors{0};
    std::atomic<std::uint64_t> requests{0};
    // Connections refused over daemon.max_connections(_per_process).
    std::atomic<std::uint64_t> connections_over_limit{0};
    // Requests refused: no room in daemon.max_inflight_bytes in time.
    std::atomic<std::uint64_t> inflight_refused{0};
    // Connections closed for receiving under 64 KiB in 10 s, or for their
    // client reading under 64 KiB of replies in 10 s, while holding part of
    // daemon.max_inflight_bytes (Connection::read_some_watched,
    // Connection::writer_progress).
    std::atomic<std::uint64_t> stalled_requests{0};
    // GETs refused: no room in daemon.max_reply_bytes in time for the large
    // value they would read from disk (fetch, ReadBudget).
    std::atomic<std::uint64_t> reads_refused{0};
    // small.mdb files LMDB refused, moved aside and replaced by a fresh store.
    std::atomic<std::uint64_t> small_store_recoveries{0};
    // Entries of quarantined small.mdb files put back into the fresh store.
    std::atomic<std::uint64_t> small_store_salvaged{0};
    // Queued disk writes given up at shutdown (DiskWriteQueue::shutdown):
    // the daemon then exits with status 1. Not exported: the process ends.
    std::atomic<std::uint64_t> writes_abandoned{0};
    // How long each transaction writing put entries into small.mdb took (its
    // puts and its commit, whose fdatasync is most of it): a slow disk shows
    // here before it shows as an old write queue.
    latency::Histogram small_store_writes;
};

// The remote (Redis) tier's state, for STATS and `pt2cache stats`.
enum class RemoteState { disabled = 0, connecting = 1, connected = 2, suspended = 3 };

// The remote tier's own counters, next to the per-namespace `remote` rows.
struct RemoteCounters {
    std::atomic<std::uint64_t> hits{0};           // GETs Redis answered with a value
    std::atomic<std::uint64_t> misses{0};         // GETs Redis answered with nil
    std::atomic<std::uint64_t> errors{0};         // failed operations other than timeouts
    std::atomic<std::uint64_t> timeouts{0};       // operations that ran past their deadline
    std::atomic<std::uint64_t> suspensions{0};    // times the circuit breaker opened
    std::atomic<std::uint64_t> skipped{0};        // requests answered locally: suspended or probing
    std::atomic<std::uint64_t> coalesced{0};      // gets that waited for another get of their key
    std::atomic<std::uint64_t> backfills{0};      // remote hits copied into disk and memory
    std::atomic<std::uint64_t> queued{0};         // writes accepted by the write-behind queue
    std::atomic<std::uint64_t> written{0};        // writes Redis acknowledged
    std::atomic<std::uint64_t> queue_drops{0};    // writes dropped: queue full, or failed 3 times
    std::atomic<std::uint64_t> shutdown_drops{0}; // writes still queued at the shutdown deadline
    std::atomic<std::uint64_t> oversize_skips{0}; // values larger than Redis accepts: not sent
    std::atomic<std::uint64_t> cluster_moves{0};  // MOVED redirections followed
    std::atomic<std::uint64_t> cluster_asks{0};   // ASK redirections followed
    std::atomic<std::uint64_t> topology_refreshes{0};     // CLUSTER SLOTS replies applied
    std::atomic<std::uint64_t> protocol_errors{0};        // replies that broke RESP2 or its limits
    std::atomic<std::uint64_t> rejected_unsigned{0};      // signing on: a value without signature
    std::atomic<std::uint64_t> rejected_bad_signature{0}; // signing on: a signature that failed
    std::atomic<std::uint64_t> queue_bytes{0};            // gauge: bytes waiting in the queue
    std::atomic<std::uint64_t> queue_entries{0};          // gauge: entries waiting in the queue
    std::atomic<int> state{static_cast<int>(RemoteState::disabled)};
    std::atomic<std::int64_t> suspended_until_ms{0}; // Unix ms, when suspended

    void set_state(RemoteState value, std::int64_t until_ms = 0) {
        suspended_until_ms.store(until_ms, std::memory_order_relaxed);
        state.store(static_cast<int>(value), std::memory_order_relaxed);
    }
};

// "connected", "connecting", "disabled", or "suspended until <ISO 8601 UTC>"
// ("connecting" once the suspension's end has passed: a probe is due).
std::string remote_state_text(RemoteState state, std::int64_t until_ms, std::int64_t now_ms);

class Stats {
public:
    Stats();

    // Counters of `ns`, created on first use; the reference stays valid for
    // the lifetime of this object. Past k_max_namespaces names, a new one
    // shares the counters named k_other_namespace: each name's counters and
    // histograms take about 100 KB, and a client that sent a request in each
    // of 30,000 made-up namespaces held 2.9 GB of them for good.
    NamespaceCounters& ns(std::string_view ns);
    static constexpr std::size_t k_max_namespaces = 256;
    static constexpr std::string_view k_other_namespace = "(other)";
    TierCounters& tier(std::string_view ns, TierId tier) { return this->ns(ns).tier(tier); }

    DaemonCounters& daemon() { return m_daemon; }
    RemoteCounters& remote() { return m_remote; }
    const RemoteCounters& remote() const { return m_remote; }

    // Seconds since construction.
    double uptime_seconds() const;
    // Seconds since construction or the last `reset`.
    double since_reset_seconds() const;

    // Every non-empty latency histogram, by namespace, op and tier.
    std::vector<LatencySeries> latency() const;
    // Every non-zero request count, by namespace, op and result.
    std::vector<RequestCount> request_counts() const;

    // Zeroes every counter and histogram (STATS with the ZERO flag). Gauges
    // (active connections, the remote queue's size, the remote state) keep
    // their values. Observations racing with the reset may survive it.
    void reset();

    // The STATS reply: {"uptime_s":…, "since_reset_s":…, "daemon":{…},
    // "namespaces":{ns:{tier:{…}}}, "remote":{"state":…, counters…},
    // "latency":[{"op","tier","ns","count","sum_us","p50_us","p99_us","p999_us"}…],
    // "requests":[{"op","ns","result","count"}…]}.
    nlohmann::json to_json() const;

private:
    const std::uint64_t m_serial; // tells this object from any other, ever
    mutable std::shared_mutex m_mutex;
    // Never erased from (ns() hands out references, and threads remember them).
    std::map<std::string, std::unique_ptr<NamespaceCounters>, std::less<>> m_namespaces;
    DaemonCounters m_daemon;
    RemoteCounters m_remote;
    std::int64_t m_started_ns;
    std::atomic<std::int64_t> m_reset_ns;
};

} // namespace pt2cache::daemon::store
