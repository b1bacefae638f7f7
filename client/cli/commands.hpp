// SPDX-License-Identifier: MIT
//
// The subcommands of `pt2cache`. Each returns the process exit status and
// reports failures on stderr as one line starting with "pt2cache: ".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pt2cache::client::cli {

namespace exit_status {
inline constexpr int ok = 0;
inline constexpr int miss = 1;        // not found, not stored
inline constexpr int usage = 2;       // bad arguments, unreadable input, bad configuration
inline constexpr int unreachable = 3; // no daemon, or it timed out
inline constexpr int server = 4;      // the daemon answered an error, or nonsense
} // namespace exit_status

// The --help footer and docs/operations.md text for the statuses above.
extern const char* const k_exit_status_help;

// Options shared by every subcommand.
struct Globals {
    std::string socket;                 // --socket; empty: as the daemon would choose
    std::optional<unsigned> timeout_ms; // --timeout
    std::optional<std::string> config;  // --config, for finding the socket
};

struct KeyArgs {
    std::string ns;
    std::string key;
};

// ping.cpp: `wait` is --wait's DURATION, nullopt for a single try.
int run_ping(const Globals& globals, const std::optional<std::string>& wait);
int run_stats(const Globals& globals, bool json);
int run_get(const Globals& globals, const KeyArgs& args, const std::string& output);
int run_put(const Globals& globals, const KeyArgs& args, const std::string& input,
            std::uint64_t ttl_s, bool only_if_absent);
int run_rm(const Globals& globals, const KeyArgs& args);
int run_ls(const Globals& globals, const std::string& ns, bool long_format, std::uint64_t limit);
int run_clear(const Globals& globals, const std::string& ns, bool yes);
int run_config(const Globals& globals);

// metrics_commands.cpp: `pt2cache metrics`, and `stats --zero` (with `json`,
// prints the counts from just before the reset).
int run_metrics(const Globals& globals);
int run_stats_zero(const Globals& globals, bool json);

// cxx_commands.cpp: `args` is a compiler command line (optionally starting
// with the compiler's name).
int run_cxx_explain(const Globals& globals, const std::vector<std::string>& args);

// autotune_commands.cpp
int run_bundle_ls(const Globals& globals);
int run_bundle_show(const Globals& globals, const std::string& key);
int run_autotune_show(const Globals& globals, const std::string& key);

} // namespace pt2cache::client::cli
