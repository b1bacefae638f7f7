// SPDX-License-Identifier: MIT
//
// systemd's service watchdog (WatchdogSec= in pt2cached.service): while
// sd_watchdog_enabled() says the service manager wants them, a timer on the
// first I/O loop sends WATCHDOG=1 every half interval, provided that every
// other I/O loop ran the heartbeat posted to it at the previous ping. The
// pings come from the loops that serve the clients, so a daemon with any I/O
// thread wedged stops pinging and systemd restarts it.
//
// Debug builds (NDEBUG undefined: buildtype debug or debugoptimized, the
// default) also honour PT2CACHED_DEBUG_STALL_LOOP="AFTER,FOR" (seconds,
// decimals allowed): AFTER seconds after start every I/O loop blocks for FOR
// seconds (with ",LOOP": only I/O loop number LOOP, counted from 0), so that a test can watch the
// pings stop (docs/operations.md). Release builds ignore the variable, with a warning.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "daemon/asio.hpp"

namespace pt2cache::daemon {

// The stall PT2CACHED_DEBUG_STALL_LOOP asks for.
struct LoopStall {
    std::chrono::milliseconds after{0};
    std::chrono::milliseconds duration{0};
    std::optional<unsigned> only_loop; // one I/O loop (0 = the first), else all
};

// "AFTER,FOR" in seconds (each 0 to 3600, decimals allowed), optionally
// ",LOOP" (an I/O loop's index, 0 to 255), else nullopt.
std::optional<LoopStall> parse_loop_stall(std::string_view text);

class Watchdog {
public:
    // `io` runs the timers; `others` are the other I/O loops, each run by one
    // thread (all must outlive the watchdog's handlers).
    Watchdog(asio::io_context& io, std::vector<asio::io_context*> others);

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
    std::vector<asio::io_context*> m_others;
    // The last ping round each other loop answered.
    std::unique_ptr<std::atomic<std::uint64_t>[]> m_answered;
    std::uint64_t m_round = 0;
    asio::steady_timer m_timer;
    asio::steady_timer m_stall_timer;
    std::chrono::microseconds m_period{0};
};

} // namespace pt2cache::daemon
