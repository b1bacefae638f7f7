// SPDX-License-Identifier: MIT
#include "daemon/store/disk/disk_entry.hpp"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <optional>

#include "daemon/store/disk/zstd_context.hpp"
#include "daemon/store/xxh3.hpp"

#include <fmt/format.h>

namespace pt2cache::daemon::store {

namespace {

// Byte offsets of the fixed header's fields.
constexpr std::size_t k_off_version = 4;
constexpr std::size_t k_off_flags = 6;
constexpr std::size_t k_off_ns_length = 8;
constexpr std::size_t k_off_key_length = 9;
constexpr std::size_t k_off_created = 11;
constexpr std::size_t k_off_expires = 19;
constexpr std::size_t k_off_value_length = 27;
constexpr std::size_t k_off_payload_length = 35;
static_assert(k_off_payload_length + 8 == k_entry_header_size);

template <typename T>
void put_le(std::byte* out, T value) {
    auto bits = static_cast<std::make_unsigned_t<T>>(value);
    for (std::size_t i = 0; i < sizeof(T); ++i) {
        out[i] = static_cast<std::byte>(bits & 0xFFU);
        bits = static_cast<decltype(bits)>(bits >> 8U);
    }
}

template <typename T>
T get_le(std::span<const std::byte> in, std::size_t offset) {
    std::make_unsigned_t<T> bits = 0;
    for (std::size_t i = sizeof(T); i-- > 0;) {
        bits = static_cast<decltype(bits)>((bits << 8U) |
                                           std::to_integer<std::uint8_t>(in[offset + i]));
    }
    return static_cast<T>(bits);
}

std::string_view as_text(std::span<const std::byte> bytes) {
    return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

// The fixed header's fields, checked against each other but not against the
// data that follows them.
struct FixedHeader {
    std::uint16_t flags = 0;
    std::size_t ns_size = 0;
    std::size_t key_size = 0;
    UnixMs created_ms = 0;
    UnixMs expires_ms = 0;
    std::uint64_t value_size = 0;
    std::uint64_t payload_size = 0;

    bool compressed() const { return (flags & k_entry_flag_zstd) != 0; }
    std::size_t head_size() const { return k_entry_header_size + ns_size + key_size; }
};

tl::expected<FixedHeader, std::string> parse_fixed_header(std::span<const std::byte> bytes) {
    if (bytes.size() < k_entry_header_size) {
        return tl::make_unexpected(fmt::format("truncated: {} bytes, the header needs {}",
                                               bytes.size(), k_entry_header_size));
    }
    if (!std::equal(k_entry_magic.begin(), k_entry_magic.end(), bytes.begin())) {
        return tl::make_unexpected(std::string("bad magic: not a pt2cache entry"));
    }
    const auto version = get_le<std::uint16_t>(bytes, k_off_version);
    if (version != k_entry_version) {
        return tl::make_unexpected(
            fmt::format("unsupported format version {} (expected {})", version, k_entry_version));
    }
    FixedHeader header;
    header.flags = get_le<std::uint16_t>(bytes, k_off_flags);
    if ((header.flags & ~k_entry_flag_zstd) != 0) {
        return tl::make_unexpected(fmt::format("unknown flags {:#06x}", header.flags));
    }
    header.ns_size = get_le<std::uint8_t>(bytes, k_off_ns_length);
    header.key_size = get_le<std::uint16_t>(bytes, k_off_key_length);
    header.created_ms = get_le<std::int64_t>(bytes, k_off_created);
    header.expires_ms = get_le<std::int64_t>(bytes, k_off_expires);
    header.value_size = get_le<std::uint64_t>(bytes, k_off_value_length);
    header.payload_size = get_le<std::uint64_t>(bytes, k_off_payload_length);
    if (header.ns_size == 0) {
        return tl::make_unexpected(std::string("bad length: empty namespace"));
    }
    // No value the daemon accepts is larger (daemon.max_value_size < 4 GiB):
    // a file claiming more is not ours, and its length must never size a
    // buffer.
    if (header.value_size > k_entry_max_value_size ||
        header.payload_size > k_entry_max_value_size) {
        return tl::make_unexpected(
            fmt::format("bad length: value length {} / payload length {} over the {} byte limit",
                        header.value_size, header.payload_size, k_entry_max_value_size));
    }
    if (header.compressed()) {
        if (header.payload_size == 0 ||
            header.value_size > zstd_max_content_size(header.payload_size)) {
            return tl::make_unexpected(
                fmt::format("bad length: value length {} cannot come from {} compressed bytes",
                            header.value_size, header.payload_size));
        }
    } else if (header.value_size != header.payload_size) {
        return tl::make_unexpected(
            fmt::format("bad length: raw value length {} differs from payload length {}",
                        header.value_size, header.payload_size));
    }
    return header;
}

struct Verified {
    FixedHeader header;
    std::size_t payload_offset = 0;
};

// Everything but decompression: lengths against the file size, then the
// checksum. Allocates nothing.
tl::expected<Verified, std::string> verify(std::span<const std::byte> file) {
    auto header = parse_fixed_header(file);
    if (!header) {
        return tl::make_unexpected(std::move(header.error()));
    }
    const std::uint64_t size = file.size();
    const std::uint64_t fixed = header->head_size() + k_entry_trailer_size;
    if (size < fixed || header->payload_size != size - fixed) {
        return tl::make_unexpected(
            fmt::format("bad length: header describes {} payload bytes, file has {} bytes",
                        header->payload_size, size));
    }
    const auto body = file.first(file.size() - k_entry_trailer_size);
    const auto stored = get_le<std::uint64_t>(file, body.size());
    const std::uint64_t actual = Xxh3Hash64::of(body);
    if (stored != actual) {
        return tl::make_unexpected(
            fmt::format("checksum mismatch: stored {:016x}, computed {:016x}", stored, actual));
    }
    return Verified{*header, header->head_size()};
}

// Decodes a verified file; `raw_value` makes the Blob of a raw payload.
template <typename MakeRaw>
tl::expected<DecodedEntry, std::string>
decode_verified(std::span<const std::byte> file, const Verified& verified, MakeRaw&& raw_value) {
    const FixedHeader& header = verified.header;
    const auto payload =
        file.subspan(verified.payload_offset, static_cast<std::size_t>(header.payload_size));
    DecodedEntry out;
    out.ns = as_text(file.subspan(k_entry_header_size, header.ns_size));
    out.key = as_text(file.subspan(k_entry_header_size + header.ns_size, header.key_size));
    out.entry.created_ms = header.created_ms;
    out.entry.expires_ms = header.expires_ms;
    out.compressed = header.compressed();
    out.stored_size = header.payload_size;
    if (header.compressed()) {
        auto value =
            ZstdDecompressor::for_this_thread().decompress_exact(payload, header.value_size);
        if (!value) {
            return tl::make_unexpected(std::move(value.error()));
        }
        out.entry.value = std::move(*value);
    } else {
        out.entry.value = raw_value(verified.payload_offset, payload);
    }
    return out;
}

} // namespace

std::uint64_t declared_value_size(std::span<const std::byte> entry) {
    return entry.size() < k_entry_header_size ? 0
                                              : get_le<std::uint64_t>(entry, k_off_value_length);
}

std::uint64_t trailer_checksum(std::span<const std::byte, k_entry_trailer_size> trailer) {
    return get_le<std::uint64_t>(trailer, 0);
}

EncodedEntry encode_parts(std::string_view ns, std::string_view key, const Entry& entry,
                          std::uint64_t compress_threshold, int level) {
    assert(!ns.empty() && ns.size() <= k_entry_max_ns_size);
    assert(key.size() <= k_entry_max_key_size);
    EncodedEntry out;
    const auto value = entry.value.bytes();
    out.payload = value;
    if (!value.empty() && value.size() >= compress_threshold) {
        if (auto frame = ZstdCompressor::for_this_thread().compress_if_smaller(value, level)) {
            out.compressed_payload = std::move(*frame);
            out.payload = out.compressed_payload;
        }
    }

    out.head.resize(k_entry_header_size + ns.size() + key.size());
    std::byte* head = out.head.data();
    std::copy(k_entry_magic.begin(), k_entry_magic.end(), head);
    put_le<std::uint16_t>(head + k_off_version, k_entry_version);
    put_le<std::uint16_t>(head + k_off_flags, out.compressed() ? k_entry_flag_zstd : 0);
    put_le<std::uint8_t>(head + k_off_ns_length, static_cast<std::uint8_t>(ns.size()));
    put_le<std::uint16_t>(head + k_off_key_length, static_cast<std::uint16_t>(key.size()));
    put_le<std::int64_t>(head + k_off_created, entry.created_ms);
    put_le<std::int64_t>(head + k_off_expires, entry.expires_ms);
    put_le<std::uint64_t>(head + k_off_value_length, value.size());
    put_le<std::uint64_t>(head + k_off_payload_length, out.payload.size());
    std::memcpy(head + k_entry_header_size, ns.data(), ns.size());
    if (!key.empty()) {
        std::memcpy(head + k_entry_header_size + ns.size(), key.data(), key.size());
    }

    Xxh3Hash64 checksum;
    checksum.update(out.head);
    checksum.update(out.payload);
    put_le<std::uint64_t>(out.trailer.data(), checksum.digest());
    return out;
}

std::vector<std::byte> encode(std::string_view ns, std::string_view key, const Entry& entry,
                              std::uint64_t compress_threshold, int level) {
    const EncodedEntry parts = encode_parts(ns, key, entry, compress_threshold, level);
    std::vector<std::byte> out;
    out.reserve(parts.size());
    out.insert(out.end(), parts.head.begin(), parts.head.end());
    out.insert(out.end(), parts.payload.begin(), parts.payload.end());
    out.insert(out.end(), parts.trailer.begin(), parts.trailer.end());
    return out;
}

tl::expected<DecodedEntry, std::string> decode(std::span<const std::byte> file) {
    auto verified = verify(file);
    if (!verified) {
        return tl::make_unexpected(std::move(verified.error()));
    }
    return decode_verified(file, *verified, [](std::size_t, std::span<const std::byte> payload) {
        return Blob::copy_of(payload);
    });
}

tl::expected<DecodedEntry, std::string> decode(const Blob& file) {
    const auto bytes = file.bytes();
    auto verified = verify(bytes);
    if (!verified) {
        return tl::make_unexpected(std::move(verified.error()));
    }
    return decode_verified(bytes, *verified,
                           [&file](std::size_t offset, std::span<const std::byte> payload) {
                               return file.slice(offset, payload.size());
                           });
}

tl::expected<EntryHeader, std::string> decode_header(std::span<const std::byte> prefix) {
    auto fixed = parse_fixed_header(prefix);
    if (!fixed) {
        return tl::make_unexpected(std::move(fixed.error()));
    }
    if (prefix.size() < fixed->head_size()) {
        return tl::make_unexpected(fmt::format("truncated: {} bytes, the header needs {}",
                                               prefix.size(), fixed->head_size()));
    }
    EntryHeader out;
    out.ns = as_text(prefix.subspan(k_entry_header_size, fixed->ns_size));
    out.key = as_text(prefix.subspan(k_entry_header_size + fixed->ns_size, fixed->key_size));
    out.flags = fixed->flags;
    out.created_ms = fixed->created_ms;
    out.expires_ms = fixed->expires_ms;
    out.value_size = fixed->value_size;
    out.payload_size = fixed->payload_size;
    return out;
}

} // namespace pt2cache::daemon::store
