// SPDX-License-Identifier: MIT
#include "client/cli/duration.hpp"

#include <array>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <utility>

#include <fmt/format.h>

namespace pt2cache::client::cli {

namespace {

constexpr double k_max_ms = 30.0 * 86400 * 1000;

constexpr std::array<std::pair<std::string_view, double>, 5> k_units = {{
    {"ms", 1.0},
    {"s", 1000.0},
    {"m", 60'000.0},
    {"h", 3'600'000.0},
    {"d", 86'400'000.0},
}};

} // namespace

tl::expected<std::chrono::milliseconds, std::string> parse_duration(std::string_view text) {
    const auto invalid = [&] {
        return tl::unexpected(fmt::format(
            "invalid duration \"{}\": expected a number with a unit, e.g. 500ms, 5s, 2m, 1h, 1d",
            text));
    };
    std::size_t digits = 0;
    while (digits < text.size() &&
           (std::isdigit(static_cast<unsigned char>(text[digits])) != 0 || text[digits] == '.')) {
        ++digits;
    }
    if (digits == 0) {
        return invalid();
    }
    const std::string number(text.substr(0, digits));
    char* end = nullptr;
    const double value = std::strtod(number.c_str(), &end);
    if (end != number.c_str() + number.size() || !std::isfinite(value)) {
        return invalid();
    }
    const std::string_view unit = text.substr(digits);
    double scale = 0;
    if (unit.empty()) {
        scale = 1000.0;
    }
    for (const auto& [name, ms] : k_units) {
        if (unit == name) {
            scale = ms;
        }
    }
    if (scale == 0) {
        return invalid();
    }
    const double ms = value * scale;
    if (ms > k_max_ms) {
        return tl::unexpected(fmt::format("duration \"{}\" is longer than 30 days", text));
    }
    return std::chrono::milliseconds(static_cast<std::int64_t>(std::llround(ms)));
}

} // namespace pt2cache::client::cli
