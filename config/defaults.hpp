// SPDX-License-Identifier: MIT
//
// Defaults that depend on the environment: the socket, the disk cache root
// and the config file location.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "config/config.hpp"

namespace pt2cache::config {

// The value of `name` in `env`, or std::nullopt when it is unset or empty.
std::optional<std::string> lookup(const Environment& env, std::string_view name);

// `dir` + "/" + `name`, without doubling a trailing slash of `dir`.
std::string join_path(std::string_view dir, std::string_view name);

struct DerivedDefault {
    std::string value;
    std::string from; // the environment variable it came from, empty if none
};

// $TORCHINDUCTOR_CACHE_DIR/pt2cache, else ${XDG_CACHE_HOME:-$HOME/.cache}/pt2cache.
// Without HOME, the home directory from the password database. Empty value
// when no home directory can be found.
DerivedDefault default_cache_dir(const Environment& env);

// Like default_socket_path(), saying which variable it came from.
DerivedDefault default_socket(const Environment& env);

// ${XDG_CONFIG_HOME:-$HOME/.config}/pt2cache/pt2cached.toml; empty when no
// home directory can be found.
std::string default_config_path(const Environment& env);

} // namespace pt2cache::config
