// SPDX-License-Identifier: MIT
//
// The values pt2cache-cxx stores in namespace `cxx` (docs/cxx.md, "Stored
// values"): the fixed header of a build result and its key prefixes. Pure
// codec: compression and checksums are the launcher's (client/cxx/).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace pt2cache::proto::cxx {

inline constexpr std::string_view k_namespace = "cxx";
// Key prefixes: a build result, a manifest, a compiler description.
inline constexpr std::string_view k_result_prefix = "r-";
inline constexpr std::string_view k_manifest_prefix = "m-";
inline constexpr std::string_view k_compiler_prefix = "c-";

inline constexpr std::array<std::byte, 4> k_result_magic{std::byte{'P'}, std::byte{'C'},
                                                         std::byte{'X'}, std::byte{'R'}};
inline constexpr std::array<std::byte, 4> k_manifest_magic{std::byte{'P'}, std::byte{'C'},
                                                           std::byte{'X'}, std::byte{'M'}};
inline constexpr std::uint8_t k_format_version = 1;
inline constexpr std::size_t k_result_header_size = 52;
inline constexpr std::size_t k_checksum_size = 16;

struct ResultHeader {
    std::uint64_t build_ms = 0; // wall time of the real build
    std::uint32_t mode = 0;     // permission bits before the umask: 0666 or 0777
    std::uint64_t stdout_size = 0;
    std::uint64_t stderr_size = 0;
    std::uint64_t output_size = 0;
    std::uint64_t compressed_size = 0; // of the one zstd frame that follows
};

void encode_result_header(const ResultHeader& header, std::vector<std::byte>& out);

// The header of a stored result, or nullopt when `value` is not one (wrong
// magic or version, or sizes that do not add up to the value's length).
std::optional<ResultHeader> parse_result_header(std::span<const std::byte> value);

} // namespace pt2cache::proto::cxx
