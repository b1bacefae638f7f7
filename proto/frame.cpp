#include "proto/frame.hpp"

#include "proto/bytes.hpp"

#include <fmt/format.h>

namespace pt2cache::proto {

std::string_view op_name(Op op) {
    switch (op) {
    case Op::hello:
        return "HELLO";
    case Op::ping:
        return "PING";
    case Op::get:
        return "GET";
    case Op::put:
        return "PUT";
    case Op::exists:
        return "EXISTS";
    case Op::del:
        return "DEL";
    case Op::stats:
        return "STATS";
    case Op::list:
        return "LIST";
    case Op::clear:
        return "CLEAR";
    case Op::hash_files:
        return "HASH_FILES";
    case Op::scan:
        return "SCAN";
    case Op::dump:
        return "DUMP";
    case Op::restore:
        return "RESTORE";
    case Op::cxx_lookup:
        return "CXX_LOOKUP";
    case Op::bundle_begin:
        return "BUNDLE_BEGIN";
    case Op::bundle_end:
        return "BUNDLE_END";
    }
    return "UNKNOWN";
}

std::string_view status_name(Status status) {
    switch (status) {
    case Status::ok:
        return "OK";
    case Status::miss:
        return "MISS";
    case Status::not_stored:
        return "NOT_STORED";
    case Status::malformed:
        return "MALFORMED";
    case Status::version_mismatch:
        return "VERSION_MISMATCH";
    case Status::unknown_op:
        return "UNKNOWN_OP";
    case Status::key_too_long:
        return "KEY_TOO_LONG";
    case Status::value_too_large:
        return "VALUE_TOO_LARGE";
    case Status::bad_namespace:
        return "BAD_NAMESPACE";
    case Status::handshake_required:
        return "HANDSHAKE_REQUIRED";
    case Status::storage_error:
        return "STORAGE_ERROR";
    case Status::unknown_token:
        return "UNKNOWN_TOKEN";
    case Status::internal:
        return "INTERNAL";
    case Status::busy:
        return "BUSY";
    }
    return "UNKNOWN_STATUS";
}

bool is_known_op(std::uint8_t op) {
    switch (static_cast<Op>(op)) {
    case Op::hello:
    case Op::ping:
    case Op::get:
    case Op::put:
    case Op::exists:
    case Op::del:
    case Op::stats:
    case Op::list:
    case Op::clear:
    case Op::hash_files:
    case Op::scan:
    case Op::dump:
    case Op::restore:
    case Op::cxx_lookup:
    case Op::bundle_begin:
    case Op::bundle_end:
        return true;
    }
    return false;
}

bool closes_connection(Status status) {
    switch (status) {
    case Status::ok:
    case Status::miss:
    case Status::not_stored:
    case Status::storage_error:
    case Status::unknown_token:
        return false;
    default:
        return true;
    }
}

std::uint64_t max_request_body(Op op, const Limits& limits) {
    switch (op) {
    case Op::put:
    case Op::restore:
        return k_put_overhead + limits.max_value;
    case Op::ping:
        return k_max_ping;
    case Op::hash_files:
        return k_max_hash_files_body;
    case Op::cxx_lookup:
        return k_max_cxx_lookup_body;
    default:
        return k_max_small_body;
    }
}

void encode_header(const Header& header, std::vector<std::byte>& out) {
    ByteWriter(out)
        .integer(std::to_integer<std::uint8_t>(k_magic0))
        .integer(std::to_integer<std::uint8_t>(k_magic1))
        .integer(static_cast<std::uint8_t>(header.op))
        .integer(header.flags)
        .integer(header.id)
        .integer(header.length);
}

namespace {

tl::expected<Header, Error> read_header(std::span<const std::byte, k_header_size> bytes) {
    if (bytes[0] != k_magic0 || bytes[1] != k_magic1) {
        return tl::unexpected(
            Error{Status::malformed, fmt::format("bad frame magic 0x{:02x}{:02x} (expected 0xf250)",
                                                 std::to_integer<unsigned>(bytes[0]),
                                                 std::to_integer<unsigned>(bytes[1]))});
    }
    ByteReader reader(bytes.subspan(2));
    Header header;
    header.op = static_cast<Op>(reader.integer<std::uint8_t>());
    header.flags = reader.integer<std::uint8_t>();
    header.id = reader.integer<std::uint32_t>();
    header.length = reader.integer<std::uint32_t>();
    return header;
}

} // namespace

tl::expected<Header, Error> decode_request_header(std::span<const std::byte, k_header_size> bytes,
                                                  const Limits& limits) {
    auto header = read_header(bytes);
    if (!header) {
        return header;
    }
    const auto op = static_cast<std::uint8_t>(header->op);
    if (!is_known_op(op)) {
        return tl::unexpected(Error{Status::unknown_op, fmt::format("unknown op 0x{:02x}", op)});
    }
    const std::uint64_t max = max_request_body(header->op, limits);
    if (header->length > max) {
        const bool value = header->op == Op::put || header->op == Op::restore;
        return tl::unexpected(
            Error{value ? Status::value_too_large : Status::malformed,
                  fmt::format("{} body of {} bytes exceeds the limit of {} bytes{}",
                              op_name(header->op), header->length, max,
                              value ? fmt::format(" (max_value {})", limits.max_value) : "")});
    }
    return header;
}

tl::expected<Header, Error>
decode_response_header(std::span<const std::byte, k_header_size> bytes) {
    return read_header(bytes);
}

DecodeResult decode_request(std::span<const std::byte> bytes, const Limits& limits) {
    if (bytes.size() < k_header_size) {
        // A wrong first byte is reported at once rather than after 12 bytes.
        if (!bytes.empty() && bytes[0] != k_magic0) {
            return Error{Status::malformed, "bad frame magic"};
        }
        return NeedMore{k_header_size - bytes.size()};
    }
    auto header = decode_request_header(bytes.first<k_header_size>(), limits);
    if (!header) {
        return std::move(header.error());
    }
    const std::size_t total = k_header_size + header->length;
    if (bytes.size() < total) {
        return NeedMore{total - bytes.size()};
    }
    return Frame{*header, bytes.subspan(k_header_size, header->length), total};
}

} // namespace pt2cache::proto
