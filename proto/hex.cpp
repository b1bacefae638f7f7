// SPDX-License-Identifier: MIT
#include "proto/hex.hpp"

namespace pt2cache::proto {

namespace {
constexpr std::string_view k_digits = "0123456789abcdef";
} // namespace

std::string to_hex(std::string_view bytes) {
    std::string out;
    out.reserve(bytes.size() * 2);
    for (const char c : bytes) {
        const auto byte = static_cast<unsigned char>(c);
        out += k_digits[byte >> 4];
        out += k_digits[byte & 0xF];
    }
    return out;
}

int hex_value(char c) {
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }
    return -1;
}

} // namespace pt2cache::proto
