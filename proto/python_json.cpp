// SPDX-License-Identifier: MIT
#include "proto/python_json.hpp"

#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <string_view>

namespace pt2cache::proto {

namespace {

constexpr char32_t k_replacement = 0xFFFD;
constexpr std::string_view k_hex = "0123456789abcdef";

// The code point starting at `text[at]`; advances `at` past it. An invalid
// or truncated sequence yields U+FFFD and skips one byte.
char32_t next_code_point(std::string_view text, std::size_t& at) {
    const auto lead = static_cast<unsigned char>(text[at]);
    if (lead < 0x80) {
        ++at;
        return lead;
    }
    std::size_t length = 0;
    char32_t cp = 0;
    char32_t min = 0;
    if ((lead & 0xE0) == 0xC0) {
        length = 2, cp = lead & 0x1F, min = 0x80;
    } else if ((lead & 0xF0) == 0xE0) {
        length = 3, cp = lead & 0x0F, min = 0x800;
    } else if ((lead & 0xF8) == 0xF0) {
        length = 4, cp = lead & 0x07, min = 0x10000;
    } else {
        ++at;
        return k_replacement;
    }
    if (at + length > text.size()) {
        ++at;
        return k_replacement;
    }
    for (std::size_t i = 1; i < length; ++i) {
        const auto next = static_cast<unsigned char>(text[at + i]);
        if ((next & 0xC0) != 0x80) {
            ++at;
            return k_replacement;
        }
        cp = (cp << 6) | (next & 0x3F);
    }
    // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
    if (cp < min || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) {
        ++at;
        return k_replacement;
    }
    at += length;
    return cp;
}

void append_hex(std::string& out, std::uint32_t value, int digits) {
    for (int shift = (digits - 1) * 4; shift >= 0; shift -= 4) {
        out += k_hex[(value >> shift) & 0xF];
    }
}

void append_u_escape(std::string& out, std::uint32_t unit) {
    out += "\\u";
    append_hex(out, unit, 4);
}

// json.encoder.py_encode_basestring_ascii.
void dump_string(std::string_view text, std::string& out) {
    out += '"';
    for (std::size_t at = 0; at < text.size();) {
        const char32_t cp = next_code_point(text, at);
        switch (cp) {
        case '"':
            out += "\\\"";
            continue;
        case '\\':
            out += "\\\\";
            continue;
        case '\n':
            out += "\\n";
            continue;
        case '\r':
            out += "\\r";
            continue;
        case '\t':
            out += "\\t";
            continue;
        case '\b':
            out += "\\b";
            continue;
        case '\f':
            out += "\\f";
            continue;
        default:
            break;
        }
        if (cp >= 0x20 && cp <= 0x7E) {
            out += static_cast<char>(cp);
        } else if (cp <= 0xFFFF) {
            append_u_escape(out, cp);
        } else {
            const std::uint32_t v = cp - 0x10000;
            append_u_escape(out, 0xD800 | (v >> 10));
            append_u_escape(out, 0xDC00 | (v & 0x3FF));
        }
    }
    out += '"';
}

template <typename Int>
void append_integer(std::string& out, Int value) {
    std::array<char, 24> buffer{};
    const auto result = std::to_chars(buffer.data(), buffer.data() + buffer.size(), value);
    out.append(buffer.data(), result.ptr);
}

void append_float_repr(std::string& out, double value) {
    if (std::isnan(value)) {
        out += "nan";
        return;
    }
    if (std::isinf(value)) {
        out += value < 0 ? "-inf" : "inf";
        return;
    }
    // The shortest round-trip digits, as CPython's dtoa mode 0 produces them,
    // then laid out as float_repr_style 'short' does (Python/pystrtod.c,
    // format_float_short with type 'r').
    std::array<char, 40> buffer{};
    const auto result = std::to_chars(buffer.data(), buffer.data() + buffer.size(), value,
                                      std::chars_format::scientific);
    std::string_view text(buffer.data(), static_cast<std::size_t>(result.ptr - buffer.data()));
    if (!text.empty() && text.front() == '-') {
        out += '-';
        text.remove_prefix(1);
    }
    const auto e_at = text.find('e');
    std::string digits;
    for (char c : text.substr(0, e_at)) {
        if (c != '.') {
            digits += c;
        }
    }
    int exponent = 0;
    const auto exponent_text = text.substr(e_at + 1);
    const char* first = exponent_text.data() + (exponent_text.front() == '+' ? 1 : 0);
    std::from_chars(first, exponent_text.data() + exponent_text.size(), exponent);
    // The value is 0.<digits> * 10^decpt.
    const int decpt = exponent + 1;
    const auto count = static_cast<int>(digits.size());
    if (decpt <= -4 || decpt > 16) {
        out += digits[0];
        if (count > 1) {
            out += '.';
            out.append(digits, 1);
        }
        out += 'e';
        const int shown = decpt - 1;
        out += shown < 0 ? '-' : '+';
        const int magnitude = shown < 0 ? -shown : shown;
        if (magnitude < 10) {
            out += '0';
        }
        append_integer(out, magnitude);
    } else if (decpt <= 0) {
        out += "0.";
        out.append(static_cast<std::size_t>(-decpt), '0');
        out += digits;
    } else if (decpt >= count) {
        out += digits;
        out.append(static_cast<std::size_t>(decpt - count), '0');
        out += ".0";
    } else {
        out.append(digits, 0, static_cast<std::size_t>(decpt));
        out += '.';
        out.append(digits, static_cast<std::size_t>(decpt));
    }
}

// Characters outside ASCII that str.isprintable() rejects, for the blocks
// where keys and values of best-configs could plausibly wander: C1
// controls, NBSP and soft hyphen, the General Punctuation spaces and
// format controls, the ideographic space, private use areas, BOM and the
// Specials block.
bool printable_non_ascii(char32_t cp) {
    if (cp <= 0xA0 || cp == 0xAD || cp == 0x1680 || cp == 0x3000 || cp == 0xFEFF) {
        return false;
    }
    if ((cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F) ||
        (cp >= 0x205F && cp <= 0x206F)) {
        return false;
    }
    if ((cp >= 0xE000 && cp <= 0xF8FF) || (cp >= 0xFFF0 && cp <= 0xFFFB) || cp >= 0xF0000 ||
        cp == 0xFFFE || cp == 0xFFFF) {
        return false;
    }
    return true;
}

// unicode_repr in Objects/unicodeobject.c.
void repr_string(std::string_view text, std::string& out) {
    const bool has_single = text.find('\'') != text.npos;
    const bool has_double = text.find('"') != text.npos;
    const char quote = has_single && !has_double ? '"' : '\'';
    out += quote;
    for (std::size_t at = 0; at < text.size();) {
        const std::size_t start = at;
        const char32_t cp = next_code_point(text, at);
        if (cp == static_cast<char32_t>(quote) || cp == '\\') {
            out += '\\';
            out += static_cast<char>(cp);
        } else if (cp == '\t') {
            out += "\\t";
        } else if (cp == '\n') {
            out += "\\n";
        } else if (cp == '\r') {
            out += "\\r";
        } else if (cp < 0x20 || cp == 0x7F) {
            out += "\\x";
            append_hex(out, cp, 2);
        } else if (cp < 0x7F) {
            out += static_cast<char>(cp);
        } else if (printable_non_ascii(cp)) {
            if (cp == k_replacement && at - start == 1) {
                out += "\xEF\xBF\xBD"; // an invalid byte, shown as U+FFFD
            } else {
                out.append(text, start, at - start);
            }
        } else if (cp <= 0xFF) {
            out += "\\x";
            append_hex(out, cp, 2);
        } else if (cp <= 0xFFFF) {
            out += "\\u";
            append_hex(out, cp, 4);
        } else {
            out += "\\U";
            append_hex(out, cp, 8);
        }
    }
    out += quote;
}

void repr(const nlohmann::ordered_json& value, std::string& out) {
    using Type = nlohmann::ordered_json::value_t;
    switch (value.type()) {
    case Type::null:
    case Type::discarded:
        out += "None";
        return;
    case Type::boolean:
        out += value.get<bool>() ? "True" : "False";
        return;
    case Type::number_integer:
        append_integer(out, value.get<std::int64_t>());
        return;
    case Type::number_unsigned:
        append_integer(out, value.get<std::uint64_t>());
        return;
    case Type::number_float:
        append_float_repr(out, value.get<double>());
        return;
    case Type::string:
        repr_string(value.get_ref<const std::string&>(), out);
        return;
    case Type::binary: {
        out += '[';
        bool first = true;
        for (auto byte : value.get_binary()) {
            out += first ? "" : ", ";
            first = false;
            append_integer(out, static_cast<unsigned>(byte));
        }
        out += ']';
        return;
    }
    case Type::array: {
        out += '[';
        bool first = true;
        for (const auto& item : value) {
            out += first ? "" : ", ";
            first = false;
            repr(item, out);
        }
        out += ']';
        return;
    }
    case Type::object: {
        out += '{';
        bool first = true;
        for (const auto& [key, item] : value.items()) {
            out += first ? "" : ", ";
            first = false;
            repr_string(key, out);
            out += ": ";
            repr(item, out);
        }
        out += '}';
        return;
    }
    }
}

} // namespace

void python_json_dump(const nlohmann::ordered_json& value, std::string& out) {
    using Type = nlohmann::ordered_json::value_t;
    switch (value.type()) {
    case Type::null:
    case Type::discarded:
        out += "null";
        return;
    case Type::boolean:
        out += value.get<bool>() ? "true" : "false";
        return;
    case Type::number_integer:
    case Type::number_unsigned:
    case Type::binary:
        repr(value, out);
        return;
    case Type::number_float: {
        const double number = value.get<double>();
        // json.encoder's floatstr: allow_nan spellings, repr otherwise.
        if (std::isnan(number)) {
            out += "NaN";
        } else if (std::isinf(number)) {
            out += number < 0 ? "-Infinity" : "Infinity";
        } else {
            append_float_repr(out, number);
        }
        return;
    }
    case Type::string:
        dump_string(value.get_ref<const std::string&>(), out);
        return;
    case Type::array: {
        out += '[';
        bool first = true;
        for (const auto& item : value) {
            out += first ? "" : ", ";
            first = false;
            python_json_dump(item, out);
        }
        out += ']';
        return;
    }
    case Type::object: {
        out += '{';
        bool first = true;
        for (const auto& [key, item] : value.items()) {
            out += first ? "" : ", ";
            first = false;
            dump_string(key, out);
            out += ": ";
            python_json_dump(item, out);
        }
        out += '}';
        return;
    }
    }
}

namespace {

// Whether the number token at the start of `text` is an integer outside
// int64 and uint64 (the parser would make it a double, which json.dumps
// writes otherwise: 2**64 as 1.8446744073709552e+19); its length in `size`.
bool integer_out_of_range(std::string_view text, std::size_t& size) {
    size = 0;
    while (size < text.size() &&
           (std::isdigit(static_cast<unsigned char>(text[size])) != 0 ||
            std::string_view("-+.eE").find(text[size]) != std::string_view::npos)) {
        ++size;
    }
    const auto token = text.substr(0, size);
    if (token.find_first_of(".eE") != std::string_view::npos) {
        return false; // a float: the parser keeps it as Python would
    }
    const bool negative = token.starts_with('-');
    auto digits = token.substr(negative ? 1 : 0);
    while (digits.size() > 1 && digits.front() == '0') {
        digits.remove_prefix(1); // not JSON anyway: the parser refuses it
    }
    const std::string_view limit = negative ? "9223372036854775808" : "18446744073709551615";
    return digits.size() > limit.size() || (digits.size() == limit.size() && digits > limit);
}

} // namespace

nlohmann::ordered_json parse_json(std::string_view text) {
    // Brackets outside strings, and integers out of range, which a text that
    // is otherwise JSON would change; a text that is not JSON fails in the
    // parser.
    std::size_t depth = 0;
    bool in_string = false;
    for (std::size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (in_string) {
            if (c == '\\') {
                ++i;
            } else if (c == '"') {
                in_string = false;
            }
        } else if (c == '"') {
            in_string = true;
        } else if (c == '-' || std::isdigit(static_cast<unsigned char>(c)) != 0) {
            std::size_t size = 0;
            if (integer_out_of_range(text.substr(i), size)) {
                return nlohmann::ordered_json(nlohmann::ordered_json::value_t::discarded);
            }
            i += size - 1;
        } else if (c == '[' || c == '{') {
            if (++depth > k_max_json_depth) {
                return nlohmann::ordered_json(nlohmann::ordered_json::value_t::discarded);
            }
        } else if ((c == ']' || c == '}') && depth > 0) {
            --depth;
        }
    }
    return nlohmann::ordered_json::parse(text, nullptr, false);
}

std::string python_json_dumps(const nlohmann::ordered_json& value) {
    std::string out;
    python_json_dump(value, out);
    return out;
}

std::string python_float_repr(double value) {
    std::string out;
    append_float_repr(out, value);
    return out;
}

std::string python_repr(const nlohmann::ordered_json& value) {
    std::string out;
    repr(value, out);
    return out;
}

} // namespace pt2cache::proto
