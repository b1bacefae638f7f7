#include "daemon/stats_report.hpp"

#include <unistd.h>

#include "daemon/context.hpp"

namespace pt2cache::daemon {

nlohmann::json stats_report(Context& context) {
    auto report = context.stats.to_json();
    report["pid"] = static_cast<long>(::getpid());
    report["version"] = PT2CACHE_VERSION;
    report["socket"] = context.config.socket_path;
    report["cache_dir"] = context.config.cache_dir;
    report["force_disable_caches"] = context.store->policy()->force_disable;
    report["tiers"] = context.store->tier_summary();
    return report;
}

} // namespace pt2cache::daemon
