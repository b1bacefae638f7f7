#include <string>

#include "proto/bytes.hpp"
#include "proto/messages.hpp"

#include <catch2/catch.hpp>

using namespace pt2cache::proto;

namespace {

// Encodes with the client encoder, then decodes with the daemon's parser.
Frame round_trip(const std::vector<std::byte>& wire) {
    auto result = decode_request(wire, Limits{});
    REQUIRE(std::holds_alternative<Frame>(result));
    return std::get<Frame>(result);
}

std::vector<std::byte> key_body(std::string_view ns, std::string_view key) {
    std::vector<std::byte> body;
    body.push_back(std::byte(ns.size()));
    for (char c : ns) {
        body.push_back(std::byte(c));
    }
    body.push_back(std::byte(key.size() & 0xff));
    body.push_back(std::byte(key.size() >> 8));
    for (char c : key) {
        body.push_back(std::byte(c));
    }
    return body;
}

} // namespace

TEST_CASE("namespace grammar", "[proto][messages]") {
    for (auto ns : {"fx-graph", "aot-autograd", "autotune", "autotune-bundle", "pgo", "redis", "a",
                    "0123456789abcdef0123456789abcdef"}) {
        CHECK(valid_namespace(ns));
    }
    for (auto ns : {"", "FX", "fx_graph", "a b", "../x", "0123456789abcdef0123456789abcdefg"}) {
        CHECK_FALSE(valid_namespace(ns));
    }
}

TEST_CASE("HELLO round trip", "[proto][messages]") {
    std::vector<std::byte> wire;
    encode_hello(wire, 1, HelloRequest{k_version, capability::ttl, "test-client"});
    auto frame = round_trip(wire);
    auto hello = parse_hello(frame.body);
    REQUIRE(hello);
    CHECK(hello->version == k_version);
    CHECK(hello->capabilities == capability::ttl);
    CHECK(hello->client_name == "test-client");

    std::vector<std::byte> reply;
    encode_hello_response(reply, 1, HelloResponse{1, 3, 99, 1024, "pt2cached 0.1"});
    auto header = decode_response_header(std::span(reply).first<k_header_size>());
    REQUIRE(header);
    CHECK(header->status() == Status::ok);
    auto parsed = parse_hello_response(std::span(reply).subspan(k_header_size));
    REQUIRE(parsed);
    CHECK(parsed->max_value == 99);
    CHECK(parsed->server_name == "pt2cached 0.1");
}

