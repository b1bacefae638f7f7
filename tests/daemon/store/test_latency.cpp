// SPDX-License-Identifier: MIT
#include <algorithm>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include "daemon/store/latency.hpp"
#include "daemon/store/stats.hpp"

#include <catch2/catch.hpp>

using namespace pt2cache::daemon::store::latency;

TEST_CASE("small values get a bucket each", "[latency]") {
    for (std::uint64_t ns = 0; ns < 16; ++ns) {
        CHECK(bucket_index(ns) == ns);
        CHECK(bucket_lower(ns) == ns);
        CHECK(bucket_upper(ns) == ns + 1);
    }
}

TEST_CASE("powers of two start a group of 8 equal sub-buckets", "[latency]") {
    CHECK(bucket_index(16) == 16);
    CHECK(bucket_index(17) == 16);
    CHECK(bucket_index(18) == 17);
    CHECK(bucket_index(31) == 23);
    CHECK(bucket_index(32) == 24);
    CHECK(bucket_index(1000) == bucket_index(1023));
    CHECK(bucket_index(1024) == bucket_index(1023) + 1);
    CHECK(bucket_lower(bucket_index(1024)) == 1024);
    CHECK(bucket_upper(bucket_index(1024)) == 1024 + 128);
    for (int e = 4; e < k_max_exponent; ++e) {
        const std::uint64_t power = std::uint64_t{1} << e;
        const auto index = bucket_index(power);
        CHECK(bucket_lower(index) == power);
        CHECK(bucket_upper(index) - bucket_lower(index) == power / k_sub_count);
        CHECK(bucket_index(power - 1) == index - 1);
    }
}

TEST_CASE("every value lies within its bucket's bounds", "[latency]") {
    std::mt19937_64 random(12);
    for (int i = 0; i < 100'000; ++i) {
        const std::uint64_t ns = random() >> (random() % 64);
        const auto index = bucket_index(ns);
        REQUIRE(index < k_bucket_count);
        if (ns <= k_max_value) {
            REQUIRE(bucket_lower(index) <= ns);
            REQUIRE(ns < bucket_upper(index));
            // Relative width at most 1/8 of the lower bound (above the exact range).
            if (ns >= 16) {
                REQUIRE((bucket_upper(index) - bucket_lower(index)) * 8 <= bucket_lower(index));
            }
        } else {
            REQUIRE(index == k_bucket_count - 1);
        }
    }
}

TEST_CASE("bounds are contiguous and increasing", "[latency]") {
    for (std::size_t i = 0; i + 1 < k_bucket_count; ++i) {
        REQUIRE(bucket_upper(i) == bucket_lower(i + 1));
        REQUIRE(bucket_lower(i) < bucket_upper(i));
        REQUIRE(bucket_index(bucket_lower(i)) == i);
        REQUIRE(bucket_index(bucket_upper(i) - 1) == i);
    }
    CHECK(k_bucket_count == 272);
    CHECK(bucket_upper(k_bucket_count - 1) == std::uint64_t{1} << k_max_exponent);
    CHECK(bucket_index(~std::uint64_t{0}) == k_bucket_count - 1);
}

TEST_CASE("quantiles come within a bucket of the exact order statistic", "[latency]") {
    std::mt19937_64 random(7);
    std::lognormal_distribution<double> shape(10.0, 1.5); // median ~22 µs
    Histogram histogram;
    std::vector<std::uint64_t> values;
    for (int i = 0; i < 20'000; ++i) {
        const auto ns = static_cast<std::uint64_t>(shape(random));
        values.push_back(ns);
        histogram.record(ns);
    }
    std::sort(values.begin(), values.end());
    const auto snapshot = histogram.snapshot();
    CHECK(snapshot.count() == values.size());
    std::uint64_t sum = 0;
    for (auto v : values) {
        sum += v;
    }
    CHECK(snapshot.sum_ns == sum);
    for (const double q : {0.5, 0.9, 0.99, 0.999}) {
        const auto exact = values[static_cast<std::size_t>(q * values.size()) - 1];
        const auto estimate = snapshot.quantile_ns(q);
        const auto index = bucket_index(exact);
        INFO("q=" << q << " exact=" << exact << " estimate=" << estimate);
        CHECK(estimate >= static_cast<double>(bucket_lower(index)));
        CHECK(estimate <= static_cast<double>(bucket_upper(index)));
    }
}

TEST_CASE("quantile of an empty or single-valued histogram", "[latency]") {
    Histogram histogram;
    CHECK(histogram.empty());
    CHECK(histogram.snapshot().quantile_ns(0.5) == 0);
    histogram.record(5);
    CHECK_FALSE(histogram.empty());
    CHECK(histogram.snapshot().quantile_ns(0.5) == 5);
    CHECK(histogram.snapshot().quantile_ns(0.999) == 5);
    histogram.record(1'000'000); // bucket [983040, 1048576)
    const auto snapshot = histogram.snapshot();
    CHECK(snapshot.quantile_ns(0.5) == 5);
    CHECK(snapshot.quantile_ns(1.0) == (983040.0 + 1048576.0) / 2);
    histogram.reset();
    CHECK(histogram.empty());
    CHECK(histogram.snapshot().sum_ns == 0);
}

