// SPDX-License-Identifier: MIT
//
// Durations on the command line: "5s", "500ms", "2m", "1.5h", "1d"; a bare
// number is seconds. Pure functions, no I/O.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include <tl/expected.hpp>

namespace pt2cache::client::cli {

// `text` as milliseconds (rounded), or a message naming what is wrong.
// Accepts 0 to 30 days.
tl::expected<std::chrono::milliseconds, std::string> parse_duration(std::string_view text);

} // namespace pt2cache::client::cli
