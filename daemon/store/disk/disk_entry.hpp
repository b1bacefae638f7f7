// SPDX-License-Identifier: MIT
// The self-describing entry file of the disk tier: pure encode/decode, no I/O.
// The on-disk layout and why it is what it is: docs/architecture.md.
//
// All integers are fixed width and little-endian.
//
//   <entry>   ::= <header> <ns> <key> <payload> <trailer>
//   <header>  ::= <magic:u8[4]>          ; "P2CE"
//                 <version:u16>          ; 1
//                 <flags:u16>            ; bit 0: payload is one zstd frame
//                 <ns_length:u8>
//                 <key_length:u16>
//                 <created_ms:i64>       ; Unix ms
//                 <expires_ms:i64>       ; Unix ms, 0: never
//                 <value_length:u64>     ; the value's size, uncompressed
//                 <payload_length:u64>   ; the stored payload's size   -> 43 bytes
//   <ns>      ::= <byte>{ns_length}
//   <key>     ::= <byte>{key_length}
//   <payload> ::= <byte>{payload_length} ; the value, raw or zstd-compressed
//   <trailer> ::= <checksum:u64>         ; XXH3-64 of every byte before it
//
// Every flag bit other than bit 0 must be clear. A raw payload has exactly
// value_length bytes; a zstd payload is a single frame that declares
// value_length as its content size. The file is exactly as long as the header
// says: a truncated or extended file is rejected.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/store/blob.hpp"
#include "daemon/store/tier.hpp"

#include <tl/expected.hpp>

namespace pt2cache::daemon::store {

inline constexpr std::array<std::byte, 4> k_entry_magic = {std::byte{'P'}, std::byte{'2'},
                                                           std::byte{'C'}, std::byte{'E'}};
inline constexpr std::uint16_t k_entry_version = 1;
inline constexpr std::uint16_t k_entry_flag_zstd = 1;
inline constexpr std::size_t k_entry_header_size = 43;
inline constexpr std::size_t k_entry_trailer_size = 8;
inline constexpr std::size_t k_entry_max_ns_size = 255;
inline constexpr std::size_t k_entry_max_key_size = 65535;
// The largest value an entry may hold (daemon.max_value_size is below it).
inline constexpr std::uint64_t k_entry_max_value_size = 4ull << 30;
// The most bytes `decode_header` can need.
inline constexpr std::size_t k_entry_max_head_size =
    k_entry_header_size + k_entry_max_ns_size + k_entry_max_key_size;

// What the fixed header, ns and key say; no payload.
struct EntryHeader {
    std::string ns;
    std::string key;
    std::uint16_t flags = 0;
    UnixMs created_ms = 0;
    UnixMs expires_ms = 0;
    std::uint64_t value_size = 0;
    std::uint64_t payload_size = 0;

    bool compressed() const { return (flags & k_entry_flag_zstd) != 0; }
    bool expired(UnixMs now) const { return expires_ms != 0 && expires_ms <= now; }
    // Bytes of header, ns and key.
    std::size_t head_size() const { return k_entry_header_size + ns.size() + key.size(); }
    // The size of the whole file this header describes.
    // Saturates instead of wrapping for absurd payload lengths.
    std::uint64_t file_size() const {
        const std::uint64_t fixed = head_size() + k_entry_trailer_size;
        return payload_size > UINT64_MAX - fixed ? UINT64_MAX : fixed + payload_size;
    }
};

struct DecodedEntry {
    std::string ns;
    std::string key;
    Entry entry;
    bool compressed = false;
    std::uint64_t stored_size = 0; // payload bytes in the file
};

// An encoded entry in three pieces, to write without joining them. `payload`
// points into `compressed_payload` or into the encoded entry's value, which
// must outlive it.
struct EncodedEntry {
    std::vector<std::byte> head; // header, ns and key
    std::vector<std::byte> compressed_payload;
    std::span<const std::byte> payload;
    std::array<std::byte, k_entry_trailer_size> trailer{};

    bool compressed() const { return !compressed_payload.empty(); }
    std::uint64_t size() const { return head.size() + payload.size() + trailer.size(); }
};

// Encodes an entry. The value is compressed with zstd at `level` only when it
// has at least `compress_threshold` bytes and the frame is smaller than the
// value. `ns` must have 1 to 255 bytes and `key` at most 65,535.
EncodedEntry encode_parts(std::string_view ns, std::string_view key, const Entry& entry,
                          std::uint64_t compress_threshold, int level);

// The size of an entry stored uncompressed: what encode_parts gives then.
constexpr std::uint64_t encoded_entry_size(std::uint64_t ns_size, std::uint64_t key_size,
                                           std::uint64_t value_size) {
    return k_entry_header_size + ns_size + key_size + value_size + k_entry_trailer_size;
}

// `encode_parts`, joined into one buffer.
std::vector<std::byte> encode(std::string_view ns, std::string_view key, const Entry& entry,
                              std::uint64_t compress_threshold, int level);

// Verifies and decodes a whole entry file. Magic, version, flags, every length
// and the checksum are checked before anything is allocated; decompression
// never produces more than the declared value length. Fails with a reason.
tl::expected<DecodedEntry, std::string> decode(std::span<const std::byte> file);

// As above; a raw value shares `file`'s buffer instead of being copied.
tl::expected<DecodedEntry, std::string> decode(const Blob& file);

// The value length an entry's header declares, unchecked (0 when `entry` is
// shorter than a header): enough to tell a large value before decoding.
std::uint64_t declared_value_size(std::span<const std::byte> entry);

// The checksum an entry's trailer (its last k_entry_trailer_size bytes) holds:
// the XXH3-64 of every byte before it, when decode() accepts the file.
std::uint64_t trailer_checksum(std::span<const std::byte, k_entry_trailer_size> trailer);

// Decodes the header, ns and key from the first bytes of an entry file (at
// least `k_entry_header_size`, at most `k_entry_max_head_size` are needed).
// Checks magic, version, flags and the relation of value and payload lengths,
// but not the checksum: compare `file_size()` with the real file size.
tl::expected<EntryHeader, std::string> decode_header(std::span<const std::byte> prefix);

} // namespace pt2cache::daemon::store
