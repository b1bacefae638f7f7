// SPDX-License-Identifier: MIT
// Latency histograms with log-linear buckets (HDR style): values in
// nanoseconds; below 8 ns one bucket per nanosecond, then each power of two
// [2^e, 2^(e+1)) split into 8 equal sub-buckets, so a bucket is at most 12.5%
// of its lower bound wide. Values of 2^36 ns (about 68.7 s) or more land in the
// last bucket. Recording is one relaxed fetch_add on a bucket plus one on the
// sum: no lock, no allocation.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace pt2cache::daemon::store::latency {

inline constexpr int k_sub_bits = 3;
inline constexpr std::uint64_t k_sub_count = 1u << k_sub_bits; // sub-buckets per power of two
inline constexpr int k_max_exponent = 36;                      // values >= 2^36 ns clamp
inline constexpr std::size_t k_bucket_count = (k_max_exponent - k_sub_bits + 1) * k_sub_count;
inline constexpr std::uint64_t k_max_value = (std::uint64_t{1} << k_max_exponent) - 1;

// The bucket of `ns`; values above k_max_value land in the last bucket.
std::size_t bucket_index(std::uint64_t ns);

// The smallest value of bucket `index` (index < k_bucket_count).
std::uint64_t bucket_lower(std::size_t index);

// One past the largest value of bucket `index`: bucket_lower(index + 1), and
// 2^k_max_exponent for the last bucket.
std::uint64_t bucket_upper(std::size_t index);

// A plain copy of a histogram's counts.
struct Snapshot {
    std::array<std::uint64_t, k_bucket_count> buckets{};
    std::uint64_t sum_ns = 0;

    std::uint64_t count() const;
    // The value at quantile `q` (0 < q <= 1) in ns: the midpoint of the bucket
    // holding the ceil(q * count)-th smallest observation; 0 when empty.
    double quantile_ns(double q) const;
    // Observations up to and including `ns` (exact when ns + 1 is a bucket
    // boundary, e.g. a power of two minus one).
    std::uint64_t count_at_most(std::uint64_t ns) const;
    Snapshot& operator+=(const Snapshot& other);
};

// Written by any thread, read by any thread; counts are relaxed, so a
// snapshot taken during recording may miss the observations in flight.
class Histogram {
public:
    void record(std::uint64_t ns) {
        m_buckets[bucket_index(ns)].fetch_add(1, std::memory_order_relaxed);
        m_sum_ns.fetch_add(ns, std::memory_order_relaxed);
    }
    Snapshot snapshot() const;
    bool empty() const;
    void reset();

private:
    std::array<std::atomic<std::uint64_t>, k_bucket_count> m_buckets{};
    std::atomic<std::uint64_t> m_sum_ns{0};
};

} // namespace pt2cache::daemon::store::latency
