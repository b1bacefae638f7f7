#include "daemon/store_factory.hpp"

#include <sys/stat.h>

#include "config/redis_url.hpp"
#include "daemon/log.hpp"
#include "daemon/socket_setup.hpp"
#include "daemon/store/disk/disk_tier.hpp"
#include "daemon/store/memory/memory_tier.hpp"
#include "daemon/store/remote/redis_tier.hpp"
#include "daemon/store/remote/tls_transport.hpp"

#include <fmt/ranges.h>

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
    // The seed's per-namespace remote switches; RESP keys that map to no
    // namespace ("redis") go remote whenever any switch is on.
    std::set<std::string> remote;
    const std::pair<bool, const char*> switches[] = {
        {config.fx_graph_remote_cache, "fx-graph"},
        {config.autograd_remote_cache, "aot-autograd"},
        {config.autotune_remote_cache, "autotune"},
        {config.bundled_autotune_remote_cache, "autotune-bundle"},
        {config.pgo_remote_cache, "pgo"},
        {config.remote_enabled, "redis"},
    };
    for (const auto& [on, ns] : switches) {
        if (on) {
            remote.insert(ns);
        }
    }
    policy.remote_namespaces = std::move(remote);
    // Nothing fits a queue of 0 bytes: that is read-only, said once.
    policy.remote_read_only = config.remote_read_only || config.write_behind_queue_bytes == 0;
    policy.remote_wait_ms =
        std::uint64_t{config.remote_connect_timeout_ms} + config.remote_op_timeout_ms;
    return policy;
}

