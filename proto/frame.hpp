// Frames of the native protocol: the 12-byte header, op and status codes, and
// the limits checked before any body byte is allocated. Normative text:
// docs/protocol.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <tl/expected.hpp>

namespace pt2cache::proto {

inline constexpr std::uint16_t k_version = 1;
inline constexpr std::size_t k_header_size = 12;
inline constexpr std::byte k_magic0{0xF2};
inline constexpr std::byte k_magic1{0x50};

inline constexpr std::size_t k_max_namespace = 32;
inline constexpr std::size_t k_max_key = 1024;
inline constexpr std::uint64_t k_default_max_value = 512ull << 20;
inline constexpr std::size_t k_max_ping = 64u << 10;
inline constexpr std::size_t k_max_small_body = 4096;
inline constexpr std::uint32_t k_max_list_limit = 10'000;
inline constexpr std::size_t k_max_hash_files_body = 1u << 20;
inline constexpr std::size_t k_max_cxx_lookup_body = 72u << 10;
inline constexpr std::size_t k_max_scan_namespaces = 64;
// ns:str8 + key:str16 + ttl:u64 + bundle token:u64, at their largest (and
// RESTORE's ns:str8 + key:str16 + created_ms:u64 + expires_ms:u64).
inline constexpr std::size_t k_put_overhead = 1 + k_max_namespace + 2 + k_max_key + 8 + 8;
// The largest value a frame carries: with PUT's or RESTORE's largest head,
// its length still fits the header's u32. HELLO announces at most this.
inline constexpr std::uint64_t k_max_frame_value = 0xFFFF'FFFFull - k_put_overhead;

enum class Op : std::uint8_t {
    hello = 0x01,
    ping = 0x02,
    get = 0x03,
    put = 0x04,
    exists = 0x05,
    del = 0x06,
    stats = 0x07,
    list = 0x08,
    clear = 0x09,
    hash_files = 0x0A,
    scan = 0x0B,
    dump = 0x0C,
    restore = 0x0D,
    cxx_lookup = 0x0E,
    bundle_begin = 0x20,
    bundle_end = 0x21,
};

enum class Status : std::uint8_t {
    ok = 0x00,
    miss = 0x01,
    not_stored = 0x02,
    malformed = 0x10,
    version_mismatch = 0x11,
    unknown_op = 0x12,
    key_too_long = 0x13,
    value_too_large = 0x14,
    bad_namespace = 0x15,
    handshake_required = 0x16,
    storage_error = 0x17,
    unknown_token = 0x18,
    internal = 0x19,
    busy = 0x1A,
};

namespace capability {
inline constexpr std::uint32_t ttl = 1u << 0;
inline constexpr std::uint32_t bundle = 1u << 1;
inline constexpr std::uint32_t hash_files = 1u << 2;
inline constexpr std::uint32_t cxx_lookup = 1u << 3;
} // namespace capability

namespace put_flag {
inline constexpr std::uint8_t only_if_absent = 1u << 0;
inline constexpr std::uint8_t bundle = 1u << 7;
} // namespace put_flag

namespace restore_flag {
inline constexpr std::uint8_t replace = 1u << 0;
} // namespace restore_flag

std::string_view op_name(Op op);
std::string_view status_name(Status status);
bool is_known_op(std::uint8_t op);
inline bool is_error(Status status) {
    return static_cast<std::uint8_t>(status) >= 0x10;
}
// Whether the daemon closes the connection after answering with `status`.
bool closes_connection(Status status);

struct Header {
    Op op{};
    std::uint8_t flags = 0; // request flags, or the Status of a response
    std::uint32_t id = 0;
    std::uint32_t length = 0;

    Status status() const { return static_cast<Status>(flags); }
};

struct Error {
    Status status;
    std::string message;
};

struct Limits {
    std::uint64_t max_value = k_default_max_value;
};

// The largest body a request with this header may carry.
std::uint64_t max_request_body(Op op, const Limits& limits);

void encode_header(const Header& header, std::vector<std::byte>& out);

// Decodes and validates a request header: magic, known op, and `length`
// within the op's maximum. Nothing is allocated.
tl::expected<Header, Error> decode_request_header(std::span<const std::byte, k_header_size> bytes,
                                                  const Limits& limits);

// Decodes a response header (client side): magic only; the caller bounds
// `length` by what it is willing to receive.
tl::expected<Header, Error> decode_response_header(std::span<const std::byte, k_header_size> bytes);

// One whole request frame out of a byte stream.
struct NeedMore {
    std::size_t bytes; // at least this many more bytes are needed
};
struct Frame {
    Header header;
    std::span<const std::byte> body;
    std::size_t consumed; // header + body
};
using DecodeResult = std::variant<NeedMore, Frame, Error>;

DecodeResult decode_request(std::span<const std::byte> bytes, const Limits& limits);

} // namespace pt2cache::proto
