// SPDX-License-Identifier: MIT
//
// What `pt2cache top` shows, computed from two STATS replies (docs/operations.md,
// "Statistics") taken `elapsed_s` apart: rates are the counters' deltas over
// the interval, levels are the newer reply's. Pure functions, no I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace pt2cache::client::cli {

// A latency summary from the STATS reply's "latency" array, when the daemon
// has one (absent: every field shows "-").
struct Latency {
    double p50_us = 0;
    double p99_us = 0;
};

struct NamespaceRow {
    std::string ns;
    // Per second over the interval; nullopt for the first reply (no interval).
    std::optional<double> gets_per_s;
    std::optional<double> puts_per_s;
    // Hits over lookups in the interval; nullopt when it had no lookup.
    std::optional<double> hit_ratio;
    std::optional<Latency> get_latency;
};

struct Level {
    std::uint64_t bytes = 0;
    std::uint64_t count = 0;
    std::uint64_t capacity = 0;
};

struct DiskQueue {
    std::uint64_t entries = 0;
    std::uint64_t bytes = 0;
    std::uint64_t capacity = 0;
    double oldest_age_s = 0;
};

struct RemoteView {
    std::string state; // connected, connecting, suspended until ... (breaker open)
    std::string endpoint;
    bool read_only = false;
    bool breaker_open = false;
    Level queue; // the write-behind queue
    std::optional<double> errors_per_s;
    // Failed operations (errors, timeouts, protocol errors) over all remote
    // operations in the interval; nullopt when there were none.
    std::optional<double> error_ratio;
};

struct TopFrame {
    std::string version;
    std::string pid;
    double uptime_s = 0;
    std::optional<double> interval_s; // nullopt: the first reply, no rates yet

    std::optional<double> ops_per_s; // lookups and puts, all namespaces
    std::optional<double> hit_ratio;
    std::optional<Latency> get_latency;
    std::optional<Latency> put_latency;
    std::uint64_t clients = 0; // open connections other than top's own

    double compile_saved_s = 0; // since the daemon started
    std::optional<double> compile_saved_per_s;

    std::optional<Level> memory; // nullopt: tier off
    std::optional<Level> disk;
    std::optional<DiskQueue> disk_queue; // nullopt: synchronous disk writes
    std::optional<RemoteView> remote;    // nullopt: no remote tier

    std::vector<NamespaceRow> namespaces; // busiest first, then by name
};

// `before` is the previous reply of the same daemon, or null: a reply from
// another daemon process (pid changed) or with smaller uptime is treated as
// null. Throws nlohmann::json::exception when `now` lacks "namespaces".
TopFrame make_top_frame(const nlohmann::json& now, const nlohmann::json* before, double elapsed_s);

// One line of `key=value` fields for the non-terminal mode, prefixed with
// `clock` (e.g. "18:50:01").
std::string top_plain_line(const TopFrame& frame, const std::string& clock);

// Cells for the views: "-" when absent.
std::string rate_text(const std::optional<double>& per_s);
std::string ratio_text(const std::optional<double>& ratio);
std::string latency_text(const std::optional<Latency>& latency, bool p99);

} // namespace pt2cache::client::cli
