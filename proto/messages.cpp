#include "proto/messages.hpp"

#include <algorithm>
#include <cstring>
#include <limits>

#include "proto/bytes.hpp"
#include "proto/message_parts.hpp"

#include <fmt/format.h>

namespace pt2cache::proto {

namespace detail {

tl::unexpected<Error> malformed(std::string_view what) {
    return tl::unexpected(Error{Status::malformed, fmt::format("malformed {}", what)});
}

tl::expected<void, Error> check_namespace(std::string_view ns) {
    if (!valid_namespace(ns)) {
        return tl::unexpected(
            Error{Status::bad_namespace,
                  // {:?}: quoted, with control and invalid bytes escaped (the
                  // text reaches the log).
                  fmt::format("invalid namespace {:?}: expected 1 to {} characters of [a-z0-9-]",
                              ns.substr(0, 40), k_max_namespace)});
    }
    return {};
}

// Reads <ns:str8> <key:str16> and validates both.
tl::expected<KeyRef, Error> read_key_ref(ByteReader& reader, std::string_view what) {
    KeyRef ref;
    ref.ns = reader.str8();
    // A key length over the limit is reported as such even when the body is
    // also short, so that a client learns the real problem.
    const auto key_len = reader.integer<std::uint16_t>();
    if (!reader.ok()) {
        return malformed(what);
    }
    if (auto ok = check_namespace(ref.ns); !ok) {
        return tl::unexpected(ok.error());
    }
    if (key_len > k_max_key || key_len == 0) {
        return tl::unexpected(
            Error{Status::key_too_long,
                  fmt::format("key of {} bytes: keys are 1 to {} bytes", key_len, k_max_key)});
    }
    ref.key = reader.text(key_len);
    if (!reader.ok()) {
        return malformed(what);
    }
    return ref;
}

tl::expected<void, Error> check_value_size(std::span<const std::byte> value, const Limits& limits) {
    if (value.size() > limits.max_value) {
        return tl::unexpected(
            Error{Status::value_too_large, fmt::format("value of {} bytes exceeds max_value {}",
                                                       value.size(), limits.max_value)});
    }
    return {};
}

} // namespace detail

namespace {

using detail::check_namespace;
using detail::check_value_size;
using detail::malformed;
using detail::read_key_ref;

std::optional<std::uint64_t> read_token(ByteReader& reader, std::uint8_t flags) {
    if ((flags & put_flag::bundle) == 0) {
        return std::nullopt;
    }
    return reader.integer<std::uint64_t>();
}

} // namespace

bool valid_namespace(std::string_view ns) {
    return !ns.empty() && ns.size() <= k_max_namespace &&
           std::all_of(ns.begin(), ns.end(), [](char c) {
               return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
           });
}

tl::expected<HelloRequest, Error> parse_hello(std::span<const std::byte> body) {
    ByteReader reader(body);
    HelloRequest request;
    request.version = reader.integer<std::uint16_t>();
    request.capabilities = reader.integer<std::uint32_t>();
    request.client_name = reader.str8();
    if (!reader.at_end()) {
        return malformed("HELLO body");
    }
    return request;
}

tl::expected<GetRequest, Error> parse_get(const Header& header, std::span<const std::byte> body) {
    ByteReader reader(body);
    GetRequest request;
    request.bundle_token = read_token(reader, header.flags);
    auto target = read_key_ref(reader, "GET body");
    if (!target) {
        return tl::unexpected(target.error());
    }
    if (!reader.at_end()) {
        return malformed("GET body");
    }
    request.target = *target;
    return request;
}

tl::expected<PutRequest, Error> parse_put(const Header& header, std::span<const std::byte> body,
                                          const Limits& limits) {
    ByteReader reader(body);
    PutRequest request;
    request.bundle_token = read_token(reader, header.flags);
    request.only_if_absent = (header.flags & put_flag::only_if_absent) != 0;
    auto target = read_key_ref(reader, "PUT body");
    if (!target) {
        return tl::unexpected(target.error());
    }
    request.target = *target;
    request.ttl_ms = reader.integer<std::uint64_t>();
    if (!reader.ok()) {
        return malformed("PUT body");
    }
    request.value = reader.rest();
    if (auto ok = check_value_size(request.value, limits); !ok) {
        return tl::unexpected(ok.error());
    }
    return request;
}

tl::expected<KeyRef, Error> parse_key(std::span<const std::byte> body) {
    ByteReader reader(body);
    auto target = read_key_ref(reader, "key body");
    if (target && !reader.at_end()) {
        return malformed("key body");
    }
    return target;
}

tl::expected<ListRequest, Error> parse_list(std::span<const std::byte> body) {
    ByteReader reader(body);
    ListRequest request;
    request.ns = reader.str8();
    request.cursor = reader.str16();
    request.limit = reader.integer<std::uint32_t>();
    if (!reader.at_end()) {
        return malformed("LIST body");
    }
    if (auto ok = check_namespace(request.ns); !ok) {
        return tl::unexpected(ok.error());
    }
    request.limit = std::clamp<std::uint32_t>(request.limit, 1, k_max_list_limit);
    return request;
}

tl::expected<std::string_view, Error> parse_clear(std::span<const std::byte> body) {
    ByteReader reader(body);
    auto ns = reader.str8();
    if (!reader.at_end()) {
        return malformed("CLEAR body");
    }
    if (auto ok = check_namespace(ns); !ok) {
        return tl::unexpected(ok.error());
    }
    return ns;
}

tl::expected<BundleBeginRequest, Error> parse_bundle_begin(std::span<const std::byte> body) {
    ByteReader reader(body);
    BundleBeginRequest request;
    request.code_hash = reader.str16();
    request.backend_hash = reader.str16();
    if (!reader.at_end()) {
        return malformed("BUNDLE_BEGIN body");
    }
    if (request.code_hash.empty()) {
        return tl::unexpected(Error{Status::malformed, "BUNDLE_BEGIN needs a code hash"});
    }
    return request;
}

tl::expected<std::uint64_t, Error> parse_bundle_end(std::span<const std::byte> body) {
    ByteReader reader(body);
    const auto token = reader.integer<std::uint64_t>();
    if (!reader.at_end()) {
        return malformed("BUNDLE_END body");
    }
    return token;
}

// ---- request encoding ----

namespace detail {

// Appends a header with a placeholder length, returns the header's offset.
std::size_t begin_frame(std::vector<std::byte>& out, Op op, std::uint8_t flags, std::uint32_t id) {
    const std::size_t at = out.size();
    encode_header(Header{op, flags, id, 0}, out);
    return at;
}

void finish_frame(std::vector<std::byte>& out, std::size_t at, std::size_t extra) {
    const auto length = static_cast<std::uint32_t>(out.size() - at - k_header_size + extra);
    std::memcpy(out.data() + at + 8, &length, sizeof length);
}

} // namespace detail

using detail::begin_frame;
using detail::finish_frame;

void encode_hello(std::vector<std::byte>& out, std::uint32_t id, const HelloRequest& request) {
    const auto at = begin_frame(out, Op::hello, 0, id);
    ByteWriter(out)
        .integer(request.version)
        .integer(request.capabilities)
        .str8(request.client_name.substr(0, 255));
    finish_frame(out, at);
}

void encode_ping(std::vector<std::byte>& out, std::uint32_t id,
                 std::span<const std::byte> payload) {
    const auto at = begin_frame(out, Op::ping, 0, id);
    ByteWriter(out).bytes(payload);
    finish_frame(out, at);
}

void encode_key_op(std::vector<std::byte>& out, Op op, std::uint32_t id, KeyRef target) {
    const auto at = begin_frame(out, op, 0, id);
    ByteWriter(out).str8(target.ns).str16(target.key);
    finish_frame(out, at);
}

void encode_get(std::vector<std::byte>& out, std::uint32_t id, const GetRequest& request) {
    const std::uint8_t flags = request.bundle_token ? put_flag::bundle : 0;
    const auto at = begin_frame(out, Op::get, flags, id);
    ByteWriter writer(out);
    if (request.bundle_token) {
        writer.integer(*request.bundle_token);
    }
    writer.str8(request.target.ns).str16(request.target.key);
    finish_frame(out, at);
}

void encode_put_head(std::vector<std::byte>& out, std::uint32_t id, const PutRequest& request) {
    std::uint8_t flags = request.only_if_absent ? put_flag::only_if_absent : 0;
    if (request.bundle_token) {
        flags |= put_flag::bundle;
    }
    const auto at = begin_frame(out, Op::put, flags, id);
    ByteWriter writer(out);
    if (request.bundle_token) {
        writer.integer(*request.bundle_token);
    }
    writer.str8(request.target.ns).str16(request.target.key).integer(request.ttl_ms);
    finish_frame(out, at, request.value.size());
}

void encode_stats(std::vector<std::byte>& out, std::uint32_t id, std::uint8_t flags) {
    encode_header(Header{Op::stats, flags, id, 0}, out);
}

void encode_list(std::vector<std::byte>& out, std::uint32_t id, const ListRequest& request) {
    const auto at = begin_frame(out, Op::list, 0, id);
    ByteWriter(out).str8(request.ns).str16(request.cursor).integer(request.limit);
    finish_frame(out, at);
}

void encode_clear(std::vector<std::byte>& out, std::uint32_t id, std::string_view ns) {
    const auto at = begin_frame(out, Op::clear, 0, id);
    ByteWriter(out).str8(ns);
    finish_frame(out, at);
}

void encode_bundle_begin(std::vector<std::byte>& out, std::uint32_t id,
                         const BundleBeginRequest& request) {
    const auto at = begin_frame(out, Op::bundle_begin, 0, id);
    ByteWriter(out).str16(request.code_hash).str16(request.backend_hash);
    finish_frame(out, at);
}

void encode_bundle_end(std::vector<std::byte>& out, std::uint32_t id, std::uint64_t token) {
    const auto at = begin_frame(out, Op::bundle_end, 0, id);
    ByteWriter(out).integer(token);
    finish_frame(out, at);
}

// ---- responses ----

void encode_response_header(std::vector<std::byte>& out, Op op, std::uint32_t id, Status status,
                            std::size_t body_length) {
    encode_header(
        Header{op, static_cast<std::uint8_t>(status), id, static_cast<std::uint32_t>(body_length)},
        out);
}

void encode_response(std::vector<std::byte>& out, Op op, std::uint32_t id, Status status,
                     std::span<const std::byte> body) {
    encode_response_header(out, op, id, status, body.size());
    ByteWriter(out).bytes(body);
}

void encode_error(std::vector<std::byte>& out, Op op, std::uint32_t id, const Error& error) {
    const std::string_view message =
        std::string_view(error.message).substr(0, std::numeric_limits<std::uint16_t>::max());
    encode_response_header(out, op, id, error.status, 2 + message.size());
    ByteWriter(out).str16(message);
}

void encode_hello_response(std::vector<std::byte>& out, std::uint32_t id,
                           const HelloResponse& response) {
    const auto at = begin_frame(out, Op::hello, static_cast<std::uint8_t>(Status::ok), id);
    ByteWriter(out)
        .integer(response.version)
        .integer(response.capabilities)
        .integer(response.max_value)
        .integer(response.max_key)
        .str8(response.server_name.substr(0, 255));
    finish_frame(out, at);
}

void encode_list_response(std::vector<std::byte>& out, std::uint32_t id,
                          const ListResponse& response) {
    const auto at = begin_frame(out, Op::list, static_cast<std::uint8_t>(Status::ok), id);
    ByteWriter writer(out);
    writer.str16(response.next_cursor).integer(static_cast<std::uint32_t>(response.entries.size()));
    for (const auto& entry : response.entries) {
        writer.str16(entry.key).integer(entry.size).integer(entry.mtime_ms);
    }
    finish_frame(out, at);
}

void encode_count_response(std::vector<std::byte>& out, Op op, std::uint32_t id,
                           std::uint64_t count) {
    const auto at = begin_frame(out, op, static_cast<std::uint8_t>(Status::ok), id);
    ByteWriter(out).integer(count);
    finish_frame(out, at);
}

void encode_bundle_begin_response(std::vector<std::byte>& out, std::uint32_t id,
                                  const BundleBeginResponse& response) {
    const auto at = begin_frame(out, Op::bundle_begin, static_cast<std::uint8_t>(Status::ok), id);
    ByteWriter(out)
        .integer(response.token)
        .integer(static_cast<std::uint8_t>(response.hit ? 1 : 0))
        .integer(response.entries)
        .integer(response.time_saved_ms);
    finish_frame(out, at);
}

void encode_bundle_end_response(std::vector<std::byte>& out, std::uint32_t id,
                                std::uint32_t entries) {
    const auto at = begin_frame(out, Op::bundle_end, static_cast<std::uint8_t>(Status::ok), id);
    ByteWriter(out).integer(entries);
    finish_frame(out, at);
}

tl::expected<BundleBeginResponse, Error>
parse_bundle_begin_response(std::span<const std::byte> body) {
    ByteReader reader(body);
    BundleBeginResponse response;
    response.token = reader.integer<std::uint64_t>();
    response.hit = reader.integer<std::uint8_t>() != 0;
    response.entries = reader.integer<std::uint32_t>();
    response.time_saved_ms = reader.integer<std::uint64_t>();
    if (!reader.at_end()) {
        return malformed("BUNDLE_BEGIN response");
    }
    return response;
}

tl::expected<std::uint32_t, Error> parse_bundle_end_response(std::span<const std::byte> body) {
    ByteReader reader(body);
    const auto entries = reader.integer<std::uint32_t>();
    if (!reader.at_end()) {
        return malformed("BUNDLE_END response");
    }
    return entries;
}

tl::expected<HelloResponse, Error> parse_hello_response(std::span<const std::byte> body) {
    ByteReader reader(body);
    HelloResponse response;
    response.version = reader.integer<std::uint16_t>();
    response.capabilities = reader.integer<std::uint32_t>();
    response.max_value = reader.integer<std::uint64_t>();
    response.max_key = reader.integer<std::uint16_t>();
    response.server_name = reader.str8();
    if (!reader.at_end()) {
        return malformed("HELLO response");
    }
    return response;
}

tl::expected<ListResponse, Error> parse_list_response(std::span<const std::byte> body) {
    ByteReader reader(body);
    ListResponse response;
    response.next_cursor = reader.str16();
    const auto count = reader.integer<std::uint32_t>();
    // Each entry takes at least 18 bytes: bound the reservation by the body.
    if (!reader.ok() || count > reader.remaining() / 18) {
        return malformed("LIST response");
    }
    response.entries.reserve(count);
    for (std::uint32_t i = 0; i < count; ++i) {
        ListEntry entry;
        entry.key = reader.str16();
        entry.size = reader.integer<std::uint64_t>();
        entry.mtime_ms = reader.integer<std::uint64_t>();
        response.entries.push_back(entry);
    }
    if (!reader.at_end()) {
        return malformed("LIST response");
    }
    return response;
}

tl::expected<std::uint64_t, Error> parse_count_response(std::span<const std::byte> body) {
    ByteReader reader(body);
    const auto count = reader.integer<std::uint64_t>();
    if (!reader.at_end()) {
        return malformed("count response");
    }
    return count;
}

std::string parse_error_message(std::span<const std::byte> body) {
    ByteReader reader(body);
    auto message = reader.str16();
    if (!reader.ok()) {
        return "(malformed error message)";
    }
    return std::string(message);
}

} // namespace pt2cache::proto
