// What every connection shares: configuration, counters, the store, the
// worker pool for blocking work, and the daemon's lifecycle flags.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sys/types.h>

#include "config/config.hpp"
#include "daemon/asio.hpp"
#include "daemon/bundles.hpp"
#include "daemon/compile_stats.hpp"
#include "daemon/file_hashes.hpp"
#include "daemon/inflight_budget.hpp"
#include "daemon/store/read_budget.hpp"
#include "daemon/store/stats.hpp"
#include "daemon/store/store.hpp"
#include "proto/frame.hpp"

namespace pt2cache::daemon {

class Connection;

struct Context {
    config::Config config;
    store::Stats stats;
    std::unique_ptr<store::Store> store;
    // Open autotune bundles; server.cpp sets the idle timeout and sweeps it.
    BundleRegistry bundles{std::chrono::seconds(600)};
    asio::thread_pool* blocking = nullptr;
    asio::thread_pool* hashing = nullptr; // HASH_FILES' (file_hashes.cpp)
    // HASH_FILES' cache and pt2cache-cxx's counters (docs/cxx.md).
    FileHashCache file_hashes;
    CompileCounters compile;

    // Read by sessions for each frame; changed by SIGHUP.
    std::atomic<std::uint64_t> max_value{proto::k_default_max_value};
    std::atomic<bool> stopping{false};
    std::atomic<std::int64_t> last_activity_ms{0};
    // Request bytes being received, all connections (daemon.max_inflight_bytes).
    InflightBudget inflight;
    // Reply bytes queued for clients that have not read them yet, all
    // connections, and daemon.max_reply_bytes (Connection::output_limit).
    std::atomic<std::uint64_t> queued_replies{0};
    std::atomic<std::uint64_t> max_reply_bytes{512ull << 20};
    // Large values read from disk that replies still hold; its limit is
    // daemon.max_reply_bytes too (store/read_budget.hpp). The disk tier
    // shares it.
    std::shared_ptr<store::ReadBudget> reads = std::make_shared<store::ReadBudget>(512ull << 20);

    // The native protocol's limits: max_value within what a frame carries.
    proto::Limits limits() const {
        return proto::Limits{std::min(max_value.load(), proto::k_max_frame_value)};
    }
    void touch();
};

// Live connections, so that shutdown can stop their reads, and the limits
// on how many there may be.
class ConnectionRegistry {
public:
    enum class Admission { admitted, over_total, over_process };

    // Records `connection` from client process `pid` unless that would pass
    // `max_total` connections, or `max_per_process` from that process.
    Admission add(const std::shared_ptr<Connection>& connection, pid_t pid, unsigned max_total,
                  unsigned max_per_process);
    void remove(const Connection* connection);
    // Stops reading on every connection: requests already received finish.
    void shutdown_reads();
    std::size_t size() const;

private:
    struct Entry {
        std::weak_ptr<Connection> connection;
        pid_t pid;
    };
    mutable std::mutex m_mutex;
    std::map<const Connection*, Entry> m_connections;
    std::map<pid_t, unsigned> m_per_process;
};

} // namespace pt2cache::daemon
