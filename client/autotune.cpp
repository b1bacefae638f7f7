// SPDX-License-Identifier: MIT
#include "client/autotune.hpp"

#include <limits>
#include <utility>

#include "proto/bytes.hpp"
#include "proto/python_json.hpp"

#include <fmt/format.h>

namespace pt2cache::client {

namespace {

using Json = nlohmann::ordered_json;
namespace at = proto::autotune;

} // namespace

std::string configs_hash(const std::vector<TritonConfig>& candidates) {
    return at::configs_hash(candidates);
}

AutotuneCache::AutotuneCache(Client& client, AutotuneSettings settings)
    : m_client(&client)
    , m_settings(std::move(settings))
    , m_prepared(at::prepare_key(m_settings.filename, m_settings.cache_key_tag)) {
    if (m_settings.local_cache) {
        m_local_key = at::local_key(m_prepared, m_settings.torch_key);
    }
    if (m_settings.remote_cache) {
        m_remote_key =
            at::remote_entry_key(at::remote_key(proto::to_hex(m_settings.torch_key),
                                                m_settings.backend_hash, m_settings.configs_hash),
                                 m_prepared);
    }
}

bool AutotuneCache::drop_bad_token(const Error& error) {
    if (!m_settings.bundle_token || error.kind != ErrorKind::server ||
        (error.status != Status::unknown_token && error.status != Status::unknown_op)) {
        return false;
    }
    m_settings.bundle_token.reset();
    return true;
}

std::optional<Json> AutotuneCache::read_entry(const std::string& key, bool in_bundle) {
    const auto token = in_bundle ? m_settings.bundle_token : std::nullopt;
    auto value = m_client->get(at::k_namespace, key, token);
    if (!value && token && drop_bad_token(value.error())) {
        value = m_client->get(at::k_namespace, key);
    }
    if (!value) {
        m_last_error = std::move(value.error());
        return std::nullopt;
    }
    if (!*value) {
        return std::nullopt;
    }
    const auto& bytes = **value;
    auto json = proto::parse_json(
        std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
    // `if best_config := cache.get(key)` and `isinstance(best_config, dict)`.
    if (json.is_discarded() || !json.is_object() || json.empty()) {
        return std::nullopt;
    }
    return json;
}

std::optional<Json> AutotuneCache::read() {
    m_last_error.reset();
    if (!m_local_key.empty()) {
        if (auto best = read_entry(m_local_key, true)) {
            return best;
        }
    }
    if (!m_remote_key.empty()) {
        if (auto best = read_entry(m_remote_key, false)) {
            return best;
        }
    }
    return std::nullopt;
}

std::optional<TritonConfig> AutotuneCache::read_best(const std::vector<TritonConfig>& candidates) {
    auto best = read();
    if (!best) {
        return std::nullopt;
    }
    return at::select(*best, m_settings.configs_hash, candidates,
                      m_settings.coordinate_descent_tuning, m_settings.has_warp_spec);
}

BestConfig AutotuneCache::best_config(const TritonConfig& config, std::uint64_t time_taken_ns,
                                      bool found_by_coordesc,
                                      std::optional<std::string> triton_cache_hash) const {
    return at::make_best_config(config, m_settings.configs_hash, time_taken_ns, found_by_coordesc,
                                std::move(triton_cache_hash), m_settings.has_warp_spec);
}

tl::expected<void, Error> AutotuneCache::write_entry(const std::string& key,
                                                     const std::string& json, bool in_bundle) {
    PutOptions options;
    options.bundle_token = in_bundle ? m_settings.bundle_token : std::nullopt;
    auto stored = m_client->put(at::k_namespace, key, proto::as_bytes(json), options);
    if (!stored && options.bundle_token && drop_bad_token(stored.error())) {
        options.bundle_token.reset();
        stored = m_client->put(at::k_namespace, key, proto::as_bytes(json), options);
    }
    if (!stored) {
        return tl::unexpected(std::move(stored.error()));
    }
    return {};
}

tl::expected<void, Error> AutotuneCache::save(const TritonConfig& config,
                                              std::uint64_t time_taken_ns, bool found_by_coordesc,
                                              std::optional<std::string> triton_cache_hash) {
    m_last_error.reset();
    const std::string json =
        best_config(config, time_taken_ns, found_by_coordesc, std::move(triton_cache_hash))
            .to_json();
    // Local first, in the bundle; then remote, as Inductor does.
    for (const bool local : {true, false}) {
        const std::string& key = local ? m_local_key : m_remote_key;
        if (key.empty()) {
            continue;
        }
        if (auto ok = write_entry(key, json, local); !ok && !m_last_error) {
            m_last_error = std::move(ok.error());
        }
    }
    if (m_last_error) {
        return tl::unexpected(*m_last_error);
    }
    return {};
}

// ---- configs as JSON ----

std::string config_to_json(const TritonConfig& config) {
    Json kwargs = Json::object();
    for (const auto& [name, value] : config.kwargs) {
        kwargs[name] = value;
    }
    Json out = Json::object();
    out["kwargs"] = std::move(kwargs);
    out["num_warps"] = config.num_warps;
    out["num_stages"] = config.num_stages;
    out["num_consumer_groups"] = config.num_consumer_groups;
    out["num_buffers_warp_spec"] = config.num_buffers_warp_spec;
    out["found_by_coordesc"] = config.found_by_coordesc;
    if (!config.extra_options.is_null()) {
        out["extra_options"] = config.extra_options;
    }
    return proto::python_json_dumps(out);
}

tl::expected<TritonConfig, std::string> config_from_value(const Json& value) {
    if (!value.is_object()) {
        return tl::unexpected(fmt::format("a config is a JSON object, not {}", value.type_name()));
    }
    TritonConfig config;
    for (const auto& [name, item] : value.items()) {
        if (name == "kwargs") {
            if (!item.is_object()) {
                return tl::unexpected(
                    fmt::format("config \"kwargs\" must be an object, not {}", item.type_name()));
            }
            for (const auto& [kwarg, kwarg_value] : item.items()) {
                config.kwargs.emplace_back(kwarg, kwarg_value);
            }
        } else if (name == "found_by_coordesc") {
            if (!item.is_boolean()) {
                return tl::unexpected(
                    std::string("config \"found_by_coordesc\" must be a boolean"));
            }
            config.found_by_coordesc = item.get<bool>();
        } else if (name == "extra_options") {
            config.extra_options = item;
        } else if (name == "num_warps" || name == "num_stages" || name == "num_consumer_groups" ||
                   name == "num_buffers_warp_spec") {
            const auto number = at::as_int64(item);
            if (!number) {
                return tl::unexpected(
                    fmt::format("config \"{}\" must be a 64-bit integer, not {}", name,
                                item.is_number_integer() ? "out of range" : item.type_name()));
            }
            std::int64_t* field = &config.num_buffers_warp_spec;
            if (name == "num_warps") {
                field = &config.num_warps;
            } else if (name == "num_stages") {
                field = &config.num_stages;
            } else if (name == "num_consumer_groups") {
                field = &config.num_consumer_groups;
            }
            *field = *number;
        } else {
            return tl::unexpected(
                fmt::format("unknown config member \"{}\" (expected kwargs, num_warps, num_stages, "
                            "num_consumer_groups, num_buffers_warp_spec, found_by_coordesc, "
                            "extra_options)",
                            name));
        }
    }
    return config;
}

tl::expected<TritonConfig, std::string> config_from_json(std::string_view text) {
    const auto value = proto::parse_json(text);
    if (value.is_discarded()) {
        return tl::unexpected(std::string("a config must be JSON"));
    }
    return config_from_value(value);
}

tl::expected<std::vector<TritonConfig>, std::string> configs_from_json(std::string_view text) {
    const auto value = proto::parse_json(text);
    if (value.is_discarded() || !value.is_array()) {
        return tl::unexpected(std::string("candidate configs must be a JSON array"));
    }
    std::vector<TritonConfig> configs;
    configs.reserve(value.size());
    for (std::size_t i = 0; i < value.size(); ++i) {
        auto config = config_from_value(value[i]);
        if (!config) {
            return tl::unexpected(fmt::format("candidate {}: {}", i, config.error()));
        }
        configs.push_back(std::move(*config));
    }
    return configs;
}

} // namespace pt2cache::client
