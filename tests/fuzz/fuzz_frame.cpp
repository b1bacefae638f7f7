// SPDX-License-Identifier: MIT
// Fuzz target: the native protocol's frame decoder and message parsers
// (proto/frame.*, proto/messages.*), read as the daemon reads a connection.
// Invariants: decode_request never claims more bytes than it has; a frame's
// header re-encodes to its own bytes; a body that parses re-encodes to the
// same bytes; a whole frame cut short is always "need more"; errors carry an
// error status and a message.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <variant>
#include <vector>

#include "proto/cxx_lookup.hpp"
#include "proto/export_messages.hpp"
#include "proto/frame.hpp"
#include "proto/hash_files.hpp"
#include "proto/messages.hpp"
#include "tests/fuzz/fuzz_check.hpp"

namespace {

using namespace pt2cache::proto;
using Bytes = std::span<const std::byte>;

bool same(Bytes a, Bytes b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
}

// The body of the one frame encoded into `out`.
Bytes body_of(const std::vector<std::byte>& out) {
    FUZZ_CHECK(out.size() >= k_header_size);
    return Bytes(out).subspan(k_header_size);
}

void check_error(const Error& error) {
    FUZZ_CHECK(is_error(error.status));
    FUZZ_CHECK(!error.message.empty());
}

// Parses a request body as the daemon does, and re-encodes what parsed.
void check_request_body(const Header& header, Bytes body, const Limits& limits) {
    std::vector<std::byte> out;
    switch (header.op) {
    case Op::hello:
        if (auto request = parse_hello(body)) {
            encode_hello(out, header.id, *request);
            FUZZ_CHECK(same(body_of(out), body));
        } else {
            check_error(request.error());
        }
        break;
    case Op::ping:
        encode_ping(out, header.id, body);
        FUZZ_CHECK(same(body_of(out), body));
        break;
    case Op::get:
        if (auto request = parse_get(header, body)) {
            FUZZ_CHECK(valid_namespace(request->target.ns));
            FUZZ_CHECK(!request->target.key.empty() && request->target.key.size() <= k_max_key);
            encode_get(out, header.id, *request);
            FUZZ_CHECK(same(body_of(out), body));
        } else {
            check_error(request.error());
        }
        break;
    case Op::put:
        if (auto request = parse_put(header, body, limits)) {
            FUZZ_CHECK(valid_namespace(request->target.ns));
            FUZZ_CHECK(request->value.size() <= limits.max_value);
            encode_put_head(out, header.id, *request);
            out.insert(out.end(), request->value.begin(), request->value.end());
            FUZZ_CHECK(same(body_of(out), body));
            const auto kept = put_flag::only_if_absent | put_flag::bundle;
            FUZZ_CHECK(std::to_integer<std::uint8_t>(out[3]) == (header.flags & kept));
            auto again = decode_request(out, limits);
            FUZZ_CHECK(std::holds_alternative<Frame>(again));
            FUZZ_CHECK(std::get<Frame>(again).consumed == out.size());
        } else {
            check_error(request.error());
        }
        break;
    case Op::exists:
    case Op::del:
    case Op::dump:
        if (auto target = parse_key(body)) {
            encode_key_op(out, header.op, header.id, *target);
            FUZZ_CHECK(same(body_of(out), body));
        } else {
            check_error(target.error());
        }
        break;
    case Op::list:
        if (auto request = parse_list(body)) {
            FUZZ_CHECK(request->limit >= 1 && request->limit <= k_max_list_limit);
            encode_list(out, header.id, *request);
            auto again = parse_list(body_of(out));
            FUZZ_CHECK(again && again->ns == request->ns && again->cursor == request->cursor &&
                       again->limit == request->limit);
            // The body is re-encoded as is unless its limit was clamped.
            FUZZ_CHECK(same(body_of(out).first(body.size() - 4), body.first(body.size() - 4)));
        } else {
            check_error(request.error());
        }
        break;
    case Op::scan:
        if (auto request = parse_scan(body)) {
            FUZZ_CHECK(request->limit >= 1 && request->limit <= k_max_list_limit);
            FUZZ_CHECK(request->namespaces.size() <= k_max_scan_namespaces);
            encode_scan(out, header.id, *request);
            auto again = parse_scan(body_of(out));
            FUZZ_CHECK(again && again->cursor == request->cursor &&
                       again->limit == request->limit && again->since_ms == request->since_ms &&
                       again->namespaces == request->namespaces);
            // Re-encoded as is unless its limit was clamped.
            FUZZ_CHECK(out.size() - k_header_size == body.size());
        } else {
            check_error(request.error());
        }
        break;
    case Op::restore:
        if (auto request = parse_restore(header, body, limits)) {
            FUZZ_CHECK(request->value.size() <= limits.max_value);
            encode_restore_head(out, header.id, *request);
            out.insert(out.end(), request->value.begin(), request->value.end());
            FUZZ_CHECK(same(body_of(out), body));
        } else {
            check_error(request.error());
        }
        break;
    case Op::clear:
        if (auto ns = parse_clear(body)) {
            encode_clear(out, header.id, *ns);
            FUZZ_CHECK(same(body_of(out), body));
        } else {
            check_error(ns.error());
        }
        break;
    case Op::bundle_begin:
        if (auto request = parse_bundle_begin(body)) {
            encode_bundle_begin(out, header.id, *request);
            FUZZ_CHECK(same(body_of(out), body));
        } else {
            check_error(request.error());
        }
        break;
    case Op::bundle_end:
        if (auto token = parse_bundle_end(body)) {
            encode_bundle_end(out, header.id, *token);
            FUZZ_CHECK(same(body_of(out), body));
        } else {
            check_error(token.error());
        }
        break;
    case Op::hash_files:
        if (auto paths = parse_hash_files(body)) {
            FUZZ_CHECK(!paths->empty() && paths->size() <= k_max_hash_files);
            const std::vector<std::string> copies(paths->begin(), paths->end());
            for (const auto& path : copies) {
                FUZZ_CHECK(!path.empty() && path.size() <= k_max_hash_path);
            }
            encode_hash_files(out, header.id, copies);
            FUZZ_CHECK(same(body_of(out), body));
        } else {
            check_error(paths.error());
        }
        break;
    case Op::cxx_lookup:
        if (auto request = cxx::parse_lookup(body)) {
            FUZZ_CHECK(!cxx::lookup_request_error(*request));
            cxx::encode_lookup(out, header.id, *request);
            FUZZ_CHECK(same(body_of(out), body));
        } else {
            check_error(request.error());
        }
        break;
    case Op::stats:
        encode_stats(out, header.id);
        FUZZ_CHECK(same(body_of(out), body) == body.empty());
        break;
    }
}

// The client's response parsers over the same body.
void check_response_body(const Header& header, Bytes body) {
    std::vector<std::byte> out;
    if (auto hello = parse_hello_response(body)) {
        encode_hello_response(out, header.id, *hello);
        FUZZ_CHECK(same(body_of(out), body));
        out.clear();
    }
    if (auto list = parse_list_response(body)) {
        encode_list_response(out, header.id, *list);
        FUZZ_CHECK(same(body_of(out), body));
        out.clear();
    }
    if (auto begin = parse_bundle_begin_response(body)) {
        encode_bundle_begin_response(out, header.id, *begin);
        // `hit` is any non-zero byte on the wire and 1 when re-encoded.
        auto again = parse_bundle_begin_response(body_of(out));
        FUZZ_CHECK(again && again->token == begin->token && again->hit == begin->hit &&
                   again->entries == begin->entries &&
                   again->time_saved_ms == begin->time_saved_ms);
        out.clear();
    }
    if (auto entries = parse_bundle_end_response(body)) {
        encode_bundle_end_response(out, header.id, *entries);
        FUZZ_CHECK(same(body_of(out), body));
        out.clear();
    }
    if (auto scan = parse_scan_response(body)) {
        encode_scan_response(out, header.id, *scan);
        FUZZ_CHECK(same(body_of(out), body));
        out.clear();
    }
    if (auto dump = parse_dump_response(body)) {
        encode_dump_response_head(out, header.id, dump->created_ms, dump->expires_ms,
                                  dump->value.size());
        out.insert(out.end(), dump->value.begin(), dump->value.end());
        FUZZ_CHECK(same(body_of(out), body));
        out.clear();
    }
    if (auto lookup = cxx::parse_lookup_response(body)) {
        FUZZ_CHECK(lookup->outcome == cxx::LookupOutcome::hit || lookup->result.empty());
        cxx::encode_lookup_response_head(out, header.id, lookup->outcome, lookup->manifest,
                                         lookup->result.size());
        out.insert(out.end(), lookup->result.begin(), lookup->result.end());
        FUZZ_CHECK(same(body_of(out), body));
        out.clear();
    }
    if (auto count = parse_count_response(body)) {
        encode_count_response(out, header.op, header.id, *count);
        FUZZ_CHECK(same(body_of(out), body));
        out.clear();
    }
    // An error body is exactly <message:str16>.
    const auto message = parse_error_message(body);
    if (body.size() >= 2) {
        const std::size_t length =
            std::to_integer<std::size_t>(body[0]) | std::to_integer<std::size_t>(body[1]) << 8;
        if (body.size() == 2 + length) {
            encode_error(out, header.op, header.id, Error{Status::malformed, message});
            FUZZ_CHECK(same(body_of(out), body));
        }
    }
}

void check_frame(Bytes input, const Frame& frame, const Limits& limits) {
    FUZZ_CHECK(frame.consumed == k_header_size + frame.header.length);
    FUZZ_CHECK(frame.consumed <= input.size());
    FUZZ_CHECK(frame.body.data() == input.data() + k_header_size);
    FUZZ_CHECK(frame.body.size() == frame.header.length);
    FUZZ_CHECK(frame.header.length <= max_request_body(frame.header.op, limits));

    std::vector<std::byte> header;
    encode_header(frame.header, header);
    FUZZ_CHECK(same(header, input.first(k_header_size)));

    // Any cut of a whole frame is incomplete, and says so honestly.
    for (const std::size_t cut : {std::size_t(1), k_header_size - 1, k_header_size,
                                  frame.consumed / 2, frame.consumed - 1}) {
        if (cut == 0 || cut >= frame.consumed) {
            continue;
        }
        const auto partial = decode_request(input.first(cut), limits);
        FUZZ_CHECK(std::holds_alternative<NeedMore>(partial));
        const auto need = std::get<NeedMore>(partial).bytes;
        FUZZ_CHECK(need >= 1 && cut + need <= frame.consumed);
    }

    check_request_body(frame.header, frame.body, limits);
    check_response_body(frame.header, frame.body);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const Bytes input(reinterpret_cast<const std::byte*>(data), size);
    // The default limits, and a small max_value that real PUTs exceed.
    for (const std::uint64_t max_value : {k_default_max_value, std::uint64_t(64)}) {
        const Limits limits{max_value};
        std::size_t pos = 0;
        // Frames back to back, as a pipelining client sends them.
        for (int frames = 0; frames < 64 && pos < size; ++frames) {
            const Bytes rest = input.subspan(pos);
            const auto result = decode_request(rest, limits);
            if (const auto* more = std::get_if<NeedMore>(&result)) {
                FUZZ_CHECK(more->bytes >= 1);
                break;
            }
            if (const auto* error = std::get_if<Error>(&result)) {
                check_error(*error);
                break;
            }
            const auto& frame = std::get<Frame>(result);
            check_frame(rest, frame, limits);
            pos += frame.consumed;
        }
    }
    return 0;
}
