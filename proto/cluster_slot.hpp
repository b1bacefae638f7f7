// SPDX-License-Identifier: MIT
// Redis Cluster's key-to-slot mapping: CRC16 (XMODEM: polynomial 0x1021,
// initial value 0, no reflection) of the key, or of its hash tag, modulo
// 16384. The hash tag is the part between the first '{' and the first '}'
// after it, when that part is not empty (so `pt2sig:{k}` and `k` share a
// slot). Pure: no I/O.
#pragma once

#include <cstdint>
#include <string_view>

namespace pt2cache::proto {

inline constexpr std::uint16_t k_cluster_slots = 16384;

// CRC16-XMODEM of `bytes` (as Redis's crc16.c).
std::uint16_t crc16_xmodem(std::string_view bytes);

// The part of `key` that is hashed: its hash tag, or the whole key.
std::string_view cluster_hash_part(std::string_view key);

// The slot of `key`, 0..16383.
std::uint16_t cluster_key_slot(std::string_view key);

} // namespace pt2cache::proto
