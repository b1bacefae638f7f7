// SPDX-License-Identifier: MIT
#include "daemon/store/log.hpp"

#include <chrono>
#include <memory>

#include <spdlog/spdlog.h>

namespace pt2cache::daemon::store {

spdlog::logger& logger() {
    if (const auto registered = spdlog::get("store")) {
        // The registry keeps it alive for the rest of the process.
        return *registered;
    }
    static const std::shared_ptr<spdlog::logger> fallback =
        spdlog::default_logger()->clone("store");
    return *fallback;
}

spdlog::logger& remote_logger() {
    if (const auto registered = spdlog::get("remote")) {
        return *registered;
    }
    return logger();
}

std::optional<std::uint64_t> LogThrottle::take() {
    const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::steady_clock::now().time_since_epoch())
                         .count() +
                     m_interval_ms; // never 0 or less: the first line is always logged
    auto last = m_last_ms.load(std::memory_order_relaxed);
    if (now - last < m_interval_ms ||
        !m_last_ms.compare_exchange_strong(last, now, std::memory_order_relaxed)) {
        m_suppressed.fetch_add(1, std::memory_order_relaxed);
        return std::nullopt;
    }
    return m_suppressed.exchange(0, std::memory_order_relaxed);
}

} // namespace pt2cache::daemon::store
