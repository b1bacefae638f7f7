// SPDX-License-Identifier: MIT
// Single flight: concurrent calls for one key run the work once; the others
// wait for its result (bounded) instead of repeating it. The store uses it so
// that N concurrent gets of one key missing locally send one GET to Redis.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>

namespace pt2cache::daemon::store {

template <typename Result>
class SingleFlight {
public:
    using Clock = std::chrono::steady_clock;

    struct Outcome {
        // The result; nullopt when this caller waited for another one's call
        // until `wait_deadline` in vain.
        std::optional<Result> result;
        bool leader = false; // this caller ran `work`
    };

    // Runs `work()` unless a call for `key` is in progress; then waits for
    // that call's result until `wait_deadline`. `work` must not throw.
    template <typename Work>
    Outcome run(const std::string& key, Clock::time_point wait_deadline, Work&& work) {
        std::shared_ptr<Flight> flight;
        {
            std::unique_lock lock(m_mutex);
            if (auto it = m_flights.find(key); it != m_flights.end()) {
                flight = it->second;
                const bool done = m_done.wait_until(lock, wait_deadline,
                                                    [&] { return flight->result.has_value(); });
                if (!done) {
                    return Outcome{std::nullopt, false};
                }
                return Outcome{flight->result, false};
            }
            flight = std::make_shared<Flight>();
            m_flights.emplace(key, flight);
        }
        Result result = std::forward<Work>(work)();
        {
            std::lock_guard lock(m_mutex);
            flight->result = result;
            if (auto it = m_flights.find(key); it != m_flights.end() && it->second == flight) {
                m_flights.erase(it);
            }
        }
        m_done.notify_all();
        return Outcome{std::move(result), true};
    }

    // Later calls for `key` run work of their own instead of waiting for
    // the call in progress (whose callers still get its result): a result
    // that a write made stale must not reach a call begun after the write.
    void detach(const std::string& key) {
        std::lock_guard lock(m_mutex);
        m_flights.erase(key);
    }

    // Calls in progress (for tests).
    std::size_t in_flight() const {
        std::lock_guard lock(m_mutex);
        return m_flights.size();
    }

private:
    struct Flight {
        std::optional<Result> result;
    };

    mutable std::mutex m_mutex;
    std::condition_variable m_done;
    std::unordered_map<std::string, std::shared_ptr<Flight>> m_flights;
};

} // namespace pt2cache::daemon::store