TEST_CASE("PUT round trip keeps every field", "[proto][messages]") {
    const std::string value(3000, 'v');
    PutRequest put;
    put.target = {"autotune", "kernel-1"};
    put.ttl_ms = 60'000;
    put.only_if_absent = true;
    put.bundle_token = 0xABCDEF;
    put.value = pt2cache::proto::as_bytes(std::string_view(value));

    std::vector<std::byte> wire;
    encode_put_head(wire, 9, put);
    wire.insert(wire.end(), put.value.begin(), put.value.end());
    auto frame = round_trip(wire);
    auto parsed = parse_put(frame.header, frame.body, Limits{});
    REQUIRE(parsed);
    CHECK(parsed->target.ns == "autotune");
    CHECK(parsed->target.key == "kernel-1");
    CHECK(parsed->ttl_ms == 60'000);
    CHECK(parsed->only_if_absent);
    CHECK(parsed->bundle_token == 0xABCDEFu);
    CHECK(as_text(parsed->value) == value);

    SECTION("a value over the configured maximum is refused") {
        auto small = parse_put(frame.header, frame.body, Limits{.max_value = 100});
        REQUIRE_FALSE(small);
        CHECK(small.error().status == Status::value_too_large);
    }
}

TEST_CASE("key and namespace violations", "[proto][messages]") {
    SECTION("key too long") {
        auto parsed = parse_key(key_body("pgo", std::string(1025, 'k')));
        REQUIRE_FALSE(parsed);
        CHECK(parsed.error().status == Status::key_too_long);
    }
    SECTION("key at the limit") {
        CHECK(parse_key(key_body("pgo", std::string(1024, 'k'))));
    }
    SECTION("empty key") {
        auto parsed = parse_key(key_body("pgo", ""));
        REQUIRE_FALSE(parsed);
        CHECK(parsed.error().status == Status::key_too_long);
    }
    SECTION("bad namespace") {
        auto parsed = parse_key(key_body("Bad NS", "k"));
        REQUIRE_FALSE(parsed);
        CHECK(parsed.error().status == Status::bad_namespace);
        CHECK_THAT(parsed.error().message, Catch::Contains("[a-z0-9-]"));
    }
    SECTION("truncated body") {
        auto body = key_body("pgo", "key");
        body.pop_back();
        auto parsed = parse_key(body);
        REQUIRE_FALSE(parsed);
        CHECK(parsed.error().status == Status::malformed);
    }
    SECTION("trailing garbage") {
        auto body = key_body("pgo", "key");
        body.push_back(std::byte{0});
        CHECK_FALSE(parse_key(body));
    }
}

TEST_CASE("LIST request and response", "[proto][messages]") {
    std::vector<std::byte> wire;
    encode_list(wire, 3, ListRequest{"fx-graph", "cursor", 50'000});
    auto frame = round_trip(wire);
    auto parsed = parse_list(frame.body);
    REQUIRE(parsed);
    CHECK(parsed->cursor == "cursor");
    CHECK(parsed->limit == k_max_list_limit);

    ListResponse response{"next", {{"a", 1, 2}, {"bb", 3, 4}}};
    std::vector<std::byte> reply;
    encode_list_response(reply, 3, response);
    auto back = parse_list_response(std::span(reply).subspan(k_header_size));
    REQUIRE(back);
    CHECK(back->next_cursor == "next");
    REQUIRE(back->entries.size() == 2);
    CHECK(back->entries[1].key == "bb");
    CHECK(back->entries[1].mtime_ms == 4);

    SECTION("a count larger than the body is malformed, not a huge reservation") {
        std::vector<std::byte> hostile{std::byte{0},    std::byte{0},    std::byte{0xFF},
                                       std::byte{0xFF}, std::byte{0xFF}, std::byte{0xFF}};
        CHECK_FALSE(parse_list_response(hostile));
    }
}

TEST_CASE("error and count responses", "[proto][messages]") {
    std::vector<std::byte> reply;
    encode_error(reply, Op::put, 5, Error{Status::value_too_large, "too big"});
    auto header = decode_response_header(std::span(reply).first<k_header_size>());
    REQUIRE(header);
    CHECK(header->status() == Status::value_too_large);
    CHECK(header->id == 5);
    CHECK(parse_error_message(std::span(reply).subspan(k_header_size)) == "too big");

    std::vector<std::byte> count;
    encode_count_response(count, Op::clear, 6, 1234);
    CHECK(parse_count_response(std::span(count).subspan(k_header_size)) == 1234u);

    std::vector<std::byte> clear;
    encode_clear(clear, 8, "pgo");
    auto frame = round_trip(clear);
    CHECK(parse_clear(frame.body) == std::string_view("pgo"));
}

TEST_CASE("BUNDLE_BEGIN and BUNDLE_END round trips", "[proto][messages][bundle]") {
    std::vector<std::byte> wire;
    encode_bundle_begin(wire, 11, BundleBeginRequest{"codehash", "backend"});
    auto frame = round_trip(wire);
    auto begin = parse_bundle_begin(frame.body);
    REQUIRE(begin);
    CHECK(begin->code_hash == "codehash");
    CHECK(begin->backend_hash == "backend");

    std::vector<std::byte> reply;
    encode_bundle_begin_response(reply, 11, BundleBeginResponse{0x1234, true, 7, 99});
    auto parsed = parse_bundle_begin_response(std::span(reply).subspan(k_header_size));
    REQUIRE(parsed);
    CHECK(parsed->token == 0x1234);
    CHECK(parsed->hit);
    CHECK(parsed->entries == 7);
    CHECK(parsed->time_saved_ms == 99);

    std::vector<std::byte> end;
    encode_bundle_end(end, 12, 0x1234);
    auto end_frame = round_trip(end);
    CHECK(parse_bundle_end(end_frame.body) == 0x1234u);

    std::vector<std::byte> end_reply;
    encode_bundle_end_response(end_reply, 12, 5);
    CHECK(parse_bundle_end_response(std::span(end_reply).subspan(k_header_size)) == 5u);

    SECTION("an empty code hash is malformed") {
        std::vector<std::byte> empty;
        encode_bundle_begin(empty, 1, BundleBeginRequest{"", "b"});
        CHECK_FALSE(parse_bundle_begin(round_trip(empty).body));
    }
}
