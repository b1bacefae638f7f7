#include "daemon/native_session.hpp"

#include <cstring>
#include <limits>

#include "daemon/bundles.hpp"
#include "daemon/connection.hpp"
#include "daemon/cxx_lookup.hpp"
#include "daemon/export_ops.hpp"
#include "daemon/fetch.hpp"
#include "daemon/file_hashes.hpp"
#include "daemon/latency_recorder.hpp"
#include "daemon/log.hpp"
#include "daemon/metrics_text.hpp"
#include "daemon/offload.hpp"
#include "daemon/stats_report.hpp"
#include "proto/autotune.hpp"
#include "proto/bytes.hpp"
#include "proto/cxx_value.hpp"
#include "proto/messages.hpp"

namespace pt2cache::daemon {

namespace {

using proto::Op;
using proto::Status;
using store::LatencyOp;
using store::LatencyTier;
using store::RequestResult;

// Frames up to this size are parsed in the input buffer; larger ones (big
// PUTs) are read straight into a buffer of their own that the store keeps.
constexpr std::size_t k_inline_frame = 64 * 1024;
// A large frame's buffer grows by at least this much per step.
constexpr std::size_t k_body_step = 1 << 20;

constexpr std::string_view k_server_name = "pt2cached " PT2CACHE_VERSION;

// Values a quick PUT takes (NativeSession::quick). Larger ones go straight to
// handle_put: they are the ones likely to need compression (at
// disk.compress_threshold) or room the write queue lacks, and a quick try
// that fails loses its copy of the value.
constexpr std::size_t k_quick_value_max = 16 * 1024;

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

class NativeSession {
public:
    explicit NativeSession(Connection& connection)
        : m_connection(connection)
        , m_context(connection.context())
        , m_latency(m_context.stats) {}

    awaitable<void> run();

private:
    using Owner = std::shared_ptr<const std::vector<std::byte>>;

    // Handles one request; false when the connection must close afterwards.
    awaitable<bool> handle(const proto::Header& header, std::span<const std::byte> body,
                           const Owner& owner);
    // Records the latency of the request just handled (while its body is
    // still valid), or restarts the clock when it was not measured.
    void measured();
    // Receives the body of a large frame, `first` being what the input
    // buffer already holds, into a buffer that grows with the bytes that
    // arrive (never from the header's length alone), each step taken from
    // the daemon's in-flight budget through `lease`. Null when the peer left
    // or the budget had no room (then an error reply is queued).
    awaitable<std::shared_ptr<std::vector<std::byte>>>
    receive_body(const proto::Header& header, std::span<const std::byte> first,
                 InflightLease& lease);
    // A GET or PUT without a bundle token that the store answers at once (a
    // memory hit, a miss its indexes prove, a put with room in the write
    // queue), served without a coroutine frame or a scheduler hop, so that a
    // pipeline of them is answered in one pass. Whether the connection
    // stays open, or nullopt: nothing was done; take handle().
    std::optional<bool> quick(const proto::Header& header, std::span<const std::byte> body);
    // The reply to a GET; counts the compile-cache lookup.
    void answer_get(const proto::Header& header, std::string_view ns, std::string_view key,
                    std::optional<store::Entry>& entry);
    // The entry a PUT stores (value borrowed from `owner` when given, else copied).
    static store::Entry put_entry(const proto::PutRequest& request, const Owner& owner);
    // The reply to a PUT; returns whether the connection stays open.
    bool answer_put(const proto::Header& header, std::string_view ns, std::string_view key,
                    const tl::expected<store::PutOutcome, store::StoreError>& outcome);
    awaitable<bool> handle_get(const proto::Header& header, std::span<const std::byte> body);
    awaitable<bool> handle_put(const proto::Header& header, std::span<const std::byte> body,
                               const Owner& owner);
    awaitable<bool> handle_key_op(const proto::Header& header, std::span<const std::byte> body);
    awaitable<bool> handle_list(const proto::Header& header, std::span<const std::byte> body);
    awaitable<bool> handle_clear(const proto::Header& header, std::span<const std::byte> body);
    awaitable<bool> handle_bundle_begin(const proto::Header& header,
                                        std::span<const std::byte> body);
    awaitable<bool> handle_bundle_end(const proto::Header& header, std::span<const std::byte> body);
    awaitable<bool> handle_cxx_lookup(const proto::Header& header, std::span<const std::byte> body);
    bool handle_hello(const proto::Header& header, std::span<const std::byte> body);

