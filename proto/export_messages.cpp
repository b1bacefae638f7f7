// SPDX-License-Identifier: MIT
#include "proto/export_messages.hpp"

#include <algorithm>

#include "proto/bytes.hpp"
#include "proto/message_parts.hpp"

#include <fmt/format.h>

namespace pt2cache::proto {

using detail::begin_frame;
using detail::check_namespace;
using detail::finish_frame;
using detail::malformed;
using detail::read_key_ref;

tl::expected<ScanRequest, Error> parse_scan(std::span<const std::byte> body) {
    ByteReader reader(body);
    ScanRequest request;
    request.cursor = reader.str16();
    request.limit = reader.integer<std::uint32_t>();
    request.since_ms = reader.integer<std::uint64_t>();
    const auto count = reader.integer<std::uint8_t>();
    if (!reader.ok() || count > k_max_scan_namespaces) {
        return malformed("SCAN body");
    }
    request.namespaces.reserve(count);
    for (std::uint8_t i = 0; i < count; ++i) {
        request.namespaces.push_back(reader.str8());
    }
    if (!reader.at_end()) {
        return malformed("SCAN body");
    }
    for (const auto ns : request.namespaces) {
        if (auto ok = check_namespace(ns); !ok) {
            return tl::unexpected(ok.error());
        }
    }
    request.limit = std::clamp<std::uint32_t>(request.limit, 1, k_max_list_limit);
    return request;
}

tl::expected<RestoreRequest, Error>
parse_restore(const Header& header, std::span<const std::byte> body, const Limits& limits) {
    ByteReader reader(body);
    RestoreRequest request;
    request.replace = (header.flags & restore_flag::replace) != 0;
    auto target = read_key_ref(reader, "RESTORE body");
    if (!target) {
        return tl::unexpected(target.error());
    }
    request.target = *target;
    request.created_ms = reader.integer<std::uint64_t>();
    request.expires_ms = reader.integer<std::uint64_t>();
    if (!reader.ok()) {
        return malformed("RESTORE body");
    }
    request.value = reader.rest();
    if (auto ok = detail::check_value_size(request.value, limits); !ok) {
        return tl::unexpected(ok.error());
    }
    return request;
}

void encode_scan_response(std::vector<std::byte>& out, std::uint32_t id,
                          const ScanResponse& response) {
    const auto at = begin_frame(out, Op::scan, static_cast<std::uint8_t>(Status::ok), id);
    ByteWriter writer(out);
    writer.str16(response.next_cursor).integer(static_cast<std::uint32_t>(response.entries.size()));
    for (const auto& entry : response.entries) {
        writer.str8(entry.ns)
            .str16(entry.key)
            .integer(entry.size)
            .integer(entry.created_ms)
            .integer(entry.expires_ms);
    }
    finish_frame(out, at);
}

void encode_dump_response_head(std::vector<std::byte>& out, std::uint32_t id,
                               std::uint64_t created_ms, std::uint64_t expires_ms,
                               std::size_t value_size) {
    const auto at = begin_frame(out, Op::dump, static_cast<std::uint8_t>(Status::ok), id);
    ByteWriter(out).integer(created_ms).integer(expires_ms);
    finish_frame(out, at, value_size);
}

void encode_scan(std::vector<std::byte>& out, std::uint32_t id, const ScanRequest& request) {
    const auto at = begin_frame(out, Op::scan, 0, id);
    ByteWriter writer(out);
    writer.str16(request.cursor)
        .integer(request.limit)
        .integer(request.since_ms)
        .integer(static_cast<std::uint8_t>(
            std::min<std::size_t>(request.namespaces.size(), k_max_scan_namespaces)));
    for (std::size_t i = 0; i < request.namespaces.size() && i < k_max_scan_namespaces; ++i) {
        writer.str8(request.namespaces[i]);
    }
    finish_frame(out, at);
}

void encode_restore_head(std::vector<std::byte>& out, std::uint32_t id,
                         const RestoreRequest& request) {
    const auto at = begin_frame(out, Op::restore, request.replace ? restore_flag::replace : 0, id);
    ByteWriter(out)
        .str8(request.target.ns)
        .str16(request.target.key)
        .integer(request.created_ms)
        .integer(request.expires_ms);
    finish_frame(out, at, request.value.size());
}

tl::expected<ScanResponse, Error> parse_scan_response(std::span<const std::byte> body) {
    ByteReader reader(body);
    ScanResponse response;
    response.next_cursor = reader.str16();
    const auto count = reader.integer<std::uint32_t>();
    // Each entry takes at least 28 bytes: bound the reservation by the body.
    if (!reader.ok() || count > reader.remaining() / 28) {
        return malformed("SCAN response");
    }
    response.entries.reserve(count);
    for (std::uint32_t i = 0; i < count; ++i) {
        ScanEntry entry;
        entry.ns = reader.str8();
        entry.key = reader.str16();
        entry.size = reader.integer<std::uint64_t>();
        entry.created_ms = reader.integer<std::uint64_t>();
        entry.expires_ms = reader.integer<std::uint64_t>();
        response.entries.push_back(entry);
    }
    if (!reader.at_end()) {
        return malformed("SCAN response");
    }
    return response;
}

tl::expected<DumpResponse, Error> parse_dump_response(std::span<const std::byte> body) {
    ByteReader reader(body);
    DumpResponse response;
    response.created_ms = reader.integer<std::uint64_t>();
    response.expires_ms = reader.integer<std::uint64_t>();
    if (!reader.ok()) {
        return malformed("DUMP response");
    }
    response.value = reader.rest();
    return response;
}

} // namespace pt2cache::proto
