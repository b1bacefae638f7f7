// SPDX-License-Identifier: MIT
//
// `pt2cache ping [--wait DURATION]`: one round trip, or (with --wait) retries
// until the daemon answers or the duration has passed, for scripts and
// readiness probes.
#include <algorithm>
#include <chrono>
#include <optional>
#include <thread>

#include "client/cli/commands.hpp"
#include "client/cli/common.hpp"
#include "client/cli/duration.hpp"

#include <fmt/format.h>

namespace pt2cache::client::cli {

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto k_retry_pause = std::chrono::milliseconds(100);

bool worth_retrying(const Error& error) {
    return error.kind == ErrorKind::unreachable || error.kind == ErrorKind::timeout;
}

} // namespace

int run_ping(const Globals& globals, const std::optional<std::string>& wait) {
    if (!wait) {
        auto client = make_client(globals);
        auto rtt = client.ping();
        if (!rtt) {
            return report(rtt.error());
        }
        fmt::print("{} µs\n", rtt->count());
        return exit_status::ok;
    }
    const auto patience = parse_duration(*wait);
    if (!patience) {
        complain(fmt::format("--wait: {}", patience.error()));
        return exit_status::usage;
    }
    const auto started = Clock::now();
    const auto deadline = started + *patience;
    for (unsigned attempt = 1;; ++attempt) {
        // Each attempt ends by the deadline (and by --timeout when shorter).
        Globals bounded = globals;
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        const auto cap = std::chrono::milliseconds(globals.timeout_ms.value_or(10'000));
        bounded.timeout_ms =
            static_cast<unsigned>(std::clamp(left, std::chrono::milliseconds(1), cap).count());
        auto client = make_client(bounded);
        auto rtt = client.ping();
        if (rtt) {
            fmt::print("{} µs\n", rtt->count());
            return exit_status::ok;
        }
        if (!worth_retrying(rtt.error())) {
            return report(rtt.error());
        }
        // The last attempt is made at the deadline, never before it.
        const auto now = Clock::now();
        if (now >= deadline) {
            const auto waited = std::chrono::duration<double>(Clock::now() - started).count();
            complain(fmt::format(
                "pt2cached did not answer within {} ({} attempts in {:.1f} s); last error: {}",
                *wait, attempt, waited, rtt.error().message));
            return exit_status::unreachable;
        }
        std::this_thread::sleep_for(std::min<Clock::duration>(k_retry_pause, deadline - now));
    }
}

} // namespace pt2cache::client::cli
