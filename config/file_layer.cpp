// SPDX-License-Identifier: MIT
//
// The TOML file layer.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "config/layers.hpp"
#include "config/values.hpp"

#include <fmt/core.h>
#include <toml++/toml.h>

namespace pt2cache::config {

namespace {

tl::unexpected<ConfigError> fail(std::string message) {
    return tl::make_unexpected(ConfigError{std::move(message)});
}

// How a TOML value was written, for error messages.
std::string describe(const toml::node& node) {
    if (auto text = node.as_string()) {
        return quote(text->get());
    }
    if (auto number = node.as_integer()) {
        return fmt::format("{}", number->get());
    }
    if (auto number = node.as_floating_point()) {
        return fmt::format("{}", number->get());
    }
    if (auto flag = node.as_boolean()) {
        return flag->get() ? "true" : "false";
    }
    if (node.is_array()) {
        return "an array";
    }
    if (node.is_table()) {
        return "a table";
    }
    return "a date or time";
}

std::string replace_newlines(std::string_view text) {
    std::string result(text);
    for (char& c : result) {
        if (c == '\n' || c == '\r') {
            c = ' ';
        }
    }
    return result;
}

// Converts a TOML value to the setting's type and checks it.
tl::expected<Value, std::string> convert(const Setting& setting, const toml::node& node) {
    auto got = [&](std::string_view expected) {
        return tl::make_unexpected(fmt::format("{}, got {}", expected, describe(node)));
    };
    switch (setting.kind) {
    case Kind::boolean:
        if (auto flag = node.as_boolean()) {
            return Value(flag->get());
        }
        return got("expected true or false");
    case Kind::integer:
        if (auto number = node.as_integer(); number && number->get() >= 0) {
            return check_value(setting, static_cast<std::uint64_t>(number->get()), describe(node));
        }
        return got(describe_integer_range(setting.min, setting.max));
    case Kind::size:
        if (auto number = node.as_integer(); number && number->get() >= 0) {
            return check_value(setting, static_cast<std::uint64_t>(number->get()), describe(node));
        }
        if (auto text = node.as_string()) {
            auto size = parse_size(text->get());
            if (!size) {
                return tl::make_unexpected(size.error());
            }
            return check_value(setting, *size, describe(node));
        }
        return got("expected a size like 10GiB or an integer number of bytes");
    case Kind::string:
    case Kind::nonempty:
    case Kind::log_level:
    case Kind::redis_url:
    case Kind::choice:
    case Kind::listen_address:
        if (auto text = node.as_string()) {
            return check_value(setting, text->get(), describe(node));
        }
        return got("expected a string");
    }
    return got("expected a value");
}

// A configuration is a few hundred bytes; this is far beyond any real one.
constexpr std::size_t k_max_config_file = 1 << 20;

tl::expected<std::string, ConfigError> read_text(const std::string& path) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) {
        return fail(fmt::format("{}: cannot read the config file: it is a directory", path));
    }
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        return fail(fmt::format("{}: cannot read the config file: {}", path, std::strerror(errno)));
    }
    // Read at most one byte past the limit, whatever the file claims to be
    // (a FIFO or /dev/zero has no size to trust).
    std::string text(k_max_config_file + 1, '\0');
    in.read(text.data(), static_cast<std::streamsize>(text.size()));
    if (in.bad()) {
        return fail(fmt::format("{}: cannot read the config file: {}", path, std::strerror(errno)));
    }
    text.resize(static_cast<std::size_t>(in.gcount()));
    if (text.size() > k_max_config_file) {
        return fail(
            fmt::format("{}: the config file is larger than {} bytes", path, k_max_config_file));
    }
    return text;
}

} // namespace

tl::expected<Layer, ConfigError> read_file_layer(const std::string& path) {
    auto text = read_text(path);
    if (!text) {
        return tl::make_unexpected(text.error());
    }
    toml::table root;
    try {
        root = toml::parse(*text, path);
    } catch (const toml::parse_error& error) {
        const auto& begin = error.source().begin;
        return fail(fmt::format("{}:{}:{}: TOML syntax error: {}", path, begin.line, begin.column,
                                replace_newlines(error.description())));
    }

    Layer layer;
    Origin origin{Source::file, path};
    for (auto&& [section_key, section_node] : root) {
        std::string_view section = section_key.str();
        bool known = std::find(section_names().begin(), section_names().end(), section) !=
                     section_names().end();
        if (!known) {
            return fail(fmt::format("{}: {}: unknown section; the sections are {}", path, section,
                                    section_list()));
        }
        const toml::table* table = section_node.as_table();
        if (table == nullptr) {
            return fail(fmt::format("{}: {}: expected a table [{}], got {}", path, section, section,
                                    describe(section_node)));
        }
        for (auto&& [name, node] : *table) {
            std::string key = fmt::format("{}.{}", section, name.str());
            const Setting* setting = find_setting(key);
            if (setting == nullptr) {
                return fail(fmt::format("{}: {}: unknown key; [{}] accepts {}", path, key, section,
                                        keys_of_section(section)));
            }
            auto value = convert(*setting, node);
            if (!value) {
                return fail(error_prefix(origin, key) + value.error());
            }
            layer.push_back({setting, std::move(*value), origin});
        }
    }
    return layer;
}

} // namespace pt2cache::config
