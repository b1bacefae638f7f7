// SPDX-License-Identifier: MIT
// A session's clock for the latency histograms (docs/operations.md, "Latency").
// A request's latency runs from its mark (when its batch was read, or when
// the request before it on the connection was answered) to when its reply is
// queued: one steady_clock read per request. The namespace's counters are
// remembered, so a session that keeps to one or two namespaces takes no lock.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string_view>

#include "daemon/store/stats.hpp"
#include "proto/frame.hpp"

namespace pt2cache::daemon {

class LatencyRecorder {
public:
    explicit LatencyRecorder(store::Stats& stats)
        : m_stats(stats) {}

    // Starts the next request's clock now.
    void mark() { m_mark = now_ns(); }

    // Records a request of `ns` that started at the mark and ends now; the
    // next request starts here.
    void finish(std::string_view ns, store::LatencyOp op, store::LatencyTier tier,
                store::RequestResult result) {
        finish_at(now_ns(), ns, op, tier, result);
    }

    // `finish` with the clock read by the caller: requests answered together
    // (a pipeline's puts) share one read.
    void finish_at(std::int64_t end, std::string_view ns, store::LatencyOp op,
                   store::LatencyTier tier, store::RequestResult result) {
        counters(ns).record(op, tier, result,
                            static_cast<std::uint64_t>(std::max<std::int64_t>(0, end - m_mark)));
        m_mark = end;
    }

    static std::int64_t now_ns() {
        return std::chrono::duration_cast<std::chrono::nanoseconds>(
                   std::chrono::steady_clock::now().time_since_epoch())
            .count();
    }

private:
    struct Cached {
        char name[proto::k_max_namespace];
        std::size_t size = 0;
        store::NamespaceCounters* counters = nullptr;
        bool matches(std::string_view ns) const {
            return counters != nullptr && ns.size() == size && ns.compare(0, size, name, size) == 0;
        }
    };

    store::NamespaceCounters& counters(std::string_view ns) {
        for (auto& cached : m_cache) {
            if (cached.matches(ns)) {
                return *cached.counters;
            }
        }
        if (ns.size() > proto::k_max_namespace) {
            return m_stats.ns(ns); // not a valid namespace; never measured in practice
        }
        auto& slot = m_cache[m_next];
        m_next = (m_next + 1) % std::size(m_cache);
        slot.size = ns.size();
        std::copy_n(ns.data(), slot.size, slot.name);
        slot.counters = &m_stats.ns(ns);
        return *slot.counters;
    }

    store::Stats& m_stats;
    std::int64_t m_mark = now_ns();
    Cached m_cache[2];
    std::size_t m_next = 0;
};

} // namespace pt2cache::daemon
