// SPDX-License-Identifier: MIT
// The storage layer's spdlog logger ("store").
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

#include <fmt/format.h>
#include <spdlog/logger.h>

namespace pt2cache::daemon::store {

// The logger registered as "store" (the daemon sets it up with its sink and
// level); until one is registered, an unregistered clone of the default
// logger, so that the daemon's own registration is never pre-empted.
spdlog::logger& logger();

// The remote tier's logger: "remote" when the daemon registered it, else logger().
spdlog::logger& remote_logger();

// At most one log line per interval for a message a peer can repeat at will
// (a full Redis refusing every write, forged entries). Thread-safe.
class LogThrottle {
public:
    explicit LogThrottle(std::int64_t interval_ms = 10'000)
        : m_interval_ms(interval_ms) {}

    // The number of lines suppressed since the last one when this one may be
    // logged; std::nullopt (and counted) when it is to be suppressed.
    std::optional<std::uint64_t> take();

private:
    const std::int64_t m_interval_ms;
    std::atomic<std::int64_t> m_last_ms{0};
    std::atomic<std::uint64_t> m_suppressed{0};
};

// What a throttled line adds: "" when none was left out, else " (N more
// such lines left out)".
inline std::string left_out_note(std::uint64_t left_out) {
    return left_out == 0 ? std::string() : fmt::format(" ({} more such lines left out)", left_out);
}

} // namespace pt2cache::daemon::store
