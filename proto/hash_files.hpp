// SPDX-License-Identifier: MIT
//
// HASH_FILES (docs/protocol.md, "Hashing files"): the content hashes of files
// the daemon reads for a client, with a per-file status.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "proto/frame.hpp"

#include <tl/expected.hpp>

namespace pt2cache::proto {

inline constexpr std::size_t k_max_hash_files = 4096;
inline constexpr std::size_t k_max_hash_path = 4096;

enum class FileStatus : std::uint8_t {
    ok = 0,
    not_found = 1,
    not_regular = 2,
    too_large = 3,
    unreadable = 4,
    skipped = 5,
};

// The canonical XXH128 bytes: high half then low half, each big-endian.
using FileDigest = std::array<std::byte, 16>;

struct FileHash {
    FileStatus status = FileStatus::unreadable;
    std::uint64_t size = 0;
    FileDigest hash{};
};

inline constexpr std::size_t k_file_hash_size = 1 + 8 + 16;

// Daemon side: the paths of a request (views into `body`).
tl::expected<std::vector<std::string_view>, Error>
parse_hash_files(std::span<const std::byte> body);
// The OK response body for `hashes`.
std::vector<std::byte> encode_hash_files_body(std::span<const FileHash> hashes);

// Client side: appends a whole request frame. The caller checks the limits.
void encode_hash_files(std::vector<std::byte>& out, std::uint32_t id,
                       std::span<const std::string> paths);
// The response body; `expected` is the number of paths sent.
tl::expected<std::vector<FileHash>, Error>
parse_hash_files_response(std::span<const std::byte> body, std::size_t expected);

} // namespace pt2cache::proto
