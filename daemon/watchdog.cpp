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
    auto rest = text.substr(comma + 1);
    std::optional<unsigned> only_loop;
    if (const auto second = rest.find(','); second != std::string_view::npos) {
        const auto loop = rest.substr(second + 1);
        rest = rest.substr(0, second);
        if (loop.empty() || loop.size() > 3 ||
            loop.find_first_not_of("0123456789") != std::string_view::npos) {
            return std::nullopt;
        }
        const unsigned index = static_cast<unsigned>(std::stoul(std::string(loop)));
        if (index > 255) {
            return std::nullopt;
        }
        only_loop = index;
    }
    const auto after = parse_seconds(std::string(text.substr(0, comma)));
    const auto duration = parse_seconds(std::string(rest));
    if (!after || !duration) {
        return std::nullopt;
    }
    return LoopStall{*after, *duration, only_loop};
}

Watchdog::Watchdog(asio::io_context& io, std::vector<asio::io_context*> others)
    : m_io(io)
    , m_others(std::move(others))
    , m_answered(std::make_unique<std::atomic<std::uint64_t>[]>(m_others.size()))
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
        log.warn("{}=\"{}\" is ignored: expected \"AFTER,FOR[,LOOP]\" (seconds, 0 to 3600)",
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
        // Alive: this loop (it runs this handler) and every other loop that
        // ran the heartbeat of the previous round.
        const auto round = ++m_round;
        bool alive = true;
        for (std::size_t i = 0; i < m_others.size(); ++i) {
            if (m_answered[i].load(std::memory_order_acquire) + 1 < round) {
                alive = false;
            }
        }
        if (alive) {
            ::sd_notify(0, "WATCHDOG=1");
        }
        for (std::size_t i = 0; i < m_others.size(); ++i) {
            asio::post(*m_others[i],
                       [this, i, round] { m_answered[i].store(round, std::memory_order_release); });
        }
        arm();
    });
}

void Watchdog::arm_stall(LoopStall stall) {
    m_stall_timer.expires_after(stall.after);
    m_stall_timer.async_wait([this, stall](const boost::system::error_code& ec) {
        if (ec) {
            return;
        }
        const auto until = std::chrono::steady_clock::now() + stall.duration;
        const auto sleep = [until] { std::this_thread::sleep_until(until); };
        if (stall.only_loop) {
            logger("daemon").warn("{}: stalling I/O loop {} for {} ms", k_stall_variable,
                                  *stall.only_loop, stall.duration.count());
            if (*stall.only_loop == 0) {
                sleep();
            } else if (*stall.only_loop <= m_others.size()) {
                asio::post(*m_others[*stall.only_loop - 1], sleep);
            }
            return;
        }
        logger("daemon").warn("{}: stalling {} I/O loops for {} ms", k_stall_variable,
                              m_others.size() + 1, stall.duration.count());
        // This handler blocks its loop; one more handler per other loop
        // blocks the rest (a busy loop takes its handler when it is free).
        for (auto* loop : m_others) {
            asio::post(*loop, sleep);
        }
        sleep();
    });
}

} // namespace pt2cache::daemon
