// SPDX-License-Identifier: MIT
//
// Text formatting for the `pt2cache` command: sizes, durations, times, keys
// and the STATS table. Pure functions, no I/O.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

namespace pt2cache::client::cli {

// "0 B", "1023 B", "1.5 KiB", "12.0 MiB", "3.2 GiB".
std::string human_bytes(std::uint64_t bytes);

// "42s", "3m 07s", "2h 03m 07s", "4d 02h 03m".
std::string human_duration(double seconds);

// Milliseconds since the epoch as local time, "2024-05-01 12:34:56".
std::string format_mtime(std::uint64_t mtime_ms);

// `key` with control bytes, DEL, non-ASCII bytes and backslashes written as
// \xNN, so that one key is one printable line.
std::string printable(std::string_view key);

// The STATS reply (docs/operations.md) as text: uptime, daemon counters, then
// one row per namespace and tier with any non-zero counter. Throws
// nlohmann::json::exception when `stats` does not have the documented shape.
std::string render_stats(const nlohmann::json& stats);

// The STATS reply's "latency" rows as a table (namespace, op, tier, count,
// p50/p99/p99.9 in µs); empty when there are none.
std::string render_latency(const nlohmann::json& stats);

} // namespace pt2cache::client::cli
