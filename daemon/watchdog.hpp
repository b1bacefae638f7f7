// SPDX-License-Identifier: MIT
//
// systemd's service watchdog (WatchdogSec= in pt2cached.service): while
// sd_watchdog_enabled() says the service manager wants them, a timer on the
// I/O loop sends WATCHDOG=1 every half interval. The pings come from the same
// io_context that serves the clients, so a loop whose every I/O thread is
// wedged stops pinging and systemd restarts the daemon.
//
// Debug builds (NDEBUG undefined: buildtype debug or debugoptimized, the
// default) also honour PT2CACHED_DEBUG_STALL_LOOP="AFTER,FOR" (seconds,
// decimals allowed): AFTER seconds after start every I/O thread blocks for FOR
// seconds, so that a test can watch the pings stop (docs/operations.md).
// Release builds ignore the variable, with a warning.
#pragma once

#include <chrono>
#include <optional>
#include <string_view>

#include "daemon/asio.hpp"

namespace pt2cache::daemon {

// The stall PT2CACHED_DEBUG_STALL_LOOP asks for.
struct LoopStall {
    std::chrono::milliseconds after{0};
    std::chrono::milliseconds duration{0};
};

// "AFTER,FOR" in seconds (each 0 to 3600, decimals allowed), else nullopt.
std::optional<LoopStall> parse_loop_stall(std::string_view text);

class Watchdog {
public:
    // `io_threads`: how many threads run `io` (the stall blocks them all).
    Watchdog(asio::io_context& io, unsigned io_threads);

    // Starts pinging when systemd asked for it (logging the interval), and
    // arms the debug stall when one is asked for and compiled in.
    void start();
    // Cancels the timers, so that they do not keep the loop alive.
    void stop();

    // The ping period: half of WATCHDOG_USEC; zero while not enabled.
    std::chrono::microseconds period() const { return m_period; }

private:
    void arm();
    void arm_stall(LoopStall stall);

    asio::io_context& m_io;
    unsigned m_io_threads;
    asio::steady_timer m_timer;
    asio::steady_timer m_stall_timer;
    std::chrono::microseconds m_period{0};
};

} // namespace pt2cache::daemon
