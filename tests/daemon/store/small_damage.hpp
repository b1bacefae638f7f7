// SPDX-License-Identifier: MIT
// Damage to small.mdb's pages that LMDB notices without faulting, for the
// tests of quarantine and salvage.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string_view>
#include <vector>

#include <catch2/catch.hpp>

namespace pt2cache::tests {

enum class Damage {
    not_a_leaf,   // marked an overflow page: a search reaching it finds no leaf
    keys_swapped, // its first two nodes swapped: keys out of order
};

// Damages each leaf page of the file that holds the key `needle`. LMDB's page
// header: page number (8 bytes), pad (2), flags (2), lower and upper bounds
// of its free space (2 + 2), then the nodes' offsets; a node: data size (4),
// flags (2), key size (2), key. LMDB answers MDB_CORRUPTED on such a page
// (reads; an assertion fails in a cursor's walk onto a page that is no
// leaf), it does not fault. How many pages it damaged (a page's free space
// is left as LMDB found it, so only keys in nodes count).
inline int damage_leaves_holding(const std::filesystem::path& path, std::string_view needle,
                                 Damage damage) {
    constexpr std::size_t page = 4096;
    constexpr std::uint16_t leaf = 0x02;
    constexpr std::uint16_t overflow = 0x04;
    std::fstream file(path, std::ios::binary | std::ios::in | std::ios::out);
    REQUIRE(file);
    const std::vector<char> bytes{std::istreambuf_iterator<char>(file), {}};
    const auto u16 = [&](std::size_t at) {
        std::uint16_t value = 0;
        std::memcpy(&value, &bytes[at], sizeof value);
        return value;
    };
    int marked = 0;
    for (std::size_t at = 0; at + page <= bytes.size(); at += page) {
        std::uint64_t number = 0;
        std::memcpy(&number, &bytes[at], sizeof number);
        if (number != at / page || u16(at + 10) != leaf || u16(at + 12) > page) {
            continue;
        }
        bool holds = false;
        for (std::size_t slot = at + 16; slot + 2 <= at + u16(at + 12); slot += 2) {
            const std::size_t node = at + u16(slot);
            const std::size_t key_size = u16(node + 6);
            holds = holds || (node + 8 + key_size <= at + page &&
                              std::string_view(&bytes[node + 8], key_size) == needle);
        }
        if (holds && damage == Damage::not_a_leaf) {
            file.seekp(static_cast<std::streamoff>(at + 10));
            file.write(reinterpret_cast<const char*>(&overflow), sizeof overflow);
            ++marked;
        } else if (holds && u16(at + 12) >= 20) {
            const std::array<char, 4> swapped = {bytes[at + 18], bytes[at + 19], bytes[at + 16],
                                                 bytes[at + 17]};
            file.seekp(static_cast<std::streamoff>(at + 16));
            file.write(swapped.data(), swapped.size());
            ++marked;
        }
    }
    file.flush();
    REQUIRE(file);
    return marked;
}

} // namespace pt2cache::tests
