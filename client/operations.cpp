// SPDX-License-Identifier: MIT
//
// The operations of client::Client, one short method each over round_trip().
// The connection and framing are in client.cpp.
#include <algorithm>
#include <array>
#include <cstring>
#include <limits>

#include "client/client.hpp"
#include "client/ops_common.hpp"
#include "proto/bytes.hpp"
#include "proto/cxx_lookup.hpp"
#include "proto/frame.hpp"
#include "proto/hash_files.hpp"
#include "proto/messages.hpp"

#include <fmt/format.h>

namespace pt2cache::client {

using detail::check_namespace;
using detail::invalid;
using detail::unexpected_status;

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::uint64_t k_max_stats_body = 64u << 20;
// get_many keeps at most this many request bytes unanswered, well under a
// socket buffer, so that neither side can block writing while the other does.
constexpr std::size_t k_pipeline_window = 64u << 10;

} // namespace

tl::expected<void, Error> Client::check_key(std::string_view ns, std::string_view key) const {
    if (auto ok = check_namespace(ns); !ok) {
        return ok;
    }
    if (key.empty() || key.size() > proto::k_max_key) {
        return invalid(Status::key_too_long, fmt::format("key of {} bytes: keys are 1 to {} bytes",
                                                         key.size(), proto::k_max_key));
    }
    return {};
}

tl::expected<void, Error> Client::check_bundles() {
    if (auto ok = ensure_connected(); !ok) {
        return ok;
    }
    if ((m_capabilities & proto::capability::bundle) == 0) {
        return invalid(Status::unknown_op, fmt::format("pt2cached at {} does not offer bundles",
                                                       m_options.socket_path));
    }
    return {};
}

tl::expected<std::optional<Bytes>, Error> Client::get(std::string_view ns, std::string_view key,
                                                      std::optional<std::uint64_t> bundle_token) {
    if (auto ok = check_key(ns, key); !ok) {
        return tl::unexpected(std::move(ok.error()));
    }
    if (bundle_token) {
        if (auto ok = check_bundles(); !ok) {
            return tl::unexpected(std::move(ok.error()));
        }
    }
    const auto id = begin_request();
    proto::encode_get(m_out, id, proto::GetRequest{{ns, key}, bundle_token});
    auto reply = round_trip(proto::Op::get, id, {}, k_up_to_max_value);
    if (!reply) {
        return tl::unexpected(std::move(reply.error()));
    }
    switch (reply->status) {
    case Status::ok:
        return std::optional<Bytes>(std::move(reply->body));
    case Status::miss:
        return std::optional<Bytes>();
    default:
        return tl::unexpected(fail(unexpected_status(proto::Op::get, reply->status)));
    }
}

tl::expected<std::vector<std::optional<Bytes>>, Error>
Client::get_many(std::string_view ns, std::span<const std::string> keys) {
    for (const auto& key : keys) {
        if (auto ok = check_key(ns, key); !ok) {
            return tl::unexpected(std::move(ok.error()));
        }
    }
    if (keys.empty()) {
        return std::vector<std::optional<Bytes>>();
    }
    if (auto ok = ensure_connected(); !ok) {
        return tl::unexpected(std::move(ok.error()));
    }
    // Encode every request up front; frame i ends at ends[i] in m_out.
    m_out.clear();
    const std::uint32_t first_id = m_next_id;
    m_next_id += static_cast<std::uint32_t>(keys.size());
    std::vector<std::size_t> ends;
    ends.reserve(keys.size());
    for (std::size_t i = 0; i < keys.size(); ++i) {
        proto::encode_get(m_out, first_id + static_cast<std::uint32_t>(i),
                          proto::GetRequest{{ns, keys[i]}, std::nullopt});
        ends.push_back(m_out.size());
    }
    // A sliding window: send requests while fewer than k_pipeline_window
    // bytes are unanswered, then read one reply; io_timeout bounds each step.
    std::vector<std::optional<Bytes>> values(keys.size());
    std::size_t sent = 0;     // frames sent
    std::size_t answered = 0; // replies read
    while (answered < keys.size()) {
        const auto deadline = Clock::now() + m_options.io_timeout;
        const std::size_t unanswered_from = answered == 0 ? 0 : ends[answered - 1];
        std::size_t upto = sent;
        while (upto < keys.size() &&
               (upto == answered || ends[upto] - unanswered_from <= k_pipeline_window)) {
            ++upto;
        }
        if (upto > sent) {
            const std::size_t from = sent == 0 ? 0 : ends[sent - 1];
            if (auto ok = send(std::span(m_out).subspan(from, ends[upto - 1] - from), {}, deadline);
                !ok) {
                return tl::unexpected(std::move(ok.error()));
            }
            sent = upto;
        }
        const auto id = first_id + static_cast<std::uint32_t>(answered);
        auto reply = read_reply(proto::Op::get, id, m_max_value, deadline);
        if (!reply) {
            // Replies still in flight would be taken for later requests' answers.
            if (sent > answered + 1) {
                drop();
            }
            return tl::unexpected(std::move(reply.error()));
        }
        if (reply->status == Status::ok) {
            values[answered] = std::move(reply->body);
        } else if (reply->status != Status::miss) {
            return tl::unexpected(fail(unexpected_status(proto::Op::get, reply->status)));
        }
        ++answered;
    }
    return values;
}

