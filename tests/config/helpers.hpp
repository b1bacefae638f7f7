// SPDX-License-Identifier: MIT
//
// Shared by the config tests: a fake environment and config files in a
// scratch directory.
#pragma once

#include <fstream>
#include <map>
#include <string>

#include "config/config.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

namespace pt2cache::tests {

using Vars = std::map<std::string, std::string, std::less<>>;

// An environment holding exactly `vars`.
inline config::Environment make_env(Vars vars) {
    return [vars = std::move(vars)](std::string_view name) -> std::optional<std::string> {
        auto it = vars.find(name);
        if (it == vars.end()) {
            return std::nullopt;
        }
        return it->second;
    };
}

// Checks where the value of `key` came from.
inline void check_origin(const config::Loaded& loaded, const std::string& key,
                         config::Source source, const std::string& detail) {
    INFO(key);
    auto it = loaded.origins.find(key);
    REQUIRE(it != loaded.origins.end());
    CHECK(it->second.source == source);
    CHECK(it->second.detail == detail);
}

// A scratch directory that is also HOME, so that no test reads the real
// user's config file.
class ConfigFixture {
public:
    ConfigFixture()
        : m_home(m_dir.path().string()) {}

    const std::string& home() const { return m_home; }

    // Writes `text` to `name` in the scratch directory and returns its path.
    std::string write(const std::string& name, const std::string& text) const {
        std::string path = (m_dir / name).string();
        std::ofstream(path, std::ios::binary) << text;
        return path;
    }

    // HOME plus `vars`.
    config::Environment env(Vars vars = {}) const {
        vars.emplace("HOME", m_home);
        return make_env(std::move(vars));
    }

    // Loads with the file `text` (if not empty) as --config.
    tl::expected<config::Loaded, config::ConfigError>
    load(const std::string& text, Vars vars = {},
         std::vector<std::pair<std::string, std::string>> flags = {}) const {
        config::LoadOptions options;
        if (!text.empty()) {
            options.config_path = write("pt2cached.toml", text);
        }
        options.flags = std::move(flags);
        return config::load(options, env(std::move(vars)));
    }

    // The path load() writes the file to.
    std::string file_path() const { return (m_dir / "pt2cached.toml").string(); }

private:
    TempDir m_dir;
    std::string m_home;
};

} // namespace pt2cache::tests
