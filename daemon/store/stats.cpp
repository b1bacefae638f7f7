// SPDX-License-Identifier: MIT
#include "daemon/store/stats.hpp"

#include <chrono>
#include <ctime>
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

Stats::Stats()
    : m_started_ns(steady_ns()) {}

NamespaceCounters& Stats::ns(std::string_view ns) {
    {
        std::shared_lock lock(m_mutex);
        if (auto it = m_namespaces.find(ns); it != m_namespaces.end()) {
            return *it->second;
        }
    }
    // First sight of `ns`: allocate outside the lock, insert under it. A racing
    // thread may have inserted meanwhile; `try_emplace` then keeps its counters.
    auto fresh = std::make_unique<NamespaceCounters>();
    std::string name(ns);
    std::unique_lock lock(m_mutex);
    auto [it, inserted] = m_namespaces.try_emplace(std::move(name), std::move(fresh));
    return *it->second;
}

double Stats::uptime_seconds() const {
    return static_cast<double>(steady_ns() - m_started_ns) / 1e9;
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
    return {
        {"uptime_s", uptime_seconds()},
        {"daemon",
         {
             {"connections_accepted", load(m_daemon.connections_accepted)},
             {"connections_active", load(m_daemon.connections_active)},
             {"peers_refused", load(m_daemon.peers_refused)},
             {"protocol_errors", load(m_daemon.protocol_errors)},
             {"requests", load(m_daemon.requests)},
             {"connections_over_limit", load(m_daemon.connections_over_limit)},
             {"inflight_refused", load(m_daemon.inflight_refused)},
         }},
        {"namespaces", std::move(namespaces)},
        {"remote", remote_json(m_remote, std::chrono::duration_cast<std::chrono::milliseconds>(
                                             std::chrono::system_clock::now().time_since_epoch())
                                             .count())},
    };
}

} // namespace pt2cache::daemon::store
