// The daemon's lifecycle: builds the store, listens, serves on a few Asio
// threads, and stops on SIGTERM/SIGINT (finishing requests in flight),
// reloads on SIGHUP, and optionally exits when idle.
#pragma once

#include "config/config.hpp"

namespace pt2cache::daemon {

// Runs the daemon until it is told to stop; returns the process exit code.
// Throws Fatal for startup failures.
int run_server(config::Loaded loaded, config::LoadOptions reload_options);

} // namespace pt2cache::daemon
