// SPDX-License-Identifier: MIT
#include <atomic>
#include <optional>
#include <thread>
#include <vector>

#include "daemon/store/single_flight.hpp"

#include <catch2/catch.hpp>

using namespace pt2cache::daemon::store;
using namespace std::chrono_literals;

TEST_CASE("single flight runs concurrent calls of one key once",
          "[store][single_flight][concurrency]") {
    SingleFlight<int> flights;
    std::atomic<int> runs{0};
    std::atomic<int> leaders{0};
    std::atomic<int> sum{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < 8; ++i) {
        threads.emplace_back([&] {
            auto outcome = flights.run("k", std::chrono::steady_clock::now() + 5s, [&] {
                ++runs;
                std::this_thread::sleep_for(200ms);
                return 42;
            });
            leaders += outcome.leader ? 1 : 0;
            sum += outcome.result.value_or(0);
        });
    }
    for (auto& thread : threads) {
        thread.join();
    }
    CHECK(runs == 1);
    CHECK(leaders == 1);
    CHECK(sum == 8 * 42);
    CHECK(flights.in_flight() == 0);
}

TEST_CASE("single flight: other keys and later calls run on their own", "[store][single_flight]") {
    SingleFlight<int> flights;
    int runs = 0;
    const auto deadline = std::chrono::steady_clock::now() + 1s;
    CHECK(flights.run("a", deadline, [&] { return ++runs; }).result == 1);
    CHECK(flights.run("a", deadline, [&] { return ++runs; }).result == 2);
    CHECK(flights.run("b", deadline, [&] { return ++runs; }).result == 3);
}

TEST_CASE("single flight waits are bounded", "[store][single_flight][concurrency]") {
    SingleFlight<int> flights;
    std::thread leader([&] {
        flights.run("k", std::chrono::steady_clock::now() + 5s, [] {
            std::this_thread::sleep_for(500ms);
            return 1;
        });
    });
    while (flights.in_flight() == 0) {
        std::this_thread::yield();
    }
    const auto started = std::chrono::steady_clock::now();
    auto outcome = flights.run("k", started + 50ms, [] { return 2; });
    CHECK_FALSE(outcome.leader);
    CHECK_FALSE(outcome.result);
    CHECK(std::chrono::steady_clock::now() - started < 400ms);
    leader.join();
}

TEST_CASE("single flight: a call after detach runs its own work, and the detached call ends "
          "cleanly",
          "[store][single_flight][concurrency]") {
    SingleFlight<int> flights;
    std::atomic<bool> release{false};
    std::optional<int> first;
    std::thread leader([&] {
        first = flights
                    .run("k", std::chrono::steady_clock::now() + 5s,
                         [&] {
                             while (!release) {
                                 std::this_thread::sleep_for(1ms);
                             }
                             return 1; // stale: written over while it ran
                         })
                    .result;
    });
    while (flights.in_flight() == 0) {
        std::this_thread::yield();
    }
    flights.detach("k");
    CHECK(flights.in_flight() == 0);
    std::atomic<bool> second_started{false};
    SingleFlight<int>::Outcome second_outcome;
    std::thread second([&] {
        second_outcome = flights.run("k", std::chrono::steady_clock::now() + 5s, [&] {
            second_started = true;
            std::this_thread::sleep_for(200ms);
            return 2;
        });
    });
    while (!second_started) {
        std::this_thread::yield();
    }
    release = true; // the detached call ends while the second runs
    leader.join();
    CHECK(first == 1);
    CHECK(flights.in_flight() == 1); // the second's, not erased by the first's end
    second.join();
    CHECK(second_outcome.leader); // Catch2 checks stay on this thread
    CHECK(second_outcome.result == 2);
    CHECK(flights.in_flight() == 0);
}
