// SPDX-License-Identifier: MIT
//
// `pt2cache top`: a live view of the daemon, refreshed every --interval.
// Full screen (ncurses) on a terminal; one `key=value` line per refresh when
// stdout is not a terminal or with --plain (docs/operations.md).
#pragma once

#include <cstdint>

#include "client/cli/commands.hpp"

namespace CLI {
class App;
}

namespace pt2cache::client::cli {

struct TopArgs {
    double interval_s = 1.0;
    std::uint64_t iterations = 0; // refreshes before exiting; 0: until q or Ctrl-C
    bool plain = false;
};

// Declares the `top` subcommand and its options on `app`.
CLI::App* add_top_command(CLI::App& app, TopArgs& args);

int run_top(const Globals& globals, const TopArgs& args);

} // namespace pt2cache::client::cli
