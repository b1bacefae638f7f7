// SPDX-License-Identifier: MIT
//
// Parsers for setting values written as text (environment variables, flags,
// size strings in the file). They return the problem without saying where the
// text came from; the caller prefixes the file, variable or flag.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <tl/expected.hpp>

namespace pt2cache::config {

// The spdlog level names, in increasing severity.
std::span<const std::string_view> log_level_names();

// Accepts a log level name in any case and returns it in lower case.
tl::expected<std::string, std::string> parse_log_level(std::string_view text);

// Accepts true/false, 1/0, yes/no and on/off in any case.
tl::expected<bool, std::string> parse_bool(std::string_view text);

// Accepts a decimal integer in [`min`, `max`].
tl::expected<std::uint64_t, std::string> parse_integer(std::string_view text, std::uint64_t min,
                                                       std::uint64_t max);

// "expected an integer from 1 to 64" or "expected an integer of at least 0";
// shared by the text and TOML paths so both phrase a range the same way.
std::string describe_integer_range(std::uint64_t min, std::uint64_t max);

// `text` as a TOML basic string, quotes included.
std::string quote(std::string_view text);

// Returns `text` with leading and trailing ASCII whitespace removed.
std::string_view trim(std::string_view text);

} // namespace pt2cache::config
