// SPDX-License-Identifier: MIT
// The daemon's numbers in the Prometheus text exposition format, version
// 0.0.4 (STATS with the PROMETHEUS flag, `pt2cache metrics`, and the
// metrics.listen HTTP endpoint). Every metric is listed in
// docs/operations.md, "Prometheus metrics".
#pragma once

#include <string>
#include <vector>

#include "daemon/store/stats.hpp"

#include <nlohmann/json.hpp>

namespace pt2cache::daemon {

struct Context;

// Renders `report` (a stats_report), the latency histograms `latency` and,
// where `report` shows a small-entry store, the times of its writes.
std::string render_prometheus(const nlohmann::json& report,
                              const std::vector<store::LatencySeries>& latency,
                              const store::latency::Snapshot& small_store_writes);

// The whole exposition for `context`, as served.
std::string prometheus_text(Context& context);

} // namespace pt2cache::daemon
