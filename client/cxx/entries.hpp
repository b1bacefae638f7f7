// SPDX-License-Identifier: MIT
//
// What pt2cache-cxx stores in namespace `cxx` (docs/cxx.md, "Stored values"):
// manifests (the inputs each recorded build read) and build results (the
// output file, stdout, stderr and build time, zstd-compressed, checksummed).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "client/client.hpp"

#include <tl/expected.hpp>

namespace pt2cache::client::cxx {

using Digest = std::array<std::byte, 16>;

// XXH3-128 of `bytes`, canonical byte order.
Digest digest_of(std::span<const std::byte> bytes);
std::string hex(std::span<const std::byte> bytes);

// Builds a key from named fields: XXH3-128 over "<name>\0<length:u64><bytes>"
// for each field in order.
class KeyHasher {
public:
    KeyHasher();
    ~KeyHasher();
    KeyHasher(const KeyHasher&) = delete;
    KeyHasher& operator=(const KeyHasher&) = delete;

    void field(std::string_view name, std::string_view value);
    void field(std::string_view name, std::span<const std::byte> value);
    std::string hex_digest() const;

private:
    void* m_state;
};

// One file a build read, as recorded in a manifest: its path with machine
// directories rewritten to placeholders, and what HASH_FILES answered.
struct InputRecord {
    std::string path;
    FileStatus status = FileStatus::not_found;
    std::uint64_t size = 0;
    Digest hash{};

    friend bool operator==(const InputRecord&, const InputRecord&) = default;
};

using Variant = std::vector<InputRecord>;

struct Manifest {
    static constexpr std::size_t k_max_variants = 16;
    std::vector<Variant> variants; // most recent first

    std::vector<std::byte> encode() const;
    // nullopt: not a manifest, or a corrupt one (bad checksum or grammar).
    static std::optional<Manifest> decode(std::span<const std::byte> value);

    // Puts `variant` first (dropping an equal older one), keeping at most
    // k_max_variants.
    void add(Variant variant);
};

// The result key of `variant` under the common key.
std::string result_key(std::string_view common_key, const Variant& variant);

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
