// SPDX-License-Identifier: MIT
#include "daemon/store/remote/circuit_breaker.hpp"

#include <algorithm>

namespace pt2cache::daemon::store {

std::chrono::milliseconds CircuitBreaker::cooldown(unsigned trips) const {
    auto result = m_options.base_cooldown;
    for (unsigned i = 0; i < trips && result < m_options.max_cooldown; ++i) {
        result *= 2;
    }
    return std::min(result, m_options.max_cooldown);
}

CircuitBreaker::Clock::time_point CircuitBreaker::open(Clock::time_point now) {
    m_state.open_until = now + cooldown(m_state.trips);
    m_state.state = State::open;
    ++m_state.trips;
    return m_state.open_until;
}

CircuitBreaker::Admission CircuitBreaker::admit(Clock::time_point now) {
    std::lock_guard lock(m_mutex);
    switch (m_state.state) {
    case State::closed:
        return Admission::allowed;
    case State::open:
        if (now < m_state.open_until) {
            return Admission::refused;
        }
        m_state.state = State::half_open;
        return Admission::probe;
    case State::half_open:
        break;
    }
    return Admission::refused;
}

void CircuitBreaker::success(Admission) {
    std::lock_guard lock(m_mutex);
    // Any answer proves Redis reachable, even one to a request admitted
    // before the breaker opened.
    m_state.state = State::closed;
    m_state.consecutive_failures = 0;
    m_state.trips = 0;
}

std::optional<CircuitBreaker::Clock::time_point> CircuitBreaker::failure(Admission admission,
                                                                         Clock::time_point now) {
    std::lock_guard lock(m_mutex);
    switch (m_state.state) {
    case State::closed:
        if (++m_state.consecutive_failures >= m_options.failure_threshold) {
            return open(now);
        }
        return std::nullopt;
    case State::half_open:
        if (admission == Admission::probe) {
            return open(now);
        }
        return std::nullopt;
    case State::open:
        break;
    }
    return std::nullopt;
}

void CircuitBreaker::release(Admission admission) {
    std::lock_guard lock(m_mutex);
    if (admission == Admission::probe && m_state.state == State::half_open) {
        m_state.state = State::open; // open_until has passed: the next admit probes
    }
}

CircuitBreaker::Snapshot CircuitBreaker::snapshot() const {
    std::lock_guard lock(m_mutex);
    return m_state;
}

} // namespace pt2cache::daemon::store