tl::expected<bool, Error> Client::put(std::string_view ns, std::string_view key,
                                      std::span<const std::byte> value, PutOptions options) {
    if (auto ok = check_key(ns, key); !ok) {
        return tl::unexpected(std::move(ok.error()));
    }
    if (auto ok = options.bundle_token ? check_bundles() : ensure_connected(); !ok) {
        return tl::unexpected(std::move(ok.error()));
    }
    // The frame's length field is a u32, whatever max_value says.
    const std::uint64_t max_value = std::min<std::uint64_t>(
        m_max_value, std::numeric_limits<std::uint32_t>::max() - proto::k_put_overhead);
    if (value.size() > max_value) {
        return invalid(Status::value_too_large,
                       fmt::format("value of {} bytes exceeds pt2cached's max_value {}",
                                   value.size(), max_value));
    }
    proto::PutRequest request;
    request.target = {ns, key};
    request.ttl_ms = static_cast<std::uint64_t>(std::max<std::int64_t>(options.ttl.count(), 0));
    request.only_if_absent = options.only_if_absent;
    request.bundle_token = options.bundle_token;
    request.value = value;
    const auto id = begin_request();
    proto::encode_put_head(m_out, id, request);
    auto reply = round_trip(proto::Op::put, id, value);
    if (!reply) {
        return tl::unexpected(std::move(reply.error()));
    }
    if (reply->status == Status::ok || reply->status == Status::not_stored) {
        return reply->status == Status::ok;
    }
    return tl::unexpected(fail(unexpected_status(proto::Op::put, reply->status)));
}

tl::expected<bool, Error> Client::key_op(proto::Op op, std::string_view ns, std::string_view key) {
    if (auto ok = check_key(ns, key); !ok) {
        return tl::unexpected(std::move(ok.error()));
    }
    const auto id = begin_request();
    proto::encode_key_op(m_out, op, id, {ns, key});
    auto reply = round_trip(op, id);
    if (!reply) {
        return tl::unexpected(std::move(reply.error()));
    }
    if (reply->status == Status::ok || reply->status == Status::miss) {
        return reply->status == Status::ok;
    }
    return tl::unexpected(fail(unexpected_status(op, reply->status)));
}

tl::expected<bool, Error> Client::exists(std::string_view ns, std::string_view key) {
    return key_op(proto::Op::exists, ns, key);
}

tl::expected<bool, Error> Client::remove(std::string_view ns, std::string_view key) {
    return key_op(proto::Op::del, ns, key);
}

tl::expected<std::string, Error> Client::stats_json() {
    return stats(0);
}

tl::expected<std::string, Error> Client::stats(std::uint8_t flags) {
    const auto id = begin_request();
    proto::encode_stats(m_out, id, flags);
    auto reply = round_trip(proto::Op::stats, id, {}, k_max_stats_body);
    if (!reply) {
        return tl::unexpected(std::move(reply.error()));
    }
    if (reply->status != Status::ok) {
        return tl::unexpected(fail(unexpected_status(proto::Op::stats, reply->status)));
    }
    return std::string(proto::as_text(reply->body));
}

tl::expected<ListPage, Error> Client::list(std::string_view ns, std::string_view cursor,
                                           std::uint32_t limit) {
    if (auto ok = check_namespace(ns); !ok) {
        return tl::unexpected(std::move(ok.error()));
    }
    if (cursor.size() > std::numeric_limits<std::uint16_t>::max()) {
        return invalid(Status::malformed, "LIST cursor longer than 65535 bytes");
    }
    const auto id = begin_request();
    proto::encode_list(m_out, id, proto::ListRequest{ns, cursor, limit});
    const std::uint64_t entries = std::clamp<std::uint32_t>(limit, 1, proto::k_max_list_limit);
    const std::uint64_t max_body = 2 + 65535 + 4 + entries * (2 + proto::k_max_key + 8 + 8);
    auto reply = round_trip(proto::Op::list, id, {}, max_body);
    if (!reply) {
        return tl::unexpected(std::move(reply.error()));
    }
    if (reply->status != Status::ok) {
        return tl::unexpected(fail(unexpected_status(proto::Op::list, reply->status)));
    }
    auto parsed = proto::parse_list_response(reply->body);
    if (!parsed) {
        return tl::unexpected(fail(Error{ErrorKind::protocol, Status::internal,
                                         "pt2cached sent a malformed LIST response"}));
    }
    ListPage page;
    page.next_cursor = std::string(parsed->next_cursor);
    page.entries.reserve(parsed->entries.size());
    for (const auto& entry : parsed->entries) {
        page.entries.push_back(ListEntry{std::string(entry.key), entry.size, entry.mtime_ms});
    }
    return page;
}

