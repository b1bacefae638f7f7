// SPDX-License-Identifier: MIT
//
// What one latency observation costs a request (daemon/latency_recorder.hpp):
// a steady_clock read plus a namespace's `record` (a result counter, a bucket
// and the sum, relaxed fetch_adds), on 1 thread, and on T threads recording
// into the same histogram (the worst case: every I/O thread serving the same
// op, tier and namespace).
//
//   build/tests/bench/latency_bench [ITERATIONS]     # default 20,000,000
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "daemon/store/stats.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using pt2cache::daemon::store::LatencyOp;
using pt2cache::daemon::store::LatencyTier;
using pt2cache::daemon::store::NamespaceCounters;
using pt2cache::daemon::store::RequestResult;

std::int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
        .count();
}

// ns per observation with `threads` threads sharing `counters`.
double run(NamespaceCounters& counters, int threads, long iterations) {
    std::atomic<bool> go{false};
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
        pool.emplace_back([&] {
            while (!go) {
                std::this_thread::yield();
            }
            std::int64_t mark = now_ns();
            for (long i = 0; i < iterations; ++i) {
                const auto end = now_ns();
                counters.record(LatencyOp::get, LatencyTier::memory, RequestResult::ok,
                                static_cast<std::uint64_t>(end - mark) + 20'000);
                mark = end;
            }
        });
    }
    const auto started = Clock::now();
    go = true;
    for (auto& thread : pool) {
        thread.join();
    }
    const auto elapsed = std::chrono::duration<double, std::nano>(Clock::now() - started).count();
    return elapsed / static_cast<double>(iterations); // per observation, per thread
}

double clock_only(long iterations) {
    const auto started = Clock::now();
    std::int64_t sink = 0;
    for (long i = 0; i < iterations; ++i) {
        sink += now_ns();
    }
    const auto elapsed = std::chrono::duration<double, std::nano>(Clock::now() - started).count();
    if (sink == 42) {
        std::puts("");
    }
    return elapsed / static_cast<double>(iterations);
}

} // namespace

int main(int argc, char** argv) {
    const long iterations = argc > 1 ? std::atol(argv[1]) : 20'000'000;
    auto counters = std::make_unique<NamespaceCounters>();
    std::printf("steady_clock::now() alone:               %6.1f ns\n", clock_only(iterations));
    for (const int threads : {1, 2, 4}) {
        std::printf("clock + record, %d thread%s (same series): %6.1f ns per observation\n",
                    threads, threads > 1 ? "s" : " ",
                    run(*counters, threads, iterations / threads));
    }
    return 0;
}
