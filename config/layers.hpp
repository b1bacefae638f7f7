// SPDX-License-Identifier: MIT
//
// The layers above the defaults: the TOML file, the environment and the
// command-line flags. Each is read completely, and checked, before any of it
// is applied.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/config.hpp"
#include "config/settings.hpp"

#include <tl/expected.hpp>

namespace pt2cache::config {

struct Assignment {
    const Setting* setting;
    Value value;
    Origin origin;
};

using Layer = std::vector<Assignment>;

// Where an error about `key` set from `origin` happened, ending in ": ", e.g.
// "/x/pt2cached.toml: disk.max_size: " or
// "environment variable TORCHINDUCTOR_REDIS_PORT (remote.port): ".
std::string error_prefix(const Origin& origin, std::string_view key);

// Reads and checks the TOML file at `path`.
tl::expected<Layer, ConfigError> read_file_layer(const std::string& path);

// Reads and checks the environment variables that settings name.
tl::expected<Layer, ConfigError> read_env_layer(const Environment& env);

// Checks ("section.key", "value") pairs from the command line.
tl::expected<Layer, ConfigError>
read_flag_layer(const std::vector<std::pair<std::string, std::string>>& flags);

} // namespace pt2cache::config
