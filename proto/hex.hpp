// SPDX-License-Identifier: MIT
// Hexadecimal text: lower-case encoding, and one digit's value.
#pragma once

#include <string>
#include <string_view>

namespace pt2cache::proto {

// `bytes.hex()`: two lower-case digits per byte.
std::string to_hex(std::string_view bytes);

// The value of one hex digit of either case, or -1.
int hex_value(char c);

} // namespace pt2cache::proto
