// SPDX-License-Identifier: MIT
//
// The environment and command-line layers, whose values arrive as text.
#include "config/defaults.hpp"
#include "config/layers.hpp"

#include <fmt/core.h>

namespace pt2cache::config {

namespace {

tl::unexpected<ConfigError> fail(std::string message) {
    return tl::make_unexpected(ConfigError{std::move(message)});
}

// A seed switch follows PyTorch: "1" enables, any other value disables. When
// both a variable and its alias are set, "1" in either wins.
std::optional<Assignment> read_seed(const Setting& setting, const Environment& env) {
    std::optional<Assignment> result;
    for (auto name : {setting.env, setting.env_alias}) {
        if (name.empty()) {
            continue;
        }
        auto text = lookup(env, name);
        if (!text) {
            continue;
        }
        bool on = *text == "1";
        if (!result || (on && !std::get<bool>(result->value))) {
            result = Assignment{&setting, on, Origin{Source::environment, std::string(name)}};
        }
    }
    return result;
}

} // namespace

std::string error_prefix(const Origin& origin, std::string_view key) {
    switch (origin.source) {
    case Source::file:
        return fmt::format("{}: {}: ", origin.detail, key);
    case Source::environment:
        return fmt::format("environment variable {} ({}): ", origin.detail, key);
    case Source::flag:
        return fmt::format("command line: {}: ", key);
    case Source::default_value:
        break;
    }
    if (origin.detail.empty()) {
        return fmt::format("{} (default): ", key);
    }
    return fmt::format("{} (default from {}): ", key, origin.detail);
}

tl::expected<Layer, ConfigError> read_env_layer(const Environment& env) {
    Layer layer;
    for (const auto& setting : settings()) {
        if (setting.env.empty()) {
            continue;
        }
        if (setting.seed) {
            if (auto assignment = read_seed(setting, env)) {
                layer.push_back(std::move(*assignment));
            }
            continue;
        }
        auto text = lookup(env, setting.env);
        if (!text) {
            continue;
        }
        Origin origin{Source::environment, std::string(setting.env)};
        auto value = parse_text(setting, *text);
        if (!value) {
            return fail(error_prefix(origin, setting.key) + value.error());
        }
        layer.push_back({&setting, std::move(*value), std::move(origin)});
    }
    return layer;
}

tl::expected<Layer, ConfigError>
read_flag_layer(const std::vector<std::pair<std::string, std::string>>& flags) {
    Layer layer;
    for (const auto& [key, text] : flags) {
        Origin origin{Source::flag, key};
        const Setting* setting = find_setting(key);
        if (setting == nullptr) {
            auto section = std::string_view(key).substr(0, key.find('.'));
            std::string accepted = keys_of_section(section);
            if (accepted.empty() || key.find('.') == std::string::npos) {
                return fail(fmt::format("command line: {}: unknown setting; expected section.key "
                                        "with a section among {}",
                                        key, section_list()));
            }
            return fail(fmt::format("command line: {}: unknown key; [{}] accepts {}", key, section,
                                    accepted));
        }
        auto value = parse_text(*setting, text);
        if (!value) {
            return fail(error_prefix(origin, key) + value.error());
        }
        layer.push_back({setting, std::move(*value), std::move(origin)});
    }
    return layer;
}

} // namespace pt2cache::config