tl::expected<std::uint64_t, Error> Client::clear(std::string_view ns) {
    if (auto ok = check_namespace(ns); !ok) {
        return tl::unexpected(std::move(ok.error()));
    }
    const auto id = begin_request();
    proto::encode_clear(m_out, id, ns);
    auto reply = round_trip(proto::Op::clear, id, {}, 8);
    if (!reply) {
        return tl::unexpected(std::move(reply.error()));
    }
    if (reply->status != Status::ok) {
        return tl::unexpected(fail(unexpected_status(proto::Op::clear, reply->status)));
    }
    auto count = proto::parse_count_response(reply->body);
    if (!count) {
        return tl::unexpected(fail(Error{ErrorKind::protocol, Status::internal,
                                         "pt2cached sent a malformed CLEAR response"}));
    }
    return *count;
}

tl::expected<std::vector<FileHash>, Error> Client::hash_files(std::span<const std::string> paths) {
    if (paths.empty()) {
        return std::vector<FileHash>{};
    }
    std::size_t body = 2;
    for (const auto& path : paths) {
        if (path.empty() || path.size() > proto::k_max_hash_path || path.front() != '/') {
            return invalid(Status::malformed,
                           fmt::format("HASH_FILES path \"{}\" is not absolute or longer than {} "
                                       "bytes",
                                       path, proto::k_max_hash_path));
        }
        body += 2 + path.size();
    }
    if (paths.size() > proto::k_max_hash_files || body > proto::k_max_hash_files_body) {
        return invalid(Status::malformed,
                       fmt::format("HASH_FILES of {} paths ({} bytes) exceeds the limits",
                                   paths.size(), body));
    }
    if (auto ok = ensure_connected(); !ok) {
        return tl::unexpected(std::move(ok.error()));
    }
    if ((m_capabilities & proto::capability::hash_files) == 0) {
        return invalid(Status::unknown_op, fmt::format("pt2cached at {} does not offer HASH_FILES",
                                                       m_options.socket_path));
    }
    const auto id = begin_request();
    proto::encode_hash_files(m_out, id, paths);
    auto reply =
        round_trip(proto::Op::hash_files, id, {}, 2 + paths.size() * proto::k_file_hash_size);
    if (!reply) {
        return tl::unexpected(std::move(reply.error()));
    }
    if (reply->status != Status::ok) {
        return tl::unexpected(fail(unexpected_status(proto::Op::hash_files, reply->status)));
    }
    auto parsed = proto::parse_hash_files_response(reply->body, paths.size());
    if (!parsed) {
        return tl::unexpected(fail(
            Error{ErrorKind::protocol, Status::internal,
                  "pt2cached sent a malformed HASH_FILES response: " + parsed.error().message}));
    }
    std::vector<FileHash> out(parsed->size());
    for (std::size_t i = 0; i < out.size(); ++i) {
        out[i].status = static_cast<FileStatus>((*parsed)[i].status);
        out[i].size = (*parsed)[i].size;
        out[i].hash = (*parsed)[i].hash;
    }
    return out;
}

