// Bodies of the native protocol's requests and responses (docs/protocol.md,
// "Operations"). Parsers validate namespaces, keys and lengths and return a
// protocol Error naming what is wrong; encoders append whole frames.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "proto/frame.hpp"

#include <tl/expected.hpp>

namespace pt2cache::proto {

// True when `ns` matches [a-z0-9-]{1,32}.
bool valid_namespace(std::string_view ns);

struct KeyRef {
    std::string_view ns;
    std::string_view key;
};

struct HelloRequest {
    std::uint16_t version = k_version;
    std::uint32_t capabilities = 0;
    std::string_view client_name;
};

struct HelloResponse {
    std::uint16_t version = k_version;
    std::uint32_t capabilities = 0;
    std::uint64_t max_value = k_default_max_value;
    std::uint16_t max_key = k_max_key;
    std::string_view server_name;
};

struct GetRequest {
    KeyRef target;
    std::optional<std::uint64_t> bundle_token;
};

struct PutRequest {
    KeyRef target;
    std::uint64_t ttl_ms = 0;
    bool only_if_absent = false;
    std::optional<std::uint64_t> bundle_token;
    std::span<const std::byte> value;
};

struct ListRequest {
    std::string_view ns;
    std::string_view cursor;
    std::uint32_t limit = 1000;
};

struct ListEntry {
    std::string_view key;
    std::uint64_t size = 0;
    std::uint64_t mtime_ms = 0;
};

struct ListResponse {
    std::string_view next_cursor;
    std::vector<ListEntry> entries;
};

struct BundleBeginRequest {
    std::string_view code_hash;
    std::string_view backend_hash;
};

struct BundleBeginResponse {
    std::uint64_t token = 0;
    bool hit = false;
    std::uint32_t entries = 0;
    std::uint64_t time_saved_ms = 0;
};

// ---- request parsing (daemon side) ----
tl::expected<HelloRequest, Error> parse_hello(std::span<const std::byte> body);
tl::expected<GetRequest, Error> parse_get(const Header& header, std::span<const std::byte> body);
tl::expected<PutRequest, Error> parse_put(const Header& header, std::span<const std::byte> body,
                                          const Limits& limits);
// EXISTS and DEL share GET's body without flags.
tl::expected<KeyRef, Error> parse_key(std::span<const std::byte> body);
tl::expected<ListRequest, Error> parse_list(std::span<const std::byte> body);
tl::expected<std::string_view, Error> parse_clear(std::span<const std::byte> body);
tl::expected<BundleBeginRequest, Error> parse_bundle_begin(std::span<const std::byte> body);
// BUNDLE_END's body: the token.
tl::expected<std::uint64_t, Error> parse_bundle_end(std::span<const std::byte> body);

// ---- request encoding (client side); each appends one whole frame ----
void encode_hello(std::vector<std::byte>& out, std::uint32_t id, const HelloRequest& request);
void encode_ping(std::vector<std::byte>& out, std::uint32_t id, std::span<const std::byte> payload);
void encode_key_op(std::vector<std::byte>& out, Op op, std::uint32_t id, KeyRef target);
void encode_get(std::vector<std::byte>& out, std::uint32_t id, const GetRequest& request);
// Appends the header and the fields before the value; the caller sends the
// value bytes right after (gathered writes avoid copying large values).
void encode_put_head(std::vector<std::byte>& out, std::uint32_t id, const PutRequest& request);
namespace stats_flag {
inline constexpr std::uint8_t zero = 1u << 0;       // reset counters after the snapshot
inline constexpr std::uint8_t prometheus = 1u << 1; // Prometheus text instead of JSON
} // namespace stats_flag

void encode_stats(std::vector<std::byte>& out, std::uint32_t id, std::uint8_t flags = 0);
void encode_list(std::vector<std::byte>& out, std::uint32_t id, const ListRequest& request);
void encode_clear(std::vector<std::byte>& out, std::uint32_t id, std::string_view ns);
void encode_bundle_begin(std::vector<std::byte>& out, std::uint32_t id,
                         const BundleBeginRequest& request);
void encode_bundle_end(std::vector<std::byte>& out, std::uint32_t id, std::uint64_t token);

// ---- responses ----
// Appends a response header whose body is `body_length` bytes long; the caller
// appends (or sends) the body.
void encode_response_header(std::vector<std::byte>& out, Op op, std::uint32_t id, Status status,
                            std::size_t body_length);
void encode_response(std::vector<std::byte>& out, Op op, std::uint32_t id, Status status,
                     std::span<const std::byte> body = {});
void encode_error(std::vector<std::byte>& out, Op op, std::uint32_t id, const Error& error);
void encode_hello_response(std::vector<std::byte>& out, std::uint32_t id,
                           const HelloResponse& response);
void encode_list_response(std::vector<std::byte>& out, std::uint32_t id,
                          const ListResponse& response);
void encode_count_response(std::vector<std::byte>& out, Op op, std::uint32_t id,
                           std::uint64_t count);

void encode_bundle_begin_response(std::vector<std::byte>& out, std::uint32_t id,
                                  const BundleBeginResponse& response);
void encode_bundle_end_response(std::vector<std::byte>& out, std::uint32_t id,
                                std::uint32_t entries);

tl::expected<HelloResponse, Error> parse_hello_response(std::span<const std::byte> body);
tl::expected<BundleBeginResponse, Error>
parse_bundle_begin_response(std::span<const std::byte> body);
tl::expected<std::uint32_t, Error> parse_bundle_end_response(std::span<const std::byte> body);
tl::expected<ListResponse, Error> parse_list_response(std::span<const std::byte> body);
tl::expected<std::uint64_t, Error> parse_count_response(std::span<const std::byte> body);
// The message of an error response body (status >= 0x10).
std::string parse_error_message(std::span<const std::byte> body);

} // namespace pt2cache::proto
