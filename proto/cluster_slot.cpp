// SPDX-License-Identifier: MIT
#include "proto/cluster_slot.hpp"

#include <array>

namespace pt2cache::proto {

namespace {

constexpr std::array<std::uint16_t, 256> make_table() {
    std::array<std::uint16_t, 256> table{};
    for (unsigned byte = 0; byte < 256; ++byte) {
        auto crc = static_cast<std::uint16_t>(byte << 8);
        for (int bit = 0; bit < 8; ++bit) {
            crc = (crc & 0x8000) != 0 ? static_cast<std::uint16_t>((crc << 1) ^ 0x1021)
                                      : static_cast<std::uint16_t>(crc << 1);
        }
        table[byte] = crc;
    }
    return table;
}

constexpr auto k_table = make_table();

} // namespace

std::uint16_t crc16_xmodem(std::string_view bytes) {
    std::uint16_t crc = 0;
    for (const char c : bytes) {
        const auto byte = static_cast<unsigned char>(c);
        crc = static_cast<std::uint16_t>((crc << 8) ^ k_table[((crc >> 8) ^ byte) & 0xFF]);
    }
    return crc;
}

std::string_view cluster_hash_part(std::string_view key) {
    const auto open = key.find('{');
    if (open == std::string_view::npos) {
        return key;
    }
    const auto close = key.find('}', open + 1);
    if (close == std::string_view::npos || close == open + 1) {
        return key;
    }
    return key.substr(open + 1, close - open - 1);
}

std::uint16_t cluster_key_slot(std::string_view key) {
    return static_cast<std::uint16_t>(crc16_xmodem(cluster_hash_part(key)) % k_cluster_slots);
}

} // namespace pt2cache::proto
