// SPDX-License-Identifier: MIT
#include "daemon/export_ops.hpp"

#include <string>

#include "daemon/offload.hpp"
#include "proto/export_messages.hpp"
#include "proto/messages.hpp"

#include <fmt/format.h>

namespace pt2cache::daemon {

namespace {

using proto::Status;

proto::Error storage_error(const store::StoreError& error) {
    return {Status::storage_error, error.message};
}

awaitable<tl::expected<void, proto::Error>> serve_scan(Context& context,
                                                       const proto::Header& header,
                                                       std::span<const std::byte> body,
                                                       OutputBatch& out) {
    auto request = proto::parse_scan(body);
    if (!request) {
        co_return tl::make_unexpected(request.error());
    }
    std::vector<std::string> namespaces(request->namespaces.begin(), request->namespaces.end());
    const auto since = static_cast<store::UnixMs>(
        std::min<std::uint64_t>(request->since_ms, std::numeric_limits<store::UnixMs>::max()));
    auto page = co_await offload(*context.blocking, [&] {
        return context.store->scan(request->cursor, request->limit, since, namespaces);
    });
    if (!page) {
        co_return tl::make_unexpected(storage_error(page.error()));
    }
    proto::ScanResponse response;
    response.next_cursor = page->next_cursor;
    response.entries.reserve(page->entries.size());
    for (const auto& entry : page->entries) {
        response.entries.push_back({entry.ns, entry.key, entry.size,
                                    static_cast<std::uint64_t>(entry.created_ms),
                                    static_cast<std::uint64_t>(entry.expires_ms)});
    }
    proto::encode_scan_response(out.bytes(), header.id, response);
    co_return tl::expected<void, proto::Error>{};
}

awaitable<tl::expected<void, proto::Error>> serve_dump(Context& context,
                                                       const proto::Header& header,
                                                       std::span<const std::byte> body,
                                                       OutputBatch& out) {
    auto target = proto::parse_key(body);
    if (!target) {
        co_return tl::make_unexpected(target.error());
    }
    auto found = co_await offload(*context.blocking,
                                  [&] { return context.store->dump(target->ns, target->key); });
    if (!found) {
        co_return tl::make_unexpected(storage_error(found.error()));
    }
    if (!*found) {
        proto::encode_response(out.bytes(), header.op, header.id, Status::miss);
        co_return tl::expected<void, proto::Error>{};
    }
    auto& entry = **found;
    if (entry.value.size() > proto::k_max_frame_value) {
        // Stored through RESP, where daemon.max_value_size may reach
        // 4 GiB - 1: with DUMP's head, its length would not fit the frame's.
        co_return tl::make_unexpected(
            proto::Error{Status::value_too_large,
                         fmt::format("value of {} bytes: more than a DUMP reply carries ({})",
                                     entry.value.size(), proto::k_max_frame_value)});
    }
    proto::encode_dump_response_head(
        out.bytes(), header.id, static_cast<std::uint64_t>(entry.created_ms),
        static_cast<std::uint64_t>(entry.expires_ms), entry.value.size());
    out.append_blob(std::move(entry.value));
    co_return tl::expected<void, proto::Error>{};
}

awaitable<tl::expected<void, proto::Error>>
serve_restore(Context& context, const proto::Header& header, std::span<const std::byte> body,
              const std::shared_ptr<const std::vector<std::byte>>& owner, OutputBatch& out) {
    auto request = proto::parse_restore(header, body, context.limits());
    if (!request) {
        co_return tl::make_unexpected(request.error());
    }
    store::Entry entry;
    entry.value = owner ? store::Blob(owner, request->value) : store::Blob::copy_of(request->value);
    constexpr auto k_max_ms = static_cast<std::uint64_t>(std::numeric_limits<store::UnixMs>::max());
    entry.created_ms = static_cast<store::UnixMs>(std::min(request->created_ms, k_max_ms));
    entry.expires_ms = static_cast<store::UnixMs>(std::min(request->expires_ms, k_max_ms));
    const auto [ns, key] = request->target;
    const bool replace = request->replace;
    auto outcome = co_await offload(
        *context.blocking, [&] { return context.store->restore(ns, key, entry, replace); });
    if (!outcome) {
        co_return tl::make_unexpected(storage_error(outcome.error()));
    }
    proto::encode_response(out.bytes(), header.op, header.id,
                           *outcome == store::PutOutcome::stored ? Status::ok : Status::not_stored);
    co_return tl::expected<void, proto::Error>{};
}

} // namespace

awaitable<tl::expected<void, proto::Error>>
serve_export_op(Context& context, const proto::Header& header, std::span<const std::byte> body,
                const std::shared_ptr<const std::vector<std::byte>>& owner, OutputBatch& out) {
    switch (header.op) {
    case proto::Op::scan:
        co_return co_await serve_scan(context, header, body, out);
    case proto::Op::dump:
        co_return co_await serve_dump(context, header, body, out);
    case proto::Op::restore:
        co_return co_await serve_restore(context, header, body, owner, out);
    default:
        co_return tl::make_unexpected(proto::Error{
            Status::internal, fmt::format("{} is not an export op", proto::op_name(header.op))});
    }
}

} // namespace pt2cache::daemon
