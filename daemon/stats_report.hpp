// The STATS reply (and the RESP front door's INFO): counters plus tier state.
#pragma once

#include <nlohmann/json.hpp>

namespace pt2cache::daemon {

struct Context;

nlohmann::json stats_report(Context& context);

// Zeroes the daemon's counters and latency histograms (STATS with ZERO):
// the store's, pt2cache-cxx's and HASH_FILES' counters. Gauges stay.
void zero_stats(Context& context);

} // namespace pt2cache::daemon
