// SPDX-License-Identifier: MIT
#include "daemon/compile_stats.hpp"

#include "proto/cxx_value.hpp"

#include <nlohmann/json.hpp>

namespace pt2cache::daemon {

namespace cxx = proto::cxx;

void CompileCounters::on_get(std::string_view ns, std::string_view key,
                             const std::span<const std::byte>* value) {
    if (ns != cxx::k_namespace) {
        return;
    }
    if (key.starts_with(cxx::k_manifest_prefix)) {
        m_lookups.fetch_add(1, std::memory_order_relaxed);
    } else if (value != nullptr && key.starts_with(cxx::k_result_prefix)) {
        if (const auto header = cxx::parse_result_header(*value)) {
            m_hits.fetch_add(1, std::memory_order_relaxed);
            m_saved_ms.fetch_add(header->build_ms, std::memory_order_relaxed);
        }
    }
}

void CompileCounters::on_put(std::string_view ns, std::string_view key) {
    if (ns == cxx::k_namespace && key.starts_with(cxx::k_result_prefix)) {
        m_builds.fetch_add(1, std::memory_order_relaxed);
    }
}

void CompileCounters::reset() {
    for (auto* counter : {&m_lookups, &m_hits, &m_builds, &m_saved_ms}) {
        counter->store(0, std::memory_order_relaxed);
    }
}

nlohmann::json CompileCounters::to_json() const {
    const auto lookups = m_lookups.load(std::memory_order_relaxed);
    const auto hits = m_hits.load(std::memory_order_relaxed);
    return {{"cxx",
             {{"lookups", lookups},
              {"hits", hits},
              {"misses", lookups > hits ? lookups - hits : 0},
              {"builds", m_builds.load(std::memory_order_relaxed)},
              {"saved_ms", m_saved_ms.load(std::memory_order_relaxed)}}}};
}

} // namespace pt2cache::daemon
