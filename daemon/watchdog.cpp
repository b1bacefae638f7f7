// SPDX-License-Identifier: MIT
#include "daemon/watchdog.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "daemon/log.hpp"

#include <systemd/sd-daemon.h>

namespace pt2cache::daemon {

namespace {

constexpr const char* k_stall_variable = "PT2CACHED_DEBUG_STALL_LOOP";
constexpr double k_max_stall_s = 3600;

#ifdef NDEBUG
constexpr bool k_debug_hooks = false;
#else
constexpr bool k_debug_hooks = true;
#endif

std::optional<std::chrono::milliseconds> parse_seconds(const std::string& text) {
    if (text.empty()) {
        return std::nullopt;
    }
    char* end = nullptr;
    const double seconds = std::strtod(text.c_str(), &end);
    if (end != text.c_str() + text.size() || !std::isfinite(seconds) || seconds < 0 ||
        seconds > k_max_stall_s) {
        return std::nullopt;
    }
    return std::chrono::milliseconds(static_cast<std::int64_t>(std::llround(seconds * 1000)));
}

} // namespace

std::optional<LoopStall> parse_loop_stall(std::string_view text) {
    const auto comma = text.find(',');
    if (comma == std::string_view::npos) {
        return std::nullopt;
    }
    const auto after = parse_seconds(std::string(text.substr(0, comma)));
    const auto duration = parse_seconds(std::string(text.substr(comma + 1)));
    if (!after || !duration) {
        return std::nullopt;
    }
    return LoopStall{*after, *duration};
}

Watchdog::Watchdog(asio::io_context& io, unsigned io_threads)
    : m_io(io)
    , m_io_threads(io_threads == 0 ? 1 : io_threads)
    , m_timer(io)
    , m_stall_timer(io) {}

void Watchdog::start() {
    auto& log = logger("daemon");
    std::uint64_t usec = 0;
    const int enabled = ::sd_watchdog_enabled(0, &usec);
    if (enabled < 0) {
        log.warn("systemd watchdog: cannot read WATCHDOG_USEC/WATCHDOG_PID: {}",
                 std::strerror(-enabled));
    } else if (enabled > 0 && usec > 0) {
        m_period = std::chrono::microseconds(std::max<std::uint64_t>(usec / 2, 1));
        log.info("systemd watchdog: {} ms, pinging every {} ms", usec / 1000,
                 m_period.count() / 1000);
        ::sd_notify(0, "WATCHDOG=1");
        arm();
    }

    const char* stall_text = std::getenv(k_stall_variable);
    if (stall_text == nullptr) {
        return;
    }
    if (!k_debug_hooks) {
        log.warn("{} is ignored: this pt2cached is a release build", k_stall_variable);
        return;
    }
    const auto stall = parse_loop_stall(stall_text);
    if (!stall) {
        log.warn("{}=\"{}\" is ignored: expected \"AFTER,FOR\" in seconds (0 to 3600)",
                 k_stall_variable, stall_text);
        return;
    }
    log.warn("{}: the I/O loop will stall for {} ms after {} ms (a debug hook)", k_stall_variable,
             stall->duration.count(), stall->after.count());
    arm_stall(*stall);
}

void Watchdog::stop() {
    m_timer.cancel();
    m_stall_timer.cancel();
}

void Watchdog::arm() {
    m_timer.expires_after(m_period);
    m_timer.async_wait([this](const boost::system::error_code& ec) {
        if (ec) {
            return;
        }
        ::sd_notify(0, "WATCHDOG=1");
        arm();
    });
}

void Watchdog::arm_stall(LoopStall stall) {
    m_stall_timer.expires_after(stall.after);
    m_stall_timer.async_wait([this, stall](const boost::system::error_code& ec) {
        if (ec) {
            return;
        }
        logger("daemon").warn("{}: stalling {} I/O threads for {} ms", k_stall_variable,
                              m_io_threads, stall.duration.count());
        // This handler blocks its thread; one more handler per other thread
        // blocks the rest (a busy thread takes its handler when it is free).
        const auto until = std::chrono::steady_clock::now() + stall.duration;
        for (unsigned i = 1; i < m_io_threads; ++i) {
            asio::post(m_io, [until] { std::this_thread::sleep_until(until); });
        }
        std::this_thread::sleep_until(until);
    });
}

} // namespace pt2cache::daemon
