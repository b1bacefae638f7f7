// SPDX-License-Identifier: MIT
//
// SCAN, DUMP and RESTORE (docs/protocol.md, "Export and import"), for
// `pt2cache export` and `pt2cache import`.
#include <algorithm>
#include <limits>

#include "client/client.hpp"
#include "client/ops_common.hpp"
#include "proto/export_messages.hpp"
#include "proto/frame.hpp"

#include <fmt/format.h>

namespace pt2cache::client {

using detail::check_namespace;
using detail::invalid;
using detail::unexpected_status;

tl::expected<ScanPage, Error> Client::scan(std::string_view cursor, std::uint32_t limit,
                                           std::uint64_t since_ms,
                                           std::span<const std::string> namespaces) {
    if (namespaces.size() > proto::k_max_scan_namespaces) {
        return invalid(Status::malformed, fmt::format("SCAN takes at most {} namespaces",
                                                      proto::k_max_scan_namespaces));
    }
    for (const auto& ns : namespaces) {
        if (auto ok = check_namespace(ns); !ok) {
            return tl::unexpected(std::move(ok.error()));
        }
    }
    if (cursor.size() > std::numeric_limits<std::uint16_t>::max()) {
        return invalid(Status::malformed, "SCAN cursor longer than 65535 bytes");
    }
    proto::ScanRequest request;
    request.cursor = cursor;
    request.limit = limit;
    request.since_ms = since_ms;
    request.namespaces.assign(namespaces.begin(), namespaces.end());
    const auto id = begin_request();
    proto::encode_scan(m_out, id, request);
    const std::uint64_t entries = std::clamp<std::uint32_t>(limit, 1, proto::k_max_list_limit);
    const std::uint64_t max_body =
        2 + 65535 + 4 + entries * (1 + proto::k_max_namespace + 2 + proto::k_max_key + 24);
    auto reply = round_trip(proto::Op::scan, id, {}, max_body);
    if (!reply) {
        return tl::unexpected(std::move(reply.error()));
    }
    if (reply->status != Status::ok) {
        return tl::unexpected(fail(unexpected_status(proto::Op::scan, reply->status)));
    }
    auto parsed = proto::parse_scan_response(reply->body);
    if (!parsed) {
        return tl::unexpected(fail(Error{ErrorKind::protocol, Status::internal,
                                         "pt2cached sent a malformed SCAN response"}));
    }
    ScanPage page;
    page.next_cursor = std::string(parsed->next_cursor);
    page.entries.reserve(parsed->entries.size());
    for (const auto& entry : parsed->entries) {
        page.entries.push_back(ScanEntry{std::string(entry.ns), std::string(entry.key), entry.size,
                                         entry.created_ms, entry.expires_ms});
    }
    return page;
}

tl::expected<std::optional<DumpedEntry>, Error> Client::dump(std::string_view ns,
                                                             std::string_view key) {
    if (auto ok = check_key(ns, key); !ok) {
        return tl::unexpected(std::move(ok.error()));
    }
    if (auto ok = ensure_connected(); !ok) {
        return tl::unexpected(std::move(ok.error()));
    }
    const auto id = begin_request();
    proto::encode_key_op(m_out, proto::Op::dump, id, {ns, key});
    // The value may be max_value bytes, after 16 bytes of times.
    auto reply = round_trip(proto::Op::dump, id, {}, m_max_value + 16);
    if (!reply) {
        return tl::unexpected(std::move(reply.error()));
    }
    if (reply->status == Status::miss) {
        return std::nullopt;
    }
    if (reply->status != Status::ok) {
        return tl::unexpected(fail(unexpected_status(proto::Op::dump, reply->status)));
    }
    auto parsed = proto::parse_dump_response(reply->body);
    if (!parsed) {
        return tl::unexpected(fail(Error{ErrorKind::protocol, Status::internal,
                                         "pt2cached sent a malformed DUMP response"}));
    }
    DumpedEntry entry;
    entry.created_ms = parsed->created_ms;
    entry.expires_ms = parsed->expires_ms;
    // The value follows 16 bytes of times: move the body rather than copy it.
    reply->body.erase(reply->body.begin(), reply->body.begin() + 16);
    entry.value = std::move(reply->body);
    return entry;
}

tl::expected<bool, Error> Client::restore(std::string_view ns, std::string_view key,
                                          std::uint64_t created_ms, std::uint64_t expires_ms,
                                          std::span<const std::byte> value, bool replace) {
    if (auto ok = check_key(ns, key); !ok) {
        return tl::unexpected(std::move(ok.error()));
    }
    if (auto ok = ensure_connected(); !ok) {
        return tl::unexpected(std::move(ok.error()));
    }
    const std::uint64_t max_value = std::min<std::uint64_t>(
        m_max_value, std::numeric_limits<std::uint32_t>::max() - proto::k_put_overhead);
    if (value.size() > max_value) {
        return invalid(Status::value_too_large,
                       fmt::format("value of {} bytes exceeds pt2cached's max_value {}",
                                   value.size(), max_value));
    }
    proto::RestoreRequest request;
    request.target = {ns, key};
    request.created_ms = created_ms;
    request.expires_ms = expires_ms;
    request.replace = replace;
    request.value = value;
    const auto id = begin_request();
    proto::encode_restore_head(m_out, id, request);
    auto reply = round_trip(proto::Op::restore, id, value);
    if (!reply) {
        return tl::unexpected(std::move(reply.error()));
    }
    if (reply->status == Status::ok || reply->status == Status::not_stored) {
        return reply->status == Status::ok;
    }
    return tl::unexpected(fail(unexpected_status(proto::Op::restore, reply->status)));
}

} // namespace pt2cache::client