    // Measures the request being handled as `op` on `ns` (which must stay
    // valid until the request is answered); `tier` is where a GET hit.
    void measure(std::string_view ns, LatencyOp op) {
        m_measured_ns = ns;
        m_measured_op = op;
    }

    // Answers with an error; returns whether the connection stays open.
    bool fail(const proto::Header& header, const proto::Error& error);
    void reply(const proto::Header& header, Status status, std::span<const std::byte> body = {});

    store::Store& store() { return *m_context.store; }
    BundleRegistry& bundles() { return m_context.bundles; }
    asio::thread_pool& pool() { return *m_context.blocking; }

    Connection& m_connection;
    Context& m_context;
    OutputBatch m_out;
    bool m_greeted = false;
    LatencyRecorder m_latency;
    // The request being handled, when measured (docs/operations.md, "Latency").
    std::string_view m_measured_ns;
    LatencyOp m_measured_op = LatencyOp::get;
    LatencyTier m_measured_tier = LatencyTier::none;
    RequestResult m_measured_result = RequestResult::ok;
};

awaitable<void> NativeSession::run() {
    auto& input = m_connection.input();
    std::size_t want = 0;
    for (;;) {
        while (input.size() > 0) {
            const auto view = input.readable();
            const auto limits = m_context.limits();
            auto result = proto::decode_request(view, limits);

            if (auto* error = std::get_if<proto::Error>(&result)) {
                proto::Header header;
                if (view.size() >= proto::k_header_size && view[0] == proto::k_magic0 &&
                    view[1] == proto::k_magic1) {
                    header.op = static_cast<Op>(view[2]);
                    std::memcpy(&header.id, view.data() + 4, sizeof header.id);
                }
                fail(header, *error);
                co_await m_connection.flush(m_out);
                co_return;
            }
            if (auto* need = std::get_if<proto::NeedMore>(&result)) {
                want = need->bytes;
                if (view.size() < proto::k_header_size) {
                    break;
                }
                // The header is valid (decode checked it); only its body is missing.
                const auto header =
                    *proto::decode_request_header(view.first<proto::k_header_size>(), limits);
                if (header.length <= k_inline_frame) {
                    break;
                }
                InflightLease body_lease(m_context.inflight);
                const auto first = view.subspan(proto::k_header_size);
                const std::size_t have = first.size();
                auto body = co_await receive_body(header, first, body_lease);
                input.consume(have + proto::k_header_size);
                if (!body) {
                    co_await m_connection.flush(m_out);
                    co_return;
                }
                const bool keep = co_await handle(header, *body, body);
                measured();
                if (!keep) {
                    co_await m_connection.flush(m_out);
                    co_return;
                }
                want = 0;
                continue;
            }
            const auto& frame = std::get<proto::Frame>(result);
            // Plain statements: GCC 12 miscompiles a co_await in a condition.
            bool keep = true;
            if (const auto served = quick(frame.header, frame.body)) {
                keep = *served;
            } else {
                keep = co_await handle(frame.header, frame.body, nullptr);
            }
            measured();
            input.consume(frame.consumed);
            want = 0;
            if (!keep) {
                co_await m_connection.flush(m_out);
                co_return;
            }
            if (m_connection.needs_room(m_out)) {
                const bool room = co_await m_connection.make_room(m_out);
                if (!room) {
                    co_return;
                }
            }
        }
        if (!co_await m_connection.next_batch(m_out, want)) {
            co_return;
        }
        m_latency.mark();
    }
}

awaitable<std::shared_ptr<std::vector<std::byte>>>
NativeSession::receive_body(const proto::Header& header, std::span<const std::byte> first,
                            InflightLease& lease) {
    const std::size_t length = header.length;
    auto body = std::make_shared<std::vector<std::byte>>(first.begin(), first.end());
    // Replies already due go out before a long receive, without waiting for
    // them: the client may be sending this body before it reads any reply.
    if (!m_connection.send(m_out)) {
        co_return nullptr;
    }
    std::size_t filled = first.size();
    while (filled < length) {
        // At most double what arrived, and at least a step: memory follows
        // the bytes received, and large values need few reallocations. When
        // the budget is tight, one step at a time (waiting for room).
        std::size_t target = std::min(length, std::max(filled * 2, filled + k_body_step));
        bool granted = co_await lease.grow_to(target, std::chrono::milliseconds(0));
        if (!granted) {
            target = std::min(length, filled + k_body_step);
            granted = co_await lease.grow_to(target, k_inflight_patience);
        }
        if (!granted) {
            m_context.stats.daemon().inflight_refused++;
            fail(header,
                 {Status::busy,
                  fmt::format("the daemon is receiving too many large requests: no room for "
                              "this {} byte frame in daemon.max_inflight_bytes ({} bytes) within "
                              "{} s; try again",
                              length, m_context.inflight.limit(),
                              k_inflight_patience.count() / 1000)});
            co_return nullptr;
        }
        body->resize(target);
        const bool complete = co_await m_connection.read_exact(std::span(*body).subspan(filled));
        if (!complete) {
            logger("session").debug("[{}] peer left in the middle of a {} byte frame",
                                    m_connection.id(), length);
            co_return nullptr;
        }
        filled = target;
    }
    co_return body;
}

bool NativeSession::fail(const proto::Header& header, const proto::Error& error) {
    const bool closes = proto::closes_connection(error.status);
    m_measured_result = RequestResult::error;
    if (closes) {
        m_context.stats.daemon().protocol_errors++;
        logger("session").warn("[{}] {} (status {}), closing", m_connection.id(), error.message,
                               proto::status_name(error.status));
    }
    proto::encode_error(m_out.bytes(), header.op, header.id, error);
    return !closes;
}

void NativeSession::reply(const proto::Header& header, Status status,
                          std::span<const std::byte> body) {
    if (status == Status::miss || status == Status::not_stored) {
        m_measured_result = RequestResult::miss;
    }
    proto::encode_response(m_out.bytes(), header.op, header.id, status, body);
}

void NativeSession::measured() {
    if (m_measured_ns.empty()) {
        m_latency.mark();
    } else {
        m_latency.finish(m_measured_ns, m_measured_op, m_measured_tier, m_measured_result);
    }
}

std::optional<bool> NativeSession::quick(const proto::Header& header,
                                         std::span<const std::byte> body) {
    if (!m_greeted || (header.op != Op::get && header.op != Op::put)) {
        return std::nullopt;
    }
    m_measured_ns = {};
    m_measured_tier = LatencyTier::none;
    m_measured_result = RequestResult::ok;
    if (header.op == Op::get) {
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
    const auto request = proto::parse_put(header, body, m_context.limits());
    if (!request || request->bundle_token || request->only_if_absent ||
        request->value.size() > k_quick_value_max) {
        return std::nullopt;
    }
    store::Entry entry = put_entry(*request, nullptr);
    const auto [ns, key] = request->target;
    auto outcome = store().put_quick(ns, key, entry, store::PutMode::overwrite);
    if (!outcome) {
        return std::nullopt;
    }
    m_context.stats.daemon().requests++;
    measure(ns, LatencyOp::put);
    return answer_put(header, ns, key, *outcome);
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

awaitable<bool> NativeSession::handle(const proto::Header& header, std::span<const std::byte> body,
                                      const Owner& owner) {
    m_measured_ns = {};
    m_measured_tier = LatencyTier::none;
    m_measured_result = RequestResult::ok;
    m_context.stats.daemon().requests++;
    if (!m_greeted && header.op != Op::hello) {
        co_return fail(header, {Status::handshake_required,
                                fmt::format("the first request must be HELLO, not {}",
                                            proto::op_name(header.op))});
    }
    switch (header.op) {
    case Op::hello:
        co_return handle_hello(header, body);
    case Op::ping:
        reply(header, Status::ok, body);
        co_return true;
    case Op::get:
        co_return co_await handle_get(header, body);
    case Op::put:
        co_return co_await handle_put(header, body, owner);
    case Op::exists:
    case Op::del:
        co_return co_await handle_key_op(header, body);
    case Op::stats: {
        if (!body.empty()) {
            co_return fail(header, {Status::malformed, "STATS takes an empty body"});
        }
        const auto text = (header.flags & proto::stats_flag::prometheus) != 0
                              ? prometheus_text(m_context)
                              : stats_report(m_context).dump();
        if ((header.flags & proto::stats_flag::zero) != 0) {
            zero_stats(m_context);
        }
        reply(header, Status::ok, proto::as_bytes(text));
        co_return true;
    }
    case Op::list:
        co_return co_await handle_list(header, body);
    case Op::clear:
        co_return co_await handle_clear(header, body);
    case Op::hash_files: {
        auto hashes = co_await serve_hash_files(m_context, body);
        if (!hashes) {
            co_return fail(header, hashes.error());
        }
        reply(header, Status::ok, *hashes);
        co_return true;
    }
    case Op::scan:
    case Op::dump:
    case Op::restore: {
        auto served = co_await serve_export_op(m_context, header, body, owner, m_out);
        if (!served) {
            co_return fail(header, served.error());
        }
        co_return true;
    }
    case Op::cxx_lookup:
        co_return co_await handle_cxx_lookup(header, body);
    case Op::bundle_begin:
        co_return co_await handle_bundle_begin(header, body);
    case Op::bundle_end:
        co_return co_await handle_bundle_end(header, body);
    }
    co_return fail(header,
                   {Status::unknown_op, fmt::format("{} is not supported by {}",
                                                    proto::op_name(header.op), k_server_name)});
}

bool NativeSession::handle_hello(const proto::Header& header, std::span<const std::byte> body) {
    auto hello = proto::parse_hello(body);
    if (!hello) {
        return fail(header, hello.error());
    }
    if (hello->version != proto::k_version) {
        return fail(header, {Status::version_mismatch,
                             fmt::format("client speaks protocol version {}, pt2cached speaks "
                                         "version {}",
                                         hello->version, proto::k_version)});
    }
    m_greeted = true;
    logger("session").debug("[{}] HELLO from {}", m_connection.id(), hello->client_name);
    proto::HelloResponse response;
    response.capabilities =
        hello->capabilities & (proto::capability::ttl | proto::capability::bundle |
                               proto::capability::hash_files | proto::capability::cxx_lookup);
    response.max_value = m_context.max_value.load();
    response.server_name = k_server_name;
    proto::encode_hello_response(m_out.bytes(), header.id, response);
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
    auto found = co_await fetch(m_context, ns, key, &m_measured_tier);
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
    const auto restore = co_await offload(pool(), [&] {
        return restore_bundle(store(), key, &pool(), m_context.config.blocking_threads - 1);
    });
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
    auto answer = co_await serve_cxx_lookup(m_context, body, &m_measured_tier);
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

} // namespace

awaitable<void> serve_native(Connection& connection) {
    NativeSession session(connection);
    co_await session.run();
}

} // namespace pt2cache::daemon
