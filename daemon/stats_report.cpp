#include "daemon/stats_report.hpp"

#include <unistd.h>

#include "daemon/context.hpp"
#include "daemon/store/remote/redis_tier.hpp"

namespace pt2cache::daemon {

nlohmann::json stats_report(Context& context) {
    auto report = context.stats.to_json();
    report["pid"] = static_cast<long>(::getpid());
    report["version"] = PT2CACHE_VERSION;
    report["socket"] = context.config.socket_path;
    report["cache_dir"] = context.config.cache_dir;
    report["force_disable_caches"] = context.store->policy()->force_disable;
    report["tiers"] = context.store->tier_summary();
    report["daemon"]["inflight_bytes"] = context.inflight.in_use();
    report["daemon"]["inflight_limit"] = context.inflight.limit();
    report["daemon"]["reply_bytes"] = context.queued_replies.load();
    report["daemon"]["reply_limit"] = context.max_reply_bytes.load();
    report["daemon"]["read_bytes"] = context.reads->in_use();
    const auto bundle_refusals = context.bundles.refusals();
    report["bundles"] = {{"open", context.bundles.size()},
                         {"bytes", context.bundles.bytes()},
                         {"dropped", bundle_refusals.dropped},
                         {"overflowed", bundle_refusals.overflowed}};
    report["compile"] = context.compile.to_json();
    const auto hashes = context.file_hashes.counters();
    report["file_hashes"] = {{"cached", context.file_hashes.size()},
                             {"hits", hashes.hits},
                             {"hashed", hashes.hashed},
                             {"bytes_hashed", hashes.bytes_hashed}};
    if (const auto* remote = dynamic_cast<const store::RedisTier*>(context.store->remote_tier())) {
        const auto policy = context.store->policy();
        auto& tier = report["tiers"]["remote"];
        tier["endpoint"] = remote->options().endpoint.describe();
        tier["state"] = report["remote"]["state"];
        tier["read_only"] = policy->remote_read_only;
        tier["tls"] = remote->options().endpoint.tls != nullptr;
        tier["signed"] = remote->options().signer != nullptr;
        tier["namespaces"] = policy->remote_namespaces.value_or(std::set<std::string>{});
        tier["count"] = report["remote"]["queue_entries"];
        tier["bytes"] = report["remote"]["queue_bytes"];
        tier["capacity"] = remote->options().queue.capacity_bytes;
        // "yes", "no", or "detecting" (remote.cluster = auto, before the seed answered).
        tier["cluster"] = remote->cluster_active()       ? "yes"
                          : remote->cluster_mode_known() ? "no"
                                                         : "detecting";
        if (const auto* cluster = remote->cluster();
            cluster != nullptr && remote->cluster_active()) {
            tier["cluster_nodes"] = cluster->node_count();
            tier["slots_known"] = cluster->slots_known();
        }
    }
    return report;
}

void zero_stats(Context& context) {
    context.stats.reset();
    context.compile.reset();
    context.file_hashes.reset_counters();
}

} // namespace pt2cache::daemon
