// SPDX-License-Identifier: MIT
//
// Counters of the compile cache kept by pt2cache-cxx in namespace `cxx`
// (docs/cxx.md, "Statistics"), derived from the requests the daemon serves:
// one manifest read (GET or CXX_LOOKUP) per cacheable invocation is a lookup,
// a result read that hits is a hit (and saves the build time recorded in the
// value), a result PUT is a real build that was stored.
#pragma once

#include <atomic>
#include <cstdint>
#include <span>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

namespace pt2cache::daemon {

class CompileCounters {
public:
    // A GET of `ns`/`key` answered `value` (nullptr: a miss).
    void on_get(std::string_view ns, std::string_view key, const std::span<const std::byte>* value);
    // A PUT of `ns`/`key` was stored.
    void on_put(std::string_view ns, std::string_view key);

    // {"cxx": {"lookups", "hits", "misses", "builds", "saved_ms"}}
    nlohmann::json to_json() const;
    // Zeroes every counter (STATS with ZERO).
    void reset();

private:
    std::atomic<std::uint64_t> m_lookups{0};
    std::atomic<std::uint64_t> m_hits{0};
    std::atomic<std::uint64_t> m_builds{0};
    std::atomic<std::uint64_t> m_saved_ms{0};
};

} // namespace pt2cache::daemon
