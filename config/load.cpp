// SPDX-License-Identifier: MIT
//
// load(): the defaults, then each layer in order of precedence, then the rules
// that tie settings together.
#include <algorithm>
#include <array>
#include <filesystem>
#include <vector>

#include "config/config.hpp"
#include "config/defaults.hpp"
#include "config/layers.hpp"
#include "config/redis_url.hpp"

#include <fmt/core.h>

namespace pt2cache::config {

namespace {

// sizeof(sockaddr_un::sun_path) on Linux, less the terminating NUL.
constexpr std::size_t k_max_socket_path = 107;

tl::unexpected<ConfigError> fail(std::string message) {
    return tl::make_unexpected(ConfigError{std::move(message)});
}

Loaded defaults(const Environment& env) {
    Loaded loaded;
    for (const auto& setting : settings()) {
        loaded.origins[std::string(setting.key)] = Origin{Source::default_value, ""};
    }
    auto socket = default_socket(env);
    loaded.config.socket_path = socket.value;
    loaded.origins["daemon.socket"].detail = socket.from;
    auto cache_dir = default_cache_dir(env);
    loaded.config.cache_dir = cache_dir.value;
    loaded.origins["disk.cache_dir"].detail = cache_dir.from;
    return loaded;
}

// A URL stands for the connection settings: it replaces all of them, so that
// a URL in a higher layer is not mixed with a user name from a lower one.
void expand_redis_url(Loaded& loaded, const Origin& origin) {
    Config& config = loaded.config;
    if (config.redis_url.empty()) {
        return;
    }
    auto url = parse_redis_url(config.redis_url);
    if (!url) {
        return; // checked when the layer was read
    }
    config.redis_unix_socket = url->unix_socket;
    config.redis_username = url->username;
    config.redis_password = url->password;
    config.redis_db = url->db;
    std::vector<std::string_view> keys = {"remote.unix_socket", "remote.username",
                                          "remote.password", "remote.db"};
    if (url->unix_socket.empty()) {
        config.redis_host = url->host;
        config.redis_port = url->port;
        keys.insert(keys.end(), {"remote.host", "remote.port"});
    }
    for (auto key : keys) {
        loaded.origins[std::string(key)] = origin;
    }
}

void apply(Loaded& loaded, const Assignment& assignment) {
    const Setting& setting = *assignment.setting;
    store(loaded.config, setting, assignment.value);
    loaded.origins[std::string(setting.key)] = assignment.origin;
    if (setting.kind == Kind::redis_url) {
        expand_redis_url(loaded, assignment.origin);
    } else if ((setting.key == "remote.host" || setting.key == "remote.port") &&
               !loaded.config.redis_unix_socket.empty()) {
        // Asking for a TCP address overrides a Unix socket from a lower layer.
        // Within one layer the socket and the URL are applied after host and
        // port, so they win there.
        loaded.config.redis_unix_socket.clear();
        loaded.origins["remote.unix_socket"] = assignment.origin;
    }
}

void apply_layer(Loaded& loaded, Layer layer) {
    std::stable_sort(layer.begin(), layer.end(), [](const auto& a, const auto& b) {
        return a.setting->phase < b.setting->phase;
    });
    for (const auto& assignment : layer) {
        apply(loaded, assignment);
    }
}

// Why a switch has the value it has, for a warning: "TORCHINDUCTOR_FX_GRAPH_CACHE=0",
// "set in /x/pt2cached.toml", "set on the command line" or "default".
std::string explain(const Origin& origin, const Environment& env) {
    switch (origin.source) {
    case Source::environment:
        return fmt::format("{}={}", origin.detail, env(origin.detail).value_or(""));
    case Source::file:
        return fmt::format("set in {}", origin.detail);
    case Source::flag:
        return "set on the command line";
    case Source::default_value:
        break;
    }
    return "default";
}

struct Dependency {
    bool Config::*dependent;
    std::string_view dependent_key;
    std::string_view dependent_name;
    bool Config::*required;
    std::string_view required_key;
    std::string_view required_name;
    std::string_view reason;
};

constexpr std::array<Dependency, 2> k_dependencies = {{
    {&Config::autograd_cache, "caches.autograd_cache", "autograd_cache", &Config::fx_graph_cache,
     "caches.fx_graph_cache", "fx_graph_cache", "AOTAutograd entries need FX graph entries"},
    {&Config::autograd_remote_cache, "remote.autograd", "remote.autograd",
     &Config::fx_graph_remote_cache, "remote.fx_graph", "remote.fx_graph",
     "remote AOTAutograd entries need remote FX graph entries"},
}};

void apply_rules(Loaded& loaded, const Environment& env) {
    Config& config = loaded.config;
    for (const auto& rule : k_dependencies) {
        if (!(config.*rule.dependent) || config.*rule.required) {
            continue;
        }
        config.*rule.dependent = false;
        const Origin why = loaded.origins[std::string(rule.required_key)];
        loaded.warnings.push_back(fmt::format("{} is off because {} is off ({}): {}",
                                              rule.dependent_name, rule.required_name,
                                              explain(why, env), rule.reason));
        // The switch that decided the value is the one to report.
        loaded.origins[std::string(rule.dependent_key)] = why;
    }
    config.remote_enabled = config.fx_graph_remote_cache || config.autograd_remote_cache ||
                            config.autotune_remote_cache || config.bundled_autotune_remote_cache ||
                            config.pgo_remote_cache;
}

tl::expected<void, ConfigError> validate(const Loaded& loaded) {
    const Config& config = loaded.config;
    if (config.cache_dir.empty()) {
        return fail("disk.cache_dir: no default, because neither TORCHINDUCTOR_CACHE_DIR, "
                    "XDG_CACHE_HOME nor HOME is set and the password database has no home "
                    "directory; set disk.cache_dir or pass --cache-dir");
    }
    if (config.socket_path.size() > k_max_socket_path) {
        return fail(fmt::format("{}expected a path of at most {} bytes (the limit of a Unix "
                                "socket address), got {} bytes",
                                error_prefix(loaded.origins.at("daemon.socket"), "daemon.socket"),
                                k_max_socket_path, config.socket_path.size()));
    }
    if (auto nodes = parse_redis_url_list(config.remote_cluster_nodes); !nodes) {
        return fail(fmt::format(
            "{}{}", error_prefix(loaded.origins.at("remote.cluster_nodes"), "remote.cluster_nodes"),
            nodes.error()));
    }
    return {};
}

} // namespace

std::string_view source_name(Source source) {
    switch (source) {
    case Source::default_value:
        return "default";
    case Source::file:
        return "file";
    case Source::environment:
        return "env";
    case Source::flag:
        return "flag";
    }
    return "unknown";
}

tl::expected<Loaded, ConfigError> load(const LoadOptions& options, const Environment& env) {
    Loaded loaded = defaults(env);

    std::string path;
    if (options.config_path) {
        path = *options.config_path;
    } else {
        path = default_config_path(env);
        std::error_code ec;
        if (!path.empty() && !std::filesystem::exists(path, ec)) {
            path.clear();
        }
    }
    if (options.config_path || !path.empty()) {
        auto layer = read_file_layer(path);
        if (!layer) {
            return tl::make_unexpected(layer.error());
        }
        apply_layer(loaded, std::move(*layer));
        loaded.config_file = path;
    }

    auto env_layer = read_env_layer(env);
    if (!env_layer) {
        return tl::make_unexpected(env_layer.error());
    }
    apply_layer(loaded, std::move(*env_layer));

    auto flag_layer = read_flag_layer(options.flags);
    if (!flag_layer) {
        return tl::make_unexpected(flag_layer.error());
    }
    apply_layer(loaded, std::move(*flag_layer));

    if (auto valid = validate(loaded); !valid) {
        return tl::make_unexpected(valid.error());
    }
    apply_rules(loaded, env);
    return loaded;
}

} // namespace pt2cache::config
