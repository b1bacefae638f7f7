// SPDX-License-Identifier: MIT
// A circuit breaker for the remote tier: after `failure_threshold` consecutive
// connectivity failures it opens (the tier is suspended) for a cool-down that
// doubles with every failed probe, up to `max_cooldown`. When the cool-down
// has passed, one request goes through as a probe (half open); its success
// closes the breaker, its failure opens it again. Thread-safe.
#pragma once

#include <chrono>
#include <mutex>
#include <optional>

namespace pt2cache::daemon::store {

struct BreakerOptions {
    unsigned failure_threshold = 3;
    std::chrono::milliseconds base_cooldown{500};
    std::chrono::milliseconds max_cooldown{15000};
};

class CircuitBreaker {
public:
    using Clock = std::chrono::steady_clock;

    enum class State { closed, open, half_open };
    enum class Admission {
        allowed, // closed: go ahead
        probe,   // the one request that tests a suspended Redis
        refused, // suspended, or a probe is already out: answer locally
    };

    struct Snapshot {
        State state = State::closed;
        Clock::time_point open_until{}; // meaningful when open
        unsigned consecutive_failures = 0;
        unsigned trips = 0; // consecutive openings without a success between
    };

    explicit CircuitBreaker(BreakerOptions options = {})
        : m_options(options) {}

    // Whether a request may go to Redis now. Every admitted request must end
    // with `success`, `failure` or `release`.
    Admission admit(Clock::time_point now = Clock::now());

    // Redis answered: closes the breaker.
    void success(Admission admission);

    // A connectivity failure. Returns the end of the suspension when this
    // failure opened the breaker. Failures of requests admitted before it
    // opened do not extend a suspension.
    std::optional<Clock::time_point> failure(Admission admission,
                                             Clock::time_point now = Clock::now());

    // An admitted request that never reached Redis (nothing to send after
    // all): a probe slot is handed to the next request.
    void release(Admission admission);

    Snapshot snapshot() const;

    // The cool-down after `trips` earlier consecutive openings.
    std::chrono::milliseconds cooldown(unsigned trips) const;

private:
    Clock::time_point open(Clock::time_point now);

    const BreakerOptions m_options;
    mutable std::mutex m_mutex;
    Snapshot m_state;
};

} // namespace pt2cache::daemon::store
