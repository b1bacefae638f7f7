// SPDX-License-Identifier: MIT
#include "daemon/store/latency.hpp"

#include <bit>
#include <cmath>

namespace pt2cache::daemon::store::latency {

std::size_t bucket_index(std::uint64_t ns) {
    if (ns > k_max_value) {
        ns = k_max_value;
    }
    if (ns < k_sub_count) {
        return static_cast<std::size_t>(ns);
    }
    // ns in [2^e, 2^(e+1)), e >= k_sub_bits: the top k_sub_bits + 1 bits of ns
    // pick one of the 8 sub-buckets of group e - k_sub_bits + 1.
    const int exponent = std::bit_width(ns) - 1;
    const int shift = exponent - k_sub_bits;
    return static_cast<std::size_t>(shift) * k_sub_count + static_cast<std::size_t>(ns >> shift);
}

std::uint64_t bucket_lower(std::size_t index) {
    if (index < 2 * k_sub_count) {
        return index;
    }
    const std::size_t shift = index / k_sub_count - 1;
    return (index % k_sub_count + k_sub_count) << shift;
}

std::uint64_t bucket_upper(std::size_t index) {
    if (index + 1 >= k_bucket_count) {
        return std::uint64_t{1} << k_max_exponent;
    }
    return bucket_lower(index + 1);
}

std::uint64_t Snapshot::count() const {
    std::uint64_t total = 0;
    for (const auto value : buckets) {
        total += value;
    }
    return total;
}

double Snapshot::quantile_ns(double q) const {
    const auto total = count();
    if (total == 0) {
        return 0;
    }
    auto rank = static_cast<std::uint64_t>(std::ceil(q * static_cast<double>(total)));
    rank = std::max<std::uint64_t>(1, std::min(rank, total));
    std::uint64_t seen = 0;
    for (std::size_t i = 0; i < k_bucket_count; ++i) {
        seen += buckets[i];
        if (seen >= rank) {
            const auto lower = static_cast<double>(bucket_lower(i));
            const auto upper = static_cast<double>(bucket_upper(i));
            // One-wide buckets hold exactly their lower bound.
            return upper - lower <= 1 ? lower : (lower + upper) / 2;
        }
    }
    return static_cast<double>(bucket_upper(k_bucket_count - 1));
}

std::uint64_t Snapshot::count_at_most(std::uint64_t ns) const {
    std::uint64_t total = 0;
    for (std::size_t i = 0; i < k_bucket_count && bucket_lower(i) <= ns; ++i) {
        total += buckets[i];
    }
    return total;
}

Snapshot& Snapshot::operator+=(const Snapshot& other) {
    for (std::size_t i = 0; i < k_bucket_count; ++i) {
        buckets[i] += other.buckets[i];
    }
    sum_ns += other.sum_ns;
    return *this;
}

Snapshot Histogram::snapshot() const {
    Snapshot copy;
    for (std::size_t i = 0; i < k_bucket_count; ++i) {
        copy.buckets[i] = m_buckets[i].load(std::memory_order_relaxed);
    }
    copy.sum_ns = m_sum_ns.load(std::memory_order_relaxed);
    return copy;
}

bool Histogram::empty() const {
    for (const auto& bucket : m_buckets) {
        if (bucket.load(std::memory_order_relaxed) != 0) {
            return false;
        }
    }
    return true;
}

void Histogram::reset() {
    for (auto& bucket : m_buckets) {
        bucket.store(0, std::memory_order_relaxed);
    }
    m_sum_ns.store(0, std::memory_order_relaxed);
}

} // namespace pt2cache::daemon::store::latency
