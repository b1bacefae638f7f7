// SPDX-License-Identifier: MIT
// The native session's data and bundle operations: GET and PUT (inline and
// in full), EXISTS, DELETE, LIST, CLEAR, BUNDLE_BEGIN/END and CXX_LOOKUP.
#include <limits>

#include "daemon/cxx_lookup.hpp"
#include "daemon/fetch.hpp"
#include "daemon/log.hpp"
#include "daemon/native_session_impl.hpp"
#include "daemon/offload.hpp"
#include "proto/autotune.hpp"
#include "proto/bytes.hpp"
#include "proto/cxx_value.hpp"

namespace pt2cache::daemon::native {

namespace {

// Values a deferred PUT takes (NativeSession::defer_put). Larger ones go
// straight to handle_put: they are the ones likely to need compression (at
// disk.compress_threshold) or room the write queue lacks.
constexpr std::size_t k_quick_value_max = 16 * 1024;

// Deferred PUTs are stored once this many wait, or values of this many bytes.
// The copies are outside daemon.max_inflight_bytes (a connection waits for room
// in the write queue holding them): keep them near the input buffer every
// connection holds outside it (InputBuffer::k_base, 32 KiB).
constexpr std::size_t k_max_deferred_puts = 64;
constexpr std::uint64_t k_max_deferred_bytes = 32 << 10;

// Best-configs up to this size join a bundle on the Asio thread (parsing a
// few hundred bytes of JSON costs less than a trip to the worker pool).
constexpr std::size_t k_inline_join = 16 * 1024;

proto::Error unknown_token(std::uint64_t token) {
    return {Status::unknown_token,
            fmt::format("bundle token {:016x} is unknown, expired or already ended", token)};
}

// Adds a best-config to bundle `token` when `ns`/`key` is one.
void join_bundle(BundleRegistry& bundles, std::uint64_t token, std::string_view ns,
                 std::string_view key, std::string_view value) {
    if (!joins_bundle(ns, key)) {
        return;
    }
    if (auto json = bundle_entry_json(value)) {
        bundles.add(token, key, std::move(*json));
    }
}

} // namespace

std::optional<bool> NativeSession::quick(const proto::Header& header,
                                         std::span<const std::byte> body) {
    if (!m_greeted || header.op != Op::get) {
        return std::nullopt;
    }
    m_measured_ns = {};
    m_measured_tier = LatencyTier::none;
    m_measured_result = RequestResult::ok;
    const auto request = proto::parse_get(header, body);
    if (!request || request->bundle_token) {
        return std::nullopt;
    }
    const auto [ns, key] = request->target;
    auto found = store().get_quick(ns, key, &m_measured_tier);
    if (!found) {
        return std::nullopt;
    }
    m_context.stats.daemon().requests++;
    measure(ns, LatencyOp::get);
    answer_get(header, ns, key, *found);
    return true;
}

bool NativeSession::defer_put(const proto::Header& header, std::span<const std::byte> body) {
    if (!m_greeted || header.op != Op::put) {
        return false;
    }
    const auto request = proto::parse_put(header, body, m_context.limits());
    if (!request || request->bundle_token || request->only_if_absent ||
        request->value.size() > k_quick_value_max) {
        return false;
    }
    const auto [ns, key] = request->target;
    DeferredPut& put = m_deferred.emplace_back();
    put.header = header;
    put.ns_at = m_put_ids.size();
    put.ns_size = ns.size();
    put.key_size = key.size();
    put.entry = put_entry(*request, nullptr);
    m_put_ids.append(ns).append(key);
    m_deferred_bytes += request->value.size();
    return true;
}

awaitable<bool> NativeSession::flush_puts() {
    const std::string_view ids = m_put_ids;
    m_puts.clear();
    for (DeferredPut& put : m_deferred) {
        m_puts.push_back(store::QuickPut{ids.substr(put.ns_at, put.ns_size),
                                         ids.substr(put.ns_at + put.ns_size, put.key_size),
                                         std::move(put.entry)});
    }
    bool keep = true;
    std::size_t done = 0;
    while (done < m_puts.size() && keep) {
        const std::size_t stored = store().put_quick_many(std::span(m_puts).subspan(done));
        m_context.stats.daemon().requests += stored;
        const auto answered = LatencyRecorder::now_ns();
        for (std::size_t i = done; i < done + stored; ++i) {
            const store::QuickPut& put = m_puts[i];
            m_context.compile.on_put(put.ns, put.key);
            reply(m_deferred[i].header, Status::ok);
            m_latency.finish_at(answered, put.ns, LatencyOp::put, LatencyTier::none,
                                RequestResult::ok);
        }
        done += stored;
        if (done < m_puts.size()) {
            // No room in the write queue now, or a put the quick way does not
            // take (a compressible value, a namespace not stored locally).
            const store::QuickPut& put = m_puts[done];
            m_context.stats.daemon().requests++;
            const auto outcome = co_await offload(pool(), [&] {
                return store().put(put.ns, put.key, put.entry, store::PutMode::overwrite);
            });
            keep = answer_put(m_deferred[done].header, put.ns, put.key, outcome);
            m_latency.finish(put.ns, LatencyOp::put, LatencyTier::none,
                             outcome ? RequestResult::ok : RequestResult::error);
            ++done;
        }
    }
    m_deferred.clear();
    m_put_ids.clear();
    m_deferred_bytes = 0;
    m_puts.clear();
    co_return keep;
}

bool NativeSession::deferred_full() const {
    return m_deferred.size() >= k_max_deferred_puts || m_deferred_bytes >= k_max_deferred_bytes;
}

void NativeSession::answer_get(const proto::Header& header, std::string_view ns,
                               std::string_view key, std::optional<store::Entry>& entry) {
    const auto hit_bytes = entry ? entry->value.bytes() : std::span<const std::byte>();
    m_context.compile.on_get(ns, key, entry ? &hit_bytes : nullptr);
    if (!entry) {
        reply(header, Status::miss);
        return;
    }
    proto::encode_response_header(m_out.bytes(), header.op, header.id, Status::ok,
                                  entry->value.size());
    m_out.append_blob(std::move(entry->value));
}

store::Entry NativeSession::put_entry(const proto::PutRequest& request, const Owner& owner) {
    store::Entry entry;
    entry.value = owner ? store::Blob(owner, request.value) : store::Blob::copy_of(request.value);
    entry.created_ms = store::now_ms();
    // A TTL past the end of time means no expiry, not an overflow into the past.
    const auto room =
        static_cast<std::uint64_t>(std::numeric_limits<store::UnixMs>::max() - entry.created_ms);
    if (request.ttl_ms != 0 && request.ttl_ms < room) {
        entry.expires_ms = entry.created_ms + static_cast<store::UnixMs>(request.ttl_ms);
    }
    return entry;
}

bool NativeSession::answer_put(const proto::Header& header, std::string_view ns,
                               std::string_view key,
                               const tl::expected<store::PutOutcome, store::StoreError>& outcome) {
    if (!outcome) {
        return fail(header, {Status::storage_error, outcome.error().message});
    }
    const bool stored = *outcome == store::PutOutcome::stored;
    if (stored) {
        m_context.compile.on_put(ns, key);
    }
    reply(header, stored ? Status::ok : Status::not_stored);
    return true;
}

awaitable<bool> NativeSession::handle_get(const proto::Header& header,
                                          std::span<const std::byte> body) {
    auto request = proto::parse_get(header, body);
    if (!request) {
        co_return fail(header, request.error());
    }
    const auto token = request->bundle_token;
    if (token && !bundles().touch(*token)) {
        co_return fail(header, unknown_token(*token));
    }
    const auto [ns, key] = request->target;
    measure(ns, LatencyOp::get);
    PendingReplies pending{m_connection, m_out};
    auto found = co_await fetch(m_context, ns, key, &m_measured_tier, &pending);
    if (!found) {
        co_return fail(header, {Status::storage_error, found.error().message});
    }
    auto& entry = *found;
    // A hit joins the bundle: kernels compiled before are bundled too.
    if (entry && token && joins_bundle(ns, key)) {
        const auto text = entry->value.text();
        if (text.size() <= k_inline_join) {
            join_bundle(bundles(), *token, ns, key, text);
        } else {
            co_await offload(pool(), [&] {
                join_bundle(bundles(), *token, ns, key, text);
                return true;
            });
        }
    }
    answer_get(header, ns, key, entry);
    co_return true;
}

awaitable<bool> NativeSession::handle_put(const proto::Header& header,
                                          std::span<const std::byte> body, const Owner& owner) {
    auto request = proto::parse_put(header, body, m_context.limits());
    if (!request) {
        co_return fail(header, request.error());
    }
    const auto token = request->bundle_token;
    if (token && !bundles().touch(*token)) {
        co_return fail(header, unknown_token(*token));
    }
    store::Entry entry = put_entry(*request, owner);
    const auto mode =
        request->only_if_absent ? store::PutMode::only_if_absent : store::PutMode::overwrite;
    const auto [ns, key] = request->target;
    measure(ns, LatencyOp::put);
    // Without a bundle to join, a put that cannot block is done right here.
    std::optional<tl::expected<store::PutOutcome, store::StoreError>> outcome;
    if (!token) {
        outcome = store().put_quick(ns, key, entry, mode);
    }
    if (!outcome) {
        outcome = co_await offload(pool(), [&] {
            auto result = store().put(ns, key, entry, mode);
            if (token && result && *result == store::PutOutcome::stored) {
                join_bundle(bundles(), *token, ns, key, entry.value.text());
            }
            return result;
        });
    }
    co_return answer_put(header, ns, key, *outcome);
}

awaitable<bool> NativeSession::handle_key_op(const proto::Header& header,
                                             std::span<const std::byte> body) {
    auto target = proto::parse_key(body);
    if (!target) {
        co_return fail(header, target.error());
    }
    const auto [ns, key] = *target;
    const bool del = header.op == Op::del;
    measure(ns, del ? LatencyOp::del : LatencyOp::exists);
    auto found = co_await offload(
        pool(), [&] { return del ? store().remove(ns, key) : store().exists(ns, key); });
    if (!found) {
        co_return fail(header, {Status::storage_error, found.error().message});
    }
    reply(header, *found ? Status::ok : Status::miss);
    co_return true;
}

awaitable<bool> NativeSession::handle_list(const proto::Header& header,
                                           std::span<const std::byte> body) {
    auto request = proto::parse_list(body);
    if (!request) {
        co_return fail(header, request.error());
    }
    measure(request->ns, LatencyOp::list);
    auto page = co_await offload(
        pool(), [&] { return store().list(request->ns, request->cursor, request->limit); });
    if (!page) {
        co_return fail(header, {Status::storage_error, page.error().message});
    }
    proto::ListResponse response;
    response.next_cursor = page->next_cursor;
    response.entries.reserve(page->entries.size());
    for (const auto& entry : page->entries) {
        response.entries.push_back(
            {entry.key, entry.size, static_cast<std::uint64_t>(entry.mtime_ms)});
    }
    proto::encode_list_response(m_out.bytes(), header.id, response);
    co_return true;
}

awaitable<bool> NativeSession::handle_clear(const proto::Header& header,
                                            std::span<const std::byte> body) {
    auto ns = proto::parse_clear(body);
    if (!ns) {
        co_return fail(header, ns.error());
    }
    measure(*ns, LatencyOp::clear);
    auto removed = co_await offload(pool(), [&] { return store().clear(*ns); });
    if (!removed) {
        co_return fail(header, {Status::storage_error, removed.error().message});
    }
    proto::encode_count_response(m_out.bytes(), header.op, header.id, *removed);
    co_return true;
}

awaitable<bool> NativeSession::handle_bundle_begin(const proto::Header& header,
                                                   std::span<const std::byte> body) {
    auto request = proto::parse_bundle_begin(body);
    if (!request) {
        co_return fail(header, request.error());
    }
    measure(proto::autotune::k_bundle_namespace, LatencyOp::bundle_begin);
    auto key = proto::autotune::bundle_key(request->code_hash, request->backend_hash);
    PendingReplies pending{m_connection, m_out};
    auto found =
        co_await fetch(m_context, proto::autotune::k_bundle_namespace, key, nullptr, &pending);
    BundleRestore restore;
    if (!found) {
        logger("bundle").warn("bundle {} could not be read, treated as a miss: {}", key,
                              found.error().message);
    } else if (*found) {
        restore = co_await offload(pool(), [&] {
            return restore_bundle(store(), key, **found, &pool(),
                                  m_context.config.blocking_threads - 1);
        });
    }
    proto::BundleBeginResponse response;
    response.token = bundles().open(std::move(key), restore.hit);
    response.hit = restore.hit;
    response.entries = restore.entries;
    response.time_saved_ms = restore.time_saved_ms;
    if (!restore.hit) {
        m_measured_result = RequestResult::miss;
    }
    logger("session").debug("[{}] BUNDLE_BEGIN {}: {} entries restored", m_connection.id(),
                            restore.hit ? "hit" : "miss", restore.entries);
    proto::encode_bundle_begin_response(m_out.bytes(), header.id, response);
    co_return true;
}

awaitable<bool> NativeSession::handle_bundle_end(const proto::Header& header,
                                                 std::span<const std::byte> body) {
    const auto token = proto::parse_bundle_end(body);
    if (!token) {
        co_return fail(header, token.error());
    }
    measure(proto::autotune::k_bundle_namespace, LatencyOp::bundle_end);
    auto bundle = bundles().close(*token);
    if (!bundle) {
        co_return fail(header, unknown_token(*token));
    }
    const auto stored = co_await offload(pool(), [&] { return store_bundle(store(), *bundle); });
    if (!stored) {
        co_return fail(header, {Status::storage_error, stored.error().message});
    }
    proto::encode_bundle_end_response(m_out.bytes(), header.id, *stored);
    co_return true;
}

awaitable<bool> NativeSession::handle_cxx_lookup(const proto::Header& header,
                                                 std::span<const std::byte> body) {
    measure(proto::cxx::k_namespace, LatencyOp::get);
    PendingReplies pending{m_connection, m_out};
    auto answer = co_await serve_cxx_lookup(m_context, body, &m_measured_tier,
                                            m_connection.peer_shares_files(), &pending);
    if (!answer) {
        co_return fail(header, answer.error());
    }
    if (answer->outcome != proto::cxx::LookupOutcome::hit) {
        m_measured_result = RequestResult::miss;
    }
    // The manifest is copied into the reply; the result (up to a precompiled
    // header's size) goes out from the store's buffer.
    proto::cxx::encode_lookup_response_head(m_out.bytes(), header.id, answer->outcome,
                                            answer->manifest.bytes(), answer->result.size());
    if (!answer->result.empty()) {
        m_out.append_blob(std::move(answer->result));
    }
    co_return true;
}

} // namespace pt2cache::daemon::native
