#include "daemon/store_factory.hpp"

#include <sys/stat.h>

#include "daemon/log.hpp"
#include "daemon/socket_setup.hpp"
#include "daemon/store/disk_tier.hpp"
#include "daemon/store/memory_tier.hpp"

namespace pt2cache::daemon {

store::StorePolicy store_policy(const config::Config& config) {
    store::StorePolicy policy;
    policy.force_disable = config.force_disable_caches;
    policy.max_value_size = config.max_value_size;
    if (!config.fx_graph_cache) {
        policy.locally_disabled.insert("fx-graph");
    }
    if (!config.autograd_cache) {
        policy.locally_disabled.insert("aot-autograd");
    }
    return policy;
}

std::unique_ptr<store::Store> make_store(const config::Config& config, store::Stats& stats) {
    std::unique_ptr<store::MemoryTier> memory;
    if (config.memory_max_size > 0) {
        memory = std::make_unique<store::MemoryTier>(config.memory_max_size, stats);
    }
    std::unique_ptr<store::DiskTier> disk;
    if (config.disk_max_size > 0) {
        const std::filesystem::path root = config.cache_dir;
        std::error_code ec;
        std::filesystem::create_directories(root, ec);
        if (ec) {
            throw Fatal(
                fmt::format("cannot create cache directory {}: {}", root.string(), ec.message()));
        }
        ::chmod(root.c_str(), 0700);
        store::DiskOptions options;
        options.max_size = config.disk_max_size;
        options.compress_threshold = config.compress_threshold;
        options.compress_level = config.compress_level;
        disk = std::make_unique<store::DiskTier>(root, options, stats);
    }
    return std::make_unique<store::Store>(stats, store_policy(config), std::move(memory),
                                          std::move(disk), nullptr);
}

} // namespace pt2cache::daemon
