// The STATS reply (and the RESP front door's INFO): counters plus tier state.
#pragma once

#include <nlohmann/json.hpp>

namespace pt2cache::daemon {

struct Context;

nlohmann::json stats_report(Context& context);

} // namespace pt2cache::daemon
