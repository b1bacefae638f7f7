// SPDX-License-Identifier: MIT
//
// What pt2cache-cxx stores in namespace `cxx` (docs/cxx.md, "Stored values"):
// build results (the output file, stdout, stderr and build time,
// zstd-compressed, checksummed); manifests are in proto/cxx_manifest.hpp.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "proto/cxx_manifest.hpp"

#include <tl/expected.hpp>

namespace pt2cache::client::cxx {

// The manifest types and key derivation are shared with the daemon's
// CXX_LOOKUP (proto/cxx_manifest.hpp); the launcher works with the proto
// file-hash types throughout.
using proto::FileHash;
using proto::FileStatus;
using proto::cxx::Digest;
using proto::cxx::digest_of;
using proto::cxx::InputRecord;
using proto::cxx::KeyHasher;
using proto::cxx::Manifest;
using proto::cxx::result_key;
using proto::cxx::Variant;

std::string hex(std::span<const std::byte> bytes);

struct BuildRecord {
    std::uint64_t build_ms = 0;
    std::uint32_t mode = 0666; // before the umask
    std::string out;           // stdout, paths rewritten
    std::string err;           // stderr, paths rewritten
};

// The stored value of a build; `output` is the output file's bytes.
std::vector<std::byte> encode_result(const BuildRecord& record, std::span<const std::byte> output);

// Checks `value` (magic, sizes, checksum) and decompresses it: stdout and
// stderr into the record, the output file's bytes to `output_fd`. Any
// failure (corrupt value, write error) is an error message.
tl::expected<BuildRecord, std::string> decode_result(std::span<const std::byte> value,
                                                     int output_fd);

} // namespace pt2cache::client::cxx
