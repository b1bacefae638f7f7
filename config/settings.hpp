// SPDX-License-Identifier: MIT
//
// The table of settings: for each TOML key, its type, range, environment
// variables and Config member. Every layer (file, environment, flags) and
// render() work from this one table.
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <variant>

#include "config/config.hpp"

#include <tl/expected.hpp>

namespace pt2cache::config {

enum class Kind {
    string,         // any string
    nonempty,       // a non-empty string (paths, host names)
    boolean,        // true/false in the file; true/false/1/0/yes/no/on/off as text
    integer,        // an unsigned integer in [min, max]
    size,           // an integer number of bytes or a string for parse_size, in [min, max]
    log_level,      // one of log_level_names()
    redis_url,      // empty, or a URL for parse_redis_url(); sets the other remote.* fields
    choice,         // one of `Setting::choices`, any case; stored in lower case
    listen_address, // empty, or HOST:PORT for parse_listen_address()
};

// Settings are applied in this order within one layer, so that a URL wins
// over host and port given beside it (as in PyTorch, where
// TORCHINDUCTOR_REDIS_URL wins over TORCHINDUCTOR_REDIS_HOST).
enum class Phase { normal, unix_socket, url };

using Field = std::variant<std::string Config::*, bool Config::*, unsigned Config::*,
                           std::uint64_t Config::*, std::uint16_t Config::*, int Config::*>;

struct Setting {
    std::string_view key; // "section.key"
    Kind kind;
    Field field;
    std::uint64_t min = 0;
    std::uint64_t max = std::numeric_limits<std::uint64_t>::max();
    // Environment variables, in order of preference; empty when none.
    std::string_view env = {};
    std::string_view env_alias = {};
    // The environment value follows PyTorch's rule for its cache switches:
    // "1" enables and any other value disables.
    bool seed = false;
    // Printed as "***" by render().
    bool secret = false;
    Phase phase = Phase::normal;
    // The accepted words of a Kind::choice setting, in lower case.
    std::span<const std::string_view> choices = {};
};

// A value parsed for a setting, before it is stored into Config.
using Value = std::variant<std::string, bool, std::uint64_t>;

// Every setting, grouped by section in the order render() prints them.
std::span<const Setting> settings();

// The section names, in order.
std::span<const std::string_view> section_names();

// The setting for "section.key", or nullptr.
const Setting* find_setting(std::string_view key);

// "disk" for "disk.max_size".
std::string_view section_of(const Setting& setting);

// "max_size" for "disk.max_size".
std::string_view name_of(const Setting& setting);

// The section names, comma-separated, for error messages.
std::string section_list();

// The keys of `section`, comma-separated, for error messages.
std::string keys_of_section(std::string_view section);

// Parses `text` (an environment value or a flag value) for `setting`. The
// seed rule is not applied here; the environment layer handles it.
tl::expected<Value, std::string> parse_text(const Setting& setting, std::string_view text);

// Checks a value of the right type against the setting's range and form.
// `shown` is how the value was written, for the error message.
tl::expected<Value, std::string> check_value(const Setting& setting, Value value,
                                             std::string_view shown);

// Stores `value` into the setting's Config member. A remote.url value is
// stored as given; the caller expands it.
void store(Config& config, const Setting& setting, const Value& value);

// The effective value in TOML syntax, secrets masked.
std::string format_value(const Config& config, const Setting& setting);

} // namespace pt2cache::config
