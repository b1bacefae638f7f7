// SPDX-License-Identifier: MIT
#include "config/settings.hpp"

#include <algorithm>
#include <array>
#include <type_traits>
#include <utility>

#include "config/listen_address.hpp"
#include "config/redis_url.hpp"
#include "config/values.hpp"

#include <fmt/core.h>

namespace pt2cache::config {

namespace {

constexpr std::uint64_t k_max_unsigned = std::numeric_limits<unsigned>::max();
constexpr std::uint64_t k_max_value_size = (4ull << 30) - 1;
constexpr std::uint64_t k_max_db = std::numeric_limits<std::int32_t>::max();

constexpr std::array<std::string_view, 2> k_write_modes = {"sync", "async"};
constexpr std::array<std::string_view, 3> k_cluster_modes = {"auto", "true", "false"};

constexpr std::array<std::string_view, 8> k_sections = {"daemon", "memory", "disk",   "caches",
                                                        "remote", "resp",   "bundle", "metrics"};

// clang-format off
constexpr std::array k_settings = {
    // [daemon]
    Setting{.key = "daemon.socket", .kind = Kind::nonempty, .field = &Config::socket_path,
            .env = "PT2CACHE_SOCKET"},
    Setting{.key = "daemon.log_level", .kind = Kind::log_level, .field = &Config::log_level,
            .env = "PT2CACHE_LOG_LEVEL"},
    Setting{.key = "daemon.io_threads", .kind = Kind::integer, .field = &Config::io_threads,
            .min = 1, .max = 64},
    Setting{.key = "daemon.blocking_threads", .kind = Kind::integer,
            .field = &Config::blocking_threads, .min = 1, .max = 256},
    Setting{.key = "daemon.idle_exit_s", .kind = Kind::integer, .field = &Config::idle_exit_s},
    Setting{.key = "daemon.max_value_size", .kind = Kind::size, .field = &Config::max_value_size,
            .min = 1, .max = k_max_value_size},
    Setting{.key = "daemon.max_connections", .kind = Kind::integer,
            .field = &Config::max_connections, .min = 1, .max = 1'000'000},
    Setting{.key = "daemon.max_connections_per_process", .kind = Kind::integer,
            .field = &Config::max_connections_per_process, .min = 1, .max = 1'000'000},
    Setting{.key = "daemon.max_inflight_bytes", .kind = Kind::size,
            .field = &Config::max_inflight_bytes, .min = 1 << 20},
    Setting{.key = "daemon.max_reply_bytes", .kind = Kind::size,
            .field = &Config::max_reply_bytes, .min = 1 << 20},
    // [memory]
    Setting{.key = "memory.max_size", .kind = Kind::size, .field = &Config::memory_max_size},
    // [disk]
    Setting{.key = "disk.cache_dir", .kind = Kind::nonempty, .field = &Config::cache_dir},
    Setting{.key = "disk.max_size", .kind = Kind::size, .field = &Config::disk_max_size},
    Setting{.key = "disk.compress_threshold", .kind = Kind::size,
            .field = &Config::compress_threshold},
    Setting{.key = "disk.compress_level", .kind = Kind::integer, .field = &Config::compress_level,
            .min = 1, .max = 19},
    Setting{.key = "disk.write_mode", .kind = Kind::choice, .field = &Config::disk_write_mode,
            .choices = k_write_modes},
    Setting{.key = "disk.write_queue_size", .kind = Kind::size,
            .field = &Config::disk_write_queue_size, .min = 1 << 20},
    Setting{.key = "disk.small_entry_max", .kind = Kind::size,
            .field = &Config::disk_small_entry_max, .max = 1 << 20}, // k_small_value_limit
    // [caches]
    Setting{.key = "caches.fx_graph_cache", .kind = Kind::boolean, .field = &Config::fx_graph_cache,
            .env = "TORCHINDUCTOR_FX_GRAPH_CACHE", .seed = true},
    Setting{.key = "caches.autograd_cache", .kind = Kind::boolean, .field = &Config::autograd_cache,
            .env = "TORCHINDUCTOR_AUTOGRAD_CACHE", .seed = true},
    Setting{.key = "caches.force_disable_caches", .kind = Kind::boolean,
            .field = &Config::force_disable_caches, .env = "TORCHINDUCTOR_FORCE_DISABLE_CACHES",
            .env_alias = "TORCH_COMPILE_FORCE_DISABLE_CACHES", .seed = true},
    // [remote]
    Setting{.key = "remote.url", .kind = Kind::redis_url, .field = &Config::redis_url,
            .env = "TORCHINDUCTOR_REDIS_URL", .phase = Phase::url},
    Setting{.key = "remote.host", .kind = Kind::nonempty, .field = &Config::redis_host,
            .env = "TORCHINDUCTOR_REDIS_HOST"},
    Setting{.key = "remote.port", .kind = Kind::integer, .field = &Config::redis_port, .min = 1,
            .max = 65535, .env = "TORCHINDUCTOR_REDIS_PORT"},
    Setting{.key = "remote.unix_socket", .kind = Kind::string, .field = &Config::redis_unix_socket,
            .phase = Phase::unix_socket},
    Setting{.key = "remote.username", .kind = Kind::string, .field = &Config::redis_username},
    Setting{.key = "remote.password", .kind = Kind::string, .field = &Config::redis_password,
            .secret = true},
    Setting{.key = "remote.db", .kind = Kind::integer, .field = &Config::redis_db,
            .max = k_max_db},
    Setting{.key = "remote.fx_graph", .kind = Kind::boolean,
            .field = &Config::fx_graph_remote_cache, .env = "TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE",
            .seed = true},
    Setting{.key = "remote.autograd", .kind = Kind::boolean,
            .field = &Config::autograd_remote_cache, .env = "TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE",
            .seed = true},
    Setting{.key = "remote.autotune", .kind = Kind::boolean,
            .field = &Config::autotune_remote_cache, .env = "TORCHINDUCTOR_AUTOTUNE_REMOTE_CACHE",
            .seed = true},
    Setting{.key = "remote.bundled_autotune", .kind = Kind::boolean,
            .field = &Config::bundled_autotune_remote_cache,
            .env = "TORCHINDUCTOR_BUNDLED_AUTOTUNE_REMOTE_CACHE", .seed = true},
    Setting{.key = "remote.pgo", .kind = Kind::boolean, .field = &Config::pgo_remote_cache,
            .env = "TORCH_DYNAMO_AUTOMATIC_DYNAMIC_REMOTE_PGO", .seed = true},
    Setting{.key = "remote.expire_s", .kind = Kind::integer, .field = &Config::redis_expire_s,
            .env = "TORCHINDUCTOR_REDIS_EXPIRE"},
    Setting{.key = "remote.read_only", .kind = Kind::boolean, .field = &Config::remote_read_only},
    Setting{.key = "remote.connect_timeout_ms", .kind = Kind::integer,
            .field = &Config::remote_connect_timeout_ms, .min = 1, .max = 60000},
    Setting{.key = "remote.op_timeout_ms", .kind = Kind::integer,
            .field = &Config::remote_op_timeout_ms, .min = 1, .max = 600000},
    Setting{.key = "remote.pool_size", .kind = Kind::integer, .field = &Config::remote_pool_size,
            .min = 1, .max = 64},
    Setting{.key = "remote.write_behind_queue_bytes", .kind = Kind::size,
            .field = &Config::write_behind_queue_bytes},
    Setting{.key = "remote.max_value_size", .kind = Kind::size,
            .field = &Config::remote_max_value_size, .min = 1, .max = k_max_value_size},
    Setting{.key = "remote.cluster", .kind = Kind::choice, .field = &Config::remote_cluster,
            .choices = k_cluster_modes},
    Setting{.key = "remote.cluster_nodes", .kind = Kind::string,
            .field = &Config::remote_cluster_nodes},
    Setting{.key = "remote.read_from_replicas", .kind = Kind::boolean,
            .field = &Config::remote_read_from_replicas},
    Setting{.key = "remote.tls", .kind = Kind::boolean, .field = &Config::redis_tls},
    Setting{.key = "remote.tls_ca_file", .kind = Kind::string, .field = &Config::redis_tls_ca_file},
    Setting{.key = "remote.tls_cert_file", .kind = Kind::string,
            .field = &Config::redis_tls_cert_file},
    Setting{.key = "remote.tls_key_file", .kind = Kind::string, .field = &Config::redis_tls_key_file},
    Setting{.key = "remote.tls_server_name", .kind = Kind::string,
            .field = &Config::redis_tls_server_name},
    Setting{.key = "remote.tls_verify", .kind = Kind::boolean, .field = &Config::redis_tls_verify},
    Setting{.key = "remote.signing_key_file", .kind = Kind::string,
            .field = &Config::remote_signing_key_file},
    // [resp]
    Setting{.key = "resp.password", .kind = Kind::string, .field = &Config::resp_password,
            .secret = true},
    // [bundle]
    Setting{.key = "bundle.idle_timeout_s", .kind = Kind::integer,
            .field = &Config::bundle_idle_timeout_s, .min = 1, .max = k_max_unsigned},
    // [metrics]
    Setting{.key = "metrics.listen", .kind = Kind::listen_address, .field = &Config::metrics_listen,
            .env = "PT2CACHE_METRICS_LISTEN"},
};
// clang-format on

// Whether the entry's range fits its Config member, so that store() never
// truncates.
constexpr bool range_fits(const Setting& setting) {
    return std::visit(
        [&](auto member) {
            using T = std::remove_reference_t<decltype(std::declval<Config&>().*member)>;
            if constexpr (std::is_same_v<T, std::string> || std::is_same_v<T, bool>) {
                return true;
            } else {
                return setting.min <= setting.max &&
                       setting.max <= static_cast<std::uint64_t>(std::numeric_limits<T>::max());
            }
        },
        setting.field);
}

static_assert(std::all_of(k_settings.begin(), k_settings.end(), range_fits));

std::string describe_size_range(std::uint64_t min, std::uint64_t max) {
    return fmt::format("expected a size from {} to {} bytes", min, max);
}

tl::expected<Value, std::string> parse_choice(const Setting& setting, std::string_view text) {
    std::string word(text);
    std::transform(word.begin(), word.end(), word.begin(), [](char c) {
        return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
    });
    if (std::find(setting.choices.begin(), setting.choices.end(), word) != setting.choices.end()) {
        return Value(std::move(word));
    }
    std::string accepted;
    for (const auto choice : setting.choices) {
        accepted += accepted.empty() ? "" : ", ";
        accepted += choice;
    }
    return tl::make_unexpected(fmt::format("expected one of {}; got {}", accepted, quote(text)));
}

} // namespace

std::span<const Setting> settings() {
    return k_settings;
}

std::span<const std::string_view> section_names() {
    return k_sections;
}

const Setting* find_setting(std::string_view key) {
    auto it = std::find_if(k_settings.begin(), k_settings.end(),
                           [&](const Setting& setting) { return setting.key == key; });
    return it == k_settings.end() ? nullptr : &*it;
}

std::string_view section_of(const Setting& setting) {
    return setting.key.substr(0, setting.key.find('.'));
}

std::string_view name_of(const Setting& setting) {
    return setting.key.substr(setting.key.find('.') + 1);
}

std::string section_list() {
    std::string result;
    for (auto section : k_sections) {
        result += result.empty() ? "" : ", ";
        result += section;
    }
    return result;
}

std::string keys_of_section(std::string_view section) {
    std::string result;
    for (const auto& setting : k_settings) {
        if (section_of(setting) == section) {
            result += result.empty() ? "" : ", ";
            result += name_of(setting);
        }
    }
    return result;
}

tl::expected<Value, std::string> parse_text(const Setting& setting, std::string_view text) {
    switch (setting.kind) {
    case Kind::boolean: {
        auto value = parse_bool(text);
        if (!value) {
            return tl::make_unexpected(value.error());
        }
        return Value(*value);
    }
    case Kind::integer: {
        auto value = parse_integer(text, setting.min, setting.max);
        if (!value) {
            return tl::make_unexpected(value.error());
        }
        return Value(*value);
    }
    case Kind::size: {
        auto value = parse_size(text);
        if (!value) {
            return tl::make_unexpected(value.error());
        }
        return check_value(setting, *value, quote(text));
    }
    case Kind::string:
    case Kind::nonempty:
    case Kind::log_level:
    case Kind::redis_url:
    case Kind::choice:
    case Kind::listen_address:
        return check_value(setting, std::string(text), quote(text));
    }
    return tl::make_unexpected("unknown setting kind");
}

tl::expected<Value, std::string> check_value(const Setting& setting, Value value,
                                             std::string_view shown) {
    // A path, name or URL ends at a NUL for every system call: "/x\0y"
    // would silently be "/x" (a TOML string can hold one: "\u0000").
    if (const auto* text = std::get_if<std::string>(&value);
        text != nullptr && text->find('\0') != std::string::npos) {
        return tl::make_unexpected("expected no NUL byte (\\u0000) in the text");
    }
    switch (setting.kind) {
    case Kind::integer:
    case Kind::size: {
        auto number = std::get<std::uint64_t>(value);
        if (number < setting.min || number > setting.max) {
            auto range = setting.kind == Kind::size
                             ? describe_size_range(setting.min, setting.max)
                             : describe_integer_range(setting.min, setting.max);
            return tl::make_unexpected(fmt::format("{}, got {}", range, shown));
        }
        return value;
    }
    case Kind::nonempty:
        if (std::get<std::string>(value).empty()) {
            return tl::make_unexpected("expected a non-empty string, got \"\"");
        }
        return value;
    case Kind::log_level: {
        auto level = parse_log_level(std::get<std::string>(value));
        if (!level) {
            return tl::make_unexpected(level.error());
        }
        return Value(*level);
    }
    case Kind::redis_url: {
        const auto& text = std::get<std::string>(value);
        if (!text.empty()) {
            if (auto url = parse_redis_url(text); !url) {
                return tl::make_unexpected(url.error());
            }
        }
        return value;
    }
    case Kind::choice:
        return parse_choice(setting, std::get<std::string>(value));
    case Kind::listen_address: {
        const auto& text = std::get<std::string>(value);
        if (!text.empty()) {
            if (auto address = parse_listen_address(text); !address) {
                return tl::make_unexpected(address.error());
            }
        }
        return value;
    }
    case Kind::string:
    case Kind::boolean:
        return value;
    }
    return value;
}

void store(Config& config, const Setting& setting, const Value& value) {
    std::visit(
        [&](auto member) {
            auto& target = config.*member;
            using T = std::remove_reference_t<decltype(target)>;
            if constexpr (std::is_same_v<T, std::string>) {
                target = std::get<std::string>(value);
            } else if constexpr (std::is_same_v<T, bool>) {
                target = std::get<bool>(value);
            } else {
                // check_value() kept the number within the member's range.
                target = static_cast<T>(std::get<std::uint64_t>(value));
            }
        },
        setting.field);
}

std::string format_value(const Config& config, const Setting& setting) {
    return std::visit(
        [&](auto member) -> std::string {
            const auto& value = config.*member;
            using T = std::remove_cv_t<std::remove_reference_t<decltype(value)>>;
            if constexpr (std::is_same_v<T, std::string>) {
                if (setting.secret && !value.empty()) {
                    return quote("***");
                }
                if (setting.kind == Kind::redis_url) {
                    return quote(mask_redis_url(value));
                }
                return quote(value);
            } else if constexpr (std::is_same_v<T, bool>) {
                return value ? "true" : "false";
            } else {
                return fmt::format("{}", value);
            }
        },
        setting.field);
}

} // namespace pt2cache::config
