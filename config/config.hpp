// SPDX-License-Identifier: MIT
//
// pt2cached's configuration: built-in defaults, then the TOML file, then the
// environment, then command-line flags. docs/configuration.md lists every
// setting; keep the two in step.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <tl/expected.hpp>

namespace pt2cache::config {

// Where an effective value came from, lowest precedence first.
enum class Source { default_value, file, environment, flag };

// "default", "file", "env" or "flag".
std::string_view source_name(Source source);

struct Config {
    // [daemon]
    std::string socket_path;                       // see default_socket_path()
    std::string log_level = "info";                // trace|debug|info|warn|error|critical|off
    unsigned io_threads = 1;                       // 1..64, Asio threads
    unsigned blocking_threads = 4;                 // 1..256, disk/remote worker threads
    std::uint64_t idle_exit_s = 0;                 // 0 = never exit when idle
    std::uint64_t max_value_size = 512ull << 20;   // 1 .. 4 GiB-1
    unsigned max_connections = 1024;               // clients served at once; more are refused
    unsigned max_connections_per_process = 256;    // per client process (SO_PEERCRED pid)
    std::uint64_t max_inflight_bytes = 2ull << 30; // request bytes being received, all clients
    std::uint64_t max_reply_bytes = 512ull << 20;  // replies queued for clients, all clients
    // [memory]
    std::uint64_t memory_max_size = 256ull << 20; // 0 disables the memory tier
    // [disk]
    std::string cache_dir; // root of the disk tier; see docs/configuration.md for the default
    std::uint64_t disk_max_size = 10ull << 30;       // 0 disables the disk tier
    std::uint64_t compress_threshold = 64u << 10;    // values >= this are zstd-compressed
    int compress_level = 3;                          // 1..19
    std::string disk_write_mode = "async";           // "sync" | "async" (queued, written behind)
    std::uint64_t disk_write_queue_size = 64u << 20; // async: bytes queued before puts wait
    std::uint64_t disk_small_entry_max = 16u << 10;  // encoded entries up to this go to small.mdb
    // [caches]: seed variables, "1" enables and any other value disables
    bool fx_graph_cache = true;        // TORCHINDUCTOR_FX_GRAPH_CACHE
    bool autograd_cache = true;        // TORCHINDUCTOR_AUTOGRAD_CACHE; needs fx_graph_cache
    bool force_disable_caches = false; // TORCHINDUCTOR_FORCE_DISABLE_CACHES
    // [remote] (Redis)
    std::string redis_url;                // redis://[user:pass@]host[:port][/db] or unix:///path
    std::string redis_host = "localhost"; // TORCHINDUCTOR_REDIS_HOST
    std::uint16_t redis_port = 6379;      // TORCHINDUCTOR_REDIS_PORT
    std::string redis_unix_socket;        // when set, used instead of host and port
    std::string redis_username, redis_password;
    unsigned redis_db = 0;
    bool remote_enabled = false; // any remote switch below is on
    bool fx_graph_remote_cache = false;
    bool autograd_remote_cache = false; // needs fx_graph_remote_cache
    bool autotune_remote_cache = false;
    bool bundled_autotune_remote_cache = false;
    bool pgo_remote_cache = false;
    std::uint64_t redis_expire_s = 0; // 0 = no TTL
    bool remote_read_only = false;
    unsigned remote_connect_timeout_ms = 500; // 1..60000
    unsigned remote_op_timeout_ms = 1000;     // 1..600000
    unsigned remote_pool_size = 4;            // 1..64
    std::uint64_t write_behind_queue_bytes = 256ull << 20;
    std::uint64_t remote_max_value_size = 512ull << 20; // 1 .. 4 GiB-1, Redis's proto-max-bulk-len
    std::string remote_cluster = "auto";                // "auto" (INFO cluster) | "true" | "false"
    std::string remote_cluster_nodes; // more seed nodes: URLs separated by commas or spaces
    bool remote_read_from_replicas = false;
    bool redis_tls = false;              // TLS to Redis (a rediss:// URL sets it)
    std::string redis_tls_ca_file;       // PEM CA bundle; empty: the system's
    std::string redis_tls_cert_file;     // PEM client certificate (chain), for mutual TLS
    std::string redis_tls_key_file;      // its private key; empty: in redis_tls_cert_file
    std::string redis_tls_server_name;   // SNI and the name verified; empty: the host
    bool redis_tls_verify = true;        // false: no peer verification (a warning at start)
    std::string remote_signing_key_file; // HMAC keys (docs/remote.md); empty: unsigned
    // [resp] (Redis-protocol front door)
    std::string resp_password; // empty: AUTH not required
    // [bundle]
    unsigned bundle_idle_timeout_s = 600;
    // [metrics]
    std::string metrics_listen; // HOST:PORT serving GET /metrics over HTTP; empty: off
};

struct Origin {
    Source source;
    // The file path, environment variable name or flag key. For a default
    // derived from the environment, the variable it was derived from.
    std::string detail;
};

struct Loaded {
    Config config;
    // Keyed by "section.key" (the TOML names, e.g. "disk.max_size"); one entry
    // per setting.
    std::map<std::string, Origin> origins;
    // Values the loader changed, and why; the daemon logs them at startup.
    std::vector<std::string> warnings;
    // The file read, empty if none.
    std::string config_file;
};

struct ConfigError {
    // One line naming the file (or environment variable, or "command line"),
    // the key and the accepted values.
    std::string message;
};

// Looks up an environment variable; std::nullopt when unset.
using Environment = std::function<std::optional<std::string>(std::string_view name)>;

// The environment of this process.
Environment process_environment();

struct LoadOptions {
    // --config. When absent, ${XDG_CONFIG_HOME:-$HOME/.config}/pt2cache/pt2cached.toml
    // is read if it exists.
    std::optional<std::string> config_path;
    // ("section.key", "value") pairs from command-line flags, applied last, in
    // order.
    std::vector<std::pair<std::string, std::string>> flags;
};

// Builds the effective configuration from the defaults, the file, `env` and
// `options.flags`, in that order of precedence.
tl::expected<Loaded, ConfigError> load(const LoadOptions& options, const Environment& env);

// Every effective value, one per line, grouped by section, with where it came
// from, e.g. "disk.max_size = 10737418240  # default". Passwords print as
// "***". The output is valid TOML. Warnings are not included: callers print
// `loaded.warnings` themselves.
std::string render(const Loaded& loaded);

// $XDG_RUNTIME_DIR/pt2cache/pt2cached.sock when XDG_RUNTIME_DIR is set in
// `env`, else /tmp/pt2cache-$UID/pt2cached.sock.
std::string default_socket_path(const Environment& env);

// Parses "512MiB", "10GiB", "64KiB", "1000", "1.5GiB" and the like into bytes.
// Suffixes: B, KiB, MiB, GiB, TiB (powers of 1024) and kB, MB, GB, TB (powers
// of 1000), case-insensitive. The error text names the accepted suffixes.
tl::expected<std::uint64_t, std::string> parse_size(std::string_view text);

} // namespace pt2cache::config
