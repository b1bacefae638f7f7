// When the request a worker thread is running for arrived. offload() sets it
// around each job it posts, so that a tier whose requests have a deadline
// (the remote tier) counts it from the request's arrival, not from when a
// worker got to it: a request that waited for a worker past its deadline is
// answered locally at once instead of starting a round trip nobody waits for.
#pragma once

#include <algorithm>
#include <chrono>
#include <optional>

namespace pt2cache::daemon::store {

class RequestArrival {
public:
    using Clock = std::chrono::steady_clock;

    explicit RequestArrival(Clock::time_point at)
        : m_previous(s_current) {
        s_current = at;
    }
    ~RequestArrival() { s_current = m_previous; }
    RequestArrival(const RequestArrival&) = delete;
    RequestArrival& operator=(const RequestArrival&) = delete;

    // The arrival of the job this thread runs; nullopt outside one (the
    // remote tier's own threads, tests).
    static std::optional<Clock::time_point> current() { return s_current; }

    // now + `timeout`, or for a request's job its arrival + `timeout` when
    // sooner (already past for one that waited longer).
    static Clock::time_point deadline_after(Clock::duration timeout) {
        const auto own = Clock::now() + timeout;
        return s_current ? std::min(own, *s_current + timeout) : own;
    }

private:
    inline static thread_local std::optional<Clock::time_point> s_current;
    std::optional<Clock::time_point> m_previous;
};

} // namespace pt2cache::daemon::store