tl::expected<CxxLookup, Error> Client::cxx_lookup(std::string_view common_key,
                                                  std::span<const CxxRule> rules) {
    proto::cxx::LookupRequest request;
    request.common_key = std::string(common_key);
    for (const auto& rule : rules) {
        request.rules.push_back({rule.placeholder, rule.directory});
    }
    if (auto error = proto::cxx::lookup_request_error(request)) {
        return invalid(Status::malformed, *error);
    }
    if (auto ok = ensure_connected(); !ok) {
        return tl::unexpected(std::move(ok.error()));
    }
    if ((m_capabilities & proto::capability::cxx_lookup) == 0) {
        return invalid(Status::unknown_op, fmt::format("pt2cached at {} does not offer CXX_LOOKUP",
                                                       m_options.socket_path));
    }
    const auto id = begin_request();
    proto::cxx::encode_lookup(m_out, id, request);
    // The manifest and the result are values, each at most max_value bytes.
    auto reply = round_trip(proto::Op::cxx_lookup, id, {}, 1 + 4 + 2 * m_max_value);
    if (!reply) {
        return tl::unexpected(std::move(reply.error()));
    }
    if (reply->status != Status::ok) {
        return tl::unexpected(fail(unexpected_status(proto::Op::cxx_lookup, reply->status)));
    }
    auto parsed = proto::cxx::parse_lookup_response(reply->body);
    if (!parsed) {
        return tl::unexpected(fail(
            Error{ErrorKind::protocol, Status::internal,
                  "pt2cached sent a malformed CXX_LOOKUP response: " + parsed.error().message}));
    }
    CxxLookup out;
    out.outcome = static_cast<CxxOutcome>(parsed->outcome);
    const auto* base = reply->body.data();
    out.manifest_offset = static_cast<std::size_t>(parsed->manifest.data() - base);
    out.manifest_size = parsed->manifest.size();
    out.result_offset = reply->body.size() - parsed->result.size();
    out.body = std::move(reply->body);
    return out;
}

tl::expected<BundleBegin, Error> Client::bundle_begin(std::string_view code_hash,
                                                      std::string_view backend_hash) {
    if (code_hash.empty()) {
        return invalid(Status::malformed, "BUNDLE_BEGIN needs a code hash");
    }
    if (2 + code_hash.size() + 2 + backend_hash.size() > proto::k_max_small_body) {
        return invalid(Status::malformed,
                       fmt::format("BUNDLE_BEGIN hashes of {} and {} bytes exceed the {}-byte "
                                   "request limit",
                                   code_hash.size(), backend_hash.size(), proto::k_max_small_body));
    }
    if (auto ok = check_bundles(); !ok) {
        return tl::unexpected(std::move(ok.error()));
    }
    const auto id = begin_request();
    proto::encode_bundle_begin(m_out, id, proto::BundleBeginRequest{code_hash, backend_hash});
    auto reply = round_trip(proto::Op::bundle_begin, id, {}, 8 + 1 + 4 + 8);
    if (!reply) {
        return tl::unexpected(std::move(reply.error()));
    }
    if (reply->status != Status::ok) {
        return tl::unexpected(fail(unexpected_status(proto::Op::bundle_begin, reply->status)));
    }
    auto parsed = proto::parse_bundle_begin_response(reply->body);
    if (!parsed) {
        return tl::unexpected(fail(Error{ErrorKind::protocol, Status::internal,
                                         "pt2cached sent a malformed BUNDLE_BEGIN response"}));
    }
    return BundleBegin{parsed->token, parsed->hit, parsed->entries, parsed->time_saved_ms};
}

tl::expected<std::uint32_t, Error> Client::bundle_end(std::uint64_t token) {
    if (auto ok = check_bundles(); !ok) {
        return tl::unexpected(std::move(ok.error()));
    }
    const auto id = begin_request();
    proto::encode_bundle_end(m_out, id, token);
    auto reply = round_trip(proto::Op::bundle_end, id, {}, 4);
    if (!reply) {
        return tl::unexpected(std::move(reply.error()));
    }
    if (reply->status != Status::ok) {
        return tl::unexpected(fail(unexpected_status(proto::Op::bundle_end, reply->status)));
    }
    auto entries = proto::parse_bundle_end_response(reply->body);
    if (!entries) {
        return tl::unexpected(fail(Error{ErrorKind::protocol, Status::internal,
                                         "pt2cached sent a malformed BUNDLE_END response"}));
    }
    return *entries;
}

tl::expected<std::chrono::microseconds, Error> Client::ping() {
    if (auto ok = ensure_connected(); !ok) {
        return tl::unexpected(std::move(ok.error()));
    }
    const auto id = begin_request();
    std::array<std::byte, sizeof id> payload;
    std::memcpy(payload.data(), &id, sizeof id);
    proto::encode_ping(m_out, id, payload);
    const auto start = Clock::now();
    auto reply = round_trip(proto::Op::ping, id, {}, payload.size());
    if (!reply) {
        return tl::unexpected(std::move(reply.error()));
    }
    const auto elapsed = Clock::now() - start;
    if (reply->status != Status::ok || !std::ranges::equal(reply->body, payload)) {
        return tl::unexpected(
            fail(Error{ErrorKind::protocol, Status::internal, "pt2cached did not echo the PING"}));
    }
    return std::chrono::duration_cast<std::chrono::microseconds>(elapsed);
}

} // namespace pt2cache::client
