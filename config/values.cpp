// SPDX-License-Identifier: MIT
#include "config/values.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <limits>

#include "config/config.hpp"

#include <fmt/core.h>

namespace pt2cache::config {

namespace {

constexpr std::array<std::string_view, 7> k_log_levels = {"trace", "debug",    "info", "warn",
                                                          "error", "critical", "off"};

struct SizeSuffix {
    std::string_view name;
    std::uint64_t multiplier;
};

// Matched case-insensitively, so "kB" also covers "KB" and "kb".
constexpr std::array<SizeSuffix, 9> k_size_suffixes = {{
    {"B", 1},
    {"KiB", 1ull << 10},
    {"MiB", 1ull << 20},
    {"GiB", 1ull << 30},
    {"TiB", 1ull << 40},
    {"kB", 1000ull},
    {"MB", 1000ull * 1000},
    {"GB", 1000ull * 1000 * 1000},
    {"TB", 1000ull * 1000 * 1000 * 1000},
}};

// Digits after the decimal point beyond this many are ignored: they are worth
// less than a millionth of the unit, and keeping six makes overflow impossible
// (999999 * 2^40 < 2^64).
constexpr std::size_t k_max_fraction_digits = 6;

std::string lower(std::string_view text) {
    std::string result(text);
    std::transform(result.begin(), result.end(), result.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return result;
}

bool iequals(std::string_view a, std::string_view b) {
    return a.size() == b.size() && lower(a) == lower(b);
}

bool is_digit(char c) {
    return c >= '0' && c <= '9';
}

std::string size_error(std::string_view text) {
    return fmt::format("expected a size like 10GiB or an integer number of bytes, got {} "
                       "(suffixes: B, KiB, MiB, GiB, TiB, kB, MB, GB, TB)",
                       quote(text));
}

} // namespace

std::span<const std::string_view> log_level_names() {
    return k_log_levels;
}

tl::expected<std::string, std::string> parse_log_level(std::string_view text) {
    std::string name = lower(text);
    if (std::find(k_log_levels.begin(), k_log_levels.end(), name) == k_log_levels.end()) {
        return tl::make_unexpected(fmt::format(
            "expected one of trace, debug, info, warn, error, critical, off; got {}", quote(text)));
    }
    return name;
}

tl::expected<bool, std::string> parse_bool(std::string_view text) {
    std::string word = lower(text);
    if (word == "true" || word == "1" || word == "yes" || word == "on") {
        return true;
    }
    if (word == "false" || word == "0" || word == "no" || word == "off") {
        return false;
    }
    return tl::make_unexpected(
        fmt::format("expected true or false (or 1/0, yes/no, on/off), got {}", quote(text)));
}

std::string describe_integer_range(std::uint64_t min, std::uint64_t max) {
    if (max == std::numeric_limits<std::uint64_t>::max()) {
        return fmt::format("expected an integer of at least {}", min);
    }
    return fmt::format("expected an integer from {} to {}", min, max);
}

tl::expected<std::uint64_t, std::string> parse_integer(std::string_view text, std::uint64_t min,
                                                       std::uint64_t max) {
    std::uint64_t value = 0;
    const char* end = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(text.data(), end, value);
    // from_chars accepts no sign for unsigned types, so "-1" fails here too.
    if (text.empty() || ec != std::errc() || ptr != end || value < min || value > max) {
        return tl::make_unexpected(
            fmt::format("{}, got {}", describe_integer_range(min, max), quote(text)));
    }
    return value;
}

std::string quote(std::string_view text) {
    std::string result = "\"";
    for (char c : text) {
        switch (c) {
        case '"':
            result += "\\\"";
            break;
        case '\\':
            result += "\\\\";
            break;
        case '\n':
            result += "\\n";
            break;
        case '\t':
            result += "\\t";
            break;
        case '\r':
            result += "\\r";
            break;
        default:
            if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
                result += fmt::format("\\u{:04X}", static_cast<unsigned>(c));
            } else {
                result += c;
            }
        }
    }
    result += '"';
    return result;
}

std::string_view trim(std::string_view text) {
    constexpr std::string_view k_space = " \t\n\r\f\v";
    auto first = text.find_first_not_of(k_space);
    if (first == std::string_view::npos) {
        return {};
    }
    auto last = text.find_last_not_of(k_space);
    return text.substr(first, last - first + 1);
}

tl::expected<std::uint64_t, std::string> parse_size(std::string_view text) {
    std::string_view rest = trim(text);

    std::size_t digits = 0;
    while (digits < rest.size() && is_digit(rest[digits])) {
        ++digits;
    }
    if (digits == 0) {
        return tl::make_unexpected(size_error(text));
    }
    std::uint64_t whole = 0;
    auto [ptr, ec] = std::from_chars(rest.data(), rest.data() + digits, whole);
    bool too_large = ec == std::errc::result_out_of_range;
    rest.remove_prefix(digits);

    std::string_view fraction;
    if (!rest.empty() && rest.front() == '.') {
        rest.remove_prefix(1);
        std::size_t count = 0;
        while (count < rest.size() && is_digit(rest[count])) {
            ++count;
        }
        if (count == 0) {
            return tl::make_unexpected(size_error(text));
        }
        fraction = rest.substr(0, count);
        rest.remove_prefix(count);
    }

    std::string_view suffix = trim(rest);
    std::uint64_t multiplier = 0;
    if (suffix.empty()) {
        multiplier = 1;
    } else {
        for (const auto& candidate : k_size_suffixes) {
            if (iequals(suffix, candidate.name)) {
                multiplier = candidate.multiplier;
            }
        }
    }
    // A byte count cannot have a fraction.
    if (multiplier == 0 || (multiplier == 1 && !fraction.empty())) {
        return tl::make_unexpected(size_error(text));
    }

    std::uint64_t bytes = 0;
    too_large = too_large || __builtin_mul_overflow(whole, multiplier, &bytes);
    if (!fraction.empty() && !too_large) {
        fraction = fraction.substr(0, std::min(fraction.size(), k_max_fraction_digits));
        std::uint64_t numerator = 0;
        std::uint64_t denominator = 1;
        for (char c : fraction) {
            numerator = numerator * 10 + static_cast<std::uint64_t>(c - '0');
            denominator *= 10;
        }
        // Rounds down to a whole byte.
        too_large = __builtin_add_overflow(bytes, numerator * multiplier / denominator, &bytes);
    }
    if (too_large) {
        return tl::make_unexpected(fmt::format("size {} is too large (at most {} bytes)",
                                               quote(text),
                                               std::numeric_limits<std::uint64_t>::max()));
    }
    return bytes;
}

} // namespace pt2cache::config
