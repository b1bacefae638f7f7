#include "daemon/native_session.hpp"

#include <cstring>

#include "daemon/export_ops.hpp"
#include "daemon/file_hashes.hpp"
#include "daemon/log.hpp"
#include "daemon/metrics_text.hpp"
#include "daemon/native_session_impl.hpp"
#include "daemon/stats_report.hpp"
#include "daemon/store/log.hpp"
#include "proto/bytes.hpp"

namespace pt2cache::daemon {

namespace native {

namespace {

// Frames up to this size are parsed in the input buffer; larger ones (big
// PUTs) are read straight into a buffer of their own that the store keeps.
constexpr std::size_t k_inline_frame = 64 * 1024;
// A large frame's buffer grows by at least this much per step.
constexpr std::size_t k_body_step = 1 << 20;

} // namespace

awaitable<void> NativeSession::run() {
    auto& input = m_connection.input();
    std::size_t want = 0;
    // Requests read since the last batch of replies went out.
    std::size_t requests = 0;
    for (;;) {
        while (input.size() > 0) {
            const auto view = input.readable();
            const auto limits = m_context.limits();
            auto result = proto::decode_request(view, limits);
            if (const auto* frame = std::get_if<proto::Frame>(&result)) {
                if (defer_put(frame->header, frame->body)) {
                    // Answered by flush_puts(); measured there.
                    input.consume(frame->consumed);
                    ++requests;
                    want = 0;
                    if (deferred_full()) {
                        const bool go_on = co_await settle_puts();
                        if (!go_on) {
                            co_return;
                        }
                    }
                    continue;
                }
            }
            // Replies due before anything else go out first, in order (no
            // coroutine call when none are due: this runs for every frame).
            if (!m_deferred.empty()) {
                const bool go_on = co_await settle_puts();
                if (!go_on) {
                    co_return;
                }
            }

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
                ++requests;
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
            ++requests;
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
        if (!m_deferred.empty()) {
            const bool go_on = co_await settle_puts();
            if (!go_on) {
                co_return;
            }
        }
        const bool more = co_await m_connection.next_batch(m_out, want, requests);
        if (!more) {
            co_return;
        }
        requests = 0;
        m_latency.mark();
    }
}

awaitable<bool> NativeSession::settle_puts() {
    const bool keep = co_await flush_puts();
    if (!keep) {
        co_await m_connection.flush(m_out);
    }
    co_return keep;
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
    if (length > m_context.inflight.limit()) {
        // It could never fit: refused before others give way to it.
        m_context.stats.daemon().inflight_refused++;
        fail(header, {Status::busy,
                      fmt::format("this {} byte frame is longer than daemon.max_inflight_bytes "
                                  "({} bytes)",
                                  length, m_context.inflight.limit())});
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
                              "this {} byte frame in daemon.max_inflight_bytes ({} bytes) {}; "
                              "try again",
                              length, m_context.inflight.limit(), refusal_reason(lease))});
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
        // A client sending nothing but bad frames would fill the log: a line
        // a second, with how many were left out (the counter has them all).
        static store::LogThrottle throttle(1'000);
        if (const auto left_out = throttle.take()) {
            logger("session").warn("[{}] {} (status {}), closing{}", m_connection.id(),
                                   error.message, proto::status_name(error.status),
                                   store::left_out_note(*left_out));
        }
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
        auto hashes = co_await serve_hash_files(m_context, body, m_connection.peer_shares_files());
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
    response.max_value = m_context.limits().max_value;
    response.server_name = k_server_name;
    proto::encode_hello_response(m_out.bytes(), header.id, response);
    return true;
}

} // namespace native

awaitable<void> serve_native(Connection& connection) {
    native::NativeSession session(connection);
    co_await session.run();
}

} // namespace pt2cache::daemon
