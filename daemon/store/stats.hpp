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

struct NamespaceCounters {
    TierCounters tiers[k_tier_count];
    TierCounters& tier(TierId id) { return tiers[static_cast<int>(id)]; }
};

struct DaemonCounters {
    std::atomic<std::uint64_t> connections_accepted{0};
    std::atomic<std::uint64_t> connections_active{0};
    std::atomic<std::uint64_t> peers_refused{0};
    std::atomic<std::uint64_t> protocol_errors{0};
    std::atomic<std::uint64_t> requests{0};
};

class Stats {
public:
    Stats();

    // Counters of `ns`, created on first use; the reference stays valid for
    // the lifetime of this object.
    NamespaceCounters& ns(std::string_view ns);
    TierCounters& tier(std::string_view ns, TierId tier) { return this->ns(ns).tier(tier); }

    DaemonCounters& daemon() { return m_daemon; }

    // Seconds since construction.
    double uptime_seconds() const;

    // The STATS reply: {"uptime_s":…, "daemon":{…}, "namespaces":{ns:{tier:{…}}}}.
    nlohmann::json to_json() const;

private:
    mutable std::shared_mutex m_mutex;
    std::map<std::string, std::unique_ptr<NamespaceCounters>, std::less<>> m_namespaces;
    DaemonCounters m_daemon;
    std::int64_t m_started_ns;
};

} // namespace pt2cache::daemon::store