namespace {

// remote.tls*: the shared SSL_CTX, or null for plain TCP. Unusable files stop
// the daemon (a remote tier that can never connect is a configuration error).
std::shared_ptr<const store::TlsContext> make_tls(const config::Config& config) {
    if (!config.redis_tls) {
        return nullptr;
    }
    if (!config.redis_unix_socket.empty()) {
        throw Fatal(fmt::format("remote.tls: TLS needs a TCP endpoint (host and port, or a "
                                "rediss:// URL), not the Unix socket {}",
                                config.redis_unix_socket));
    }
    store::TlsOptions options;
    options.ca_file = config.redis_tls_ca_file;
    options.cert_file = config.redis_tls_cert_file;
    options.key_file = config.redis_tls_key_file;
    options.server_name = config.redis_tls_server_name;
    options.verify = config.redis_tls_verify;
    auto context = store::TlsContext::make(options);
    if (!context) {
        throw Fatal(fmt::format("remote tier TLS: {}", context.error()));
    }
    if (!options.verify) {
        logger("daemon").warn(
            "remote.tls_verify = false: the Redis server's certificate is NOT verified; anyone "
            "on the path can impersonate it and serve entries (pickles) to this machine");
    }
    return *context;
}

// remote.signing_key_file: the signer, or null. A key file others can read or
// change, or one that holds no key, stops the daemon.
std::shared_ptr<const store::EntrySigner> make_signer(const config::Config& config) {
    if (config.remote_signing_key_file.empty()) {
        return nullptr;
    }
    auto signer = store::EntrySigner::load(config.remote_signing_key_file);
    if (!signer) {
        throw Fatal(signer.error());
    }
    logger("daemon").info("remote entries signed with key {} ({} verification key{})",
                          signer->signing_key_id(), signer->key_count(),
                          signer->key_count() == 1 ? "" : "s");
    return std::make_shared<const store::EntrySigner>(std::move(*signer));
}

std::unique_ptr<store::Tier> make_remote(const config::Config& config, store::Stats& stats) {
    if (!config.remote_enabled) {
        return nullptr;
    }
    // TORCHINDUCTOR_REDIS_URL is read by PyTorch and by pt2cached alike: a
    // daemon started from a shell where it points at this daemon would be its
    // own remote tier (every write looping back, every miss waiting).
    if (!config.redis_unix_socket.empty()) {
        std::error_code ec;
        const auto own = std::filesystem::weakly_canonical(config.socket_path, ec);
        const auto remote = std::filesystem::weakly_canonical(config.redis_unix_socket, ec);
        if (!ec && own == remote) {
            logger("daemon").error(
                "remote tier off: its Redis socket {} is this daemon's own socket (is "
                "TORCHINDUCTOR_REDIS_URL, meant for PyTorch, set where pt2cached was started? "
                "see docs/remote.md)",
                config.redis_unix_socket);
            return nullptr;
        }
    }
    store::RedisTierOptions options;
    auto& endpoint = options.endpoint;
    endpoint.unix_socket = config.redis_unix_socket;
    endpoint.host = config.redis_host;
    endpoint.port = config.redis_port;
    endpoint.username = config.redis_username;
    endpoint.password = config.redis_password;
    endpoint.db = config.redis_db;
    endpoint.connect_timeout = std::chrono::milliseconds(config.remote_connect_timeout_ms);
    endpoint.op_timeout = std::chrono::milliseconds(config.remote_op_timeout_ms);
    options.pool_size = config.remote_pool_size;
    options.flushers = std::min(2U, config.remote_pool_size);
    options.expire_s = config.redis_expire_s;
    options.queue.capacity_bytes = config.write_behind_queue_bytes;
    options.max_value_size = config.remote_max_value_size;
    endpoint.max_value_size = config.remote_max_value_size;
    endpoint.tls = make_tls(config);
    options.signer = make_signer(config);
    options.cluster = config.remote_cluster == "true"    ? store::ClusterMode::on
                      : config.remote_cluster == "false" ? store::ClusterMode::off
                                                         : store::ClusterMode::detect;
    options.read_from_replicas = config.remote_read_from_replicas;
    // Checked when the configuration was loaded.
    for (const auto& url : config::parse_redis_url_list(config.remote_cluster_nodes)
                               .value_or(std::vector<config::RedisUrl>{})) {
        store::RedisEndpoint seed = endpoint;
        seed.unix_socket = url.unix_socket;
        seed.host = url.host;
        seed.port = url.port;
        options.cluster_seeds.push_back(std::move(seed));
    }
    if (!options.cluster_seeds.empty() && options.cluster == store::ClusterMode::off) {
        logger("daemon").warn("remote.cluster_nodes ignored: remote.cluster is false");
    }
    const auto policy = store_policy(config);
    logger("daemon").info("remote tier: Redis at {} for {}{}{}", endpoint.describe(),
                          fmt::join(*policy.remote_namespaces, ", "),
                          policy.remote_read_only ? " (read-only)" : "",
                          config.redis_expire_s != 0
                              ? fmt::format(", entries expire after {} s", config.redis_expire_s)
                              : std::string());
    return std::make_unique<store::RedisTier>(std::move(options), stats);
}

} // namespace

std::unique_ptr<store::Store> make_store(const config::Config& config, store::Stats& stats,
                                         std::shared_ptr<store::ReadBudget> reads) {
    std::unique_ptr<store::MemoryTier> memory;
    if (config.memory_max_size > 0) {
        memory = std::make_unique<store::MemoryTier>(config.memory_max_size, stats,
                                                     config.memory_max_size /
                                                         store::MemoryTier::k_bypass_divisor);
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
        options.small_entry_max = config.disk_small_entry_max;
        options.read_budget = reads;
        if (config.disk_write_mode == "async") {
            options.write_mode = store::DiskWriteMode::async;
            options.write_queue_bytes = config.disk_write_queue_size;
            logger("daemon").info("disk tier: asynchronous writes (queue of {} bytes, {} writers)",
                                  options.write_queue_bytes, options.writer_threads);
        }
        disk = std::make_unique<store::DiskTier>(root, options, stats);
    }
    auto store = std::make_unique<store::Store>(stats, store_policy(config), std::move(memory),
                                                std::move(disk), make_remote(config, stats));
    store->set_read_budget(std::move(reads));
    return store;
}

} // namespace pt2cache::daemon