TEST_CASE("count_at_most is cumulative at bucket boundaries", "[latency]") {
    Histogram histogram;
    for (std::uint64_t ns : {1, 1023, 1024, 2047, 2048, 5000}) {
        histogram.record(ns);
    }
    const auto snapshot = histogram.snapshot();
    CHECK(snapshot.count_at_most(0) == 0);
    CHECK(snapshot.count_at_most(1023) == 2);
    CHECK(snapshot.count_at_most(2047) == 4);
    CHECK(snapshot.count_at_most(4095) == 5);
    CHECK(snapshot.count_at_most(k_max_value) == 6);
}

TEST_CASE("concurrent recording loses nothing", "[latency]") {
    Histogram histogram;
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&histogram, t] {
            for (int i = 0; i < 50'000; ++i) {
                histogram.record(static_cast<std::uint64_t>(1000 * (t + 1) + i % 7));
            }
        });
    }
    for (auto& thread : threads) {
        thread.join();
    }
    CHECK(histogram.snapshot().count() == 200'000);
}

TEST_CASE("threads record into their own shards, and reports add them up", "[latency]") {
    using pt2cache::daemon::store::k_latency_shards;
    using pt2cache::daemon::store::latency_series;
    using pt2cache::daemon::store::latency_shard;
    using pt2cache::daemon::store::LatencyOp;
    using pt2cache::daemon::store::LatencyTier;
    using pt2cache::daemon::store::RequestResult;
    using pt2cache::daemon::store::Stats;
    Stats stats;
    auto& counters = stats.ns("fx-graph");
    constexpr int k_threads = k_latency_shards;
    std::vector<int> shards(k_threads, -1);
    std::vector<std::thread> threads;
    for (int t = 0; t < k_threads; ++t) {
        threads.emplace_back([&counters, &shards, t] {
            shards[static_cast<std::size_t>(t)] = latency_shard();
            for (int i = 0; i < 10'000; ++i) {
                counters.record(LatencyOp::get, LatencyTier::memory, RequestResult::ok, 2000);
            }
            counters.record(LatencyOp::put, LatencyTier::none, RequestResult::error, 5);
        });
    }
    for (auto& thread : threads) {
        thread.join();
    }
    // k_latency_shards threads in a row take every shard once.
    std::sort(shards.begin(), shards.end());
    for (int t = 0; t < k_threads; ++t) {
        CHECK(shards[static_cast<std::size_t>(t)] == t);
    }
    const int get_memory = latency_series(LatencyOp::get, LatencyTier::memory);
    for (const auto& shard : counters.shards) {
        CHECK(shard.latency[get_memory].snapshot().count() == 10'000);
    }
    CHECK(counters.latency_snapshot(get_memory).count() == 10'000 * k_threads);
    CHECK(counters.latency_snapshot(get_memory).sum_ns == 2000ULL * 10'000 * k_threads);
    CHECK(counters.request_count(LatencyOp::get, RequestResult::ok) == 10'000 * k_threads);
    CHECK(counters.request_count(LatencyOp::put, RequestResult::error) == k_threads);
    const auto series = stats.latency();
    REQUIRE(series.size() == 2);
    stats.reset();
    CHECK(counters.latency_empty(get_memory));
    CHECK(counters.request_count(LatencyOp::get, RequestResult::ok) == 0);
    CHECK(stats.latency().empty());
    CHECK(stats.request_counts().empty());
}

TEST_CASE("namespaces past the limit share one row", "[latency]") {
    using pt2cache::daemon::store::LatencyOp;
    using pt2cache::daemon::store::LatencyTier;
    using pt2cache::daemon::store::RequestResult;
    using pt2cache::daemon::store::Stats;
    Stats stats;
    for (std::size_t i = 0; i < Stats::k_max_namespaces + 50; ++i) {
        stats.ns("ns" + std::to_string(i))
            .record(LatencyOp::get, LatencyTier::none, RequestResult::miss, 1000);
    }
    const auto counts = stats.request_counts();
    CHECK(counts.size() == Stats::k_max_namespaces + 1);
    std::uint64_t total = 0;
    std::uint64_t other = 0;
    for (const auto& count : counts) {
        total += count.count;
        if (count.ns == Stats::k_other_namespace) {
            other = count.count;
        }
    }
    CHECK(total == Stats::k_max_namespaces + 50);
    CHECK(other == 50);
    // A namespace counted before the limit keeps its own row.
    CHECK(&stats.ns("ns0") != &stats.ns(Stats::k_other_namespace));
    CHECK(&stats.ns("ns9999") == &stats.ns(Stats::k_other_namespace));
}
