#include <cstring>

#include "proto/frame.hpp"
#include "proto/messages.hpp"

#include <catch2/catch.hpp>

using namespace pt2cache::proto;

namespace {

std::vector<std::byte> bytes_of(std::initializer_list<unsigned> values) {
    std::vector<std::byte> out;
    for (auto v : values) {
        out.push_back(std::byte(v));
    }
    return out;
}

} // namespace

TEST_CASE("the header matches the example in docs/protocol.md", "[proto][frame]") {
    std::vector<std::byte> out;
    encode_key_op(out, Op::get, 7, KeyRef{"pgo", "k"});
    const auto expected = bytes_of({0xF2, 0x50, 0x03, 0x00, 0x07, 0, 0, 0, 0x07, 0, 0, 0, 0x03,
                                    0x70, 0x67, 0x6F, 0x01, 0x00, 0x6B});
    CHECK(out == expected);

    std::vector<std::byte> miss;
    encode_response(miss, Op::get, 7, Status::miss);
    CHECK(miss == bytes_of({0xF2, 0x50, 0x03, 0x01, 0x07, 0, 0, 0, 0, 0, 0, 0}));
}

TEST_CASE("decode_request waits for whole frames", "[proto][frame]") {
    std::vector<std::byte> out;
    encode_key_op(out, Op::exists, 42, KeyRef{"fx-graph", "abc"});
    const Limits limits;

    for (std::size_t n = 0; n < out.size(); ++n) {
        auto result = decode_request(std::span(out).first(n), limits);
        REQUIRE(std::holds_alternative<NeedMore>(result));
        CHECK(std::get<NeedMore>(result).bytes > 0);
    }
    out.push_back(std::byte{0xF2}); // the start of the next frame
    auto result = decode_request(out, limits);
    REQUIRE(std::holds_alternative<Frame>(result));
    const auto& frame = std::get<Frame>(result);
    CHECK(frame.header.op == Op::exists);
    CHECK(frame.header.id == 42);
    CHECK(frame.consumed == out.size() - 1);
    auto key = parse_key(frame.body);
    REQUIRE(key);
    CHECK(key->ns == "fx-graph");
    CHECK(key->key == "abc");
}

TEST_CASE("hostile headers are rejected before any allocation", "[proto][frame]") {
    const Limits limits{.max_value = 1000};

    SECTION("bad magic is reported from the first byte") {
        auto result = decode_request(bytes_of({'*'}), limits);
        REQUIRE(std::holds_alternative<Error>(result));
        CHECK(std::get<Error>(result).status == Status::malformed);
    }
    SECTION("bad second magic byte") {
        auto result = decode_request(bytes_of({0xF2, 0x51, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0}), limits);
        REQUIRE(std::holds_alternative<Error>(result));
        CHECK(std::get<Error>(result).status == Status::malformed);
        CHECK_THAT(std::get<Error>(result).message, Catch::Contains("magic"));
    }
    SECTION("unknown op") {
        auto result =
            decode_request(bytes_of({0xF2, 0x50, 0x7E, 0, 1, 0, 0, 0, 0, 0, 0, 0}), limits);
        REQUIRE(std::holds_alternative<Error>(result));
        CHECK(std::get<Error>(result).status == Status::unknown_op);
        CHECK(std::get<Error>(result).message == "unknown op 0x7e");
    }
    SECTION("a PUT claiming 4 GiB is refused as too large") {
        auto result = decode_request(
            bytes_of({0xF2, 0x50, 0x04, 0, 1, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF}), limits);
        REQUIRE(std::holds_alternative<Error>(result));
        CHECK(std::get<Error>(result).status == Status::value_too_large);
    }
    SECTION("a GET claiming 1 MiB is malformed") {
        auto result =
            decode_request(bytes_of({0xF2, 0x50, 0x03, 0, 1, 0, 0, 0, 0, 0, 0x10, 0}), limits);
        REQUIRE(std::holds_alternative<Error>(result));
        CHECK(std::get<Error>(result).status == Status::malformed);
    }
    SECTION("a PUT exactly at the limit is accepted as a header") {
        std::vector<std::byte> header;
        encode_header(Header{Op::put, 0, 1, static_cast<std::uint32_t>(k_put_overhead + 1000)},
                      header);
        auto decoded = decode_request_header(std::span(header).first<k_header_size>(), limits);
        CHECK(decoded.has_value());
    }
}

TEST_CASE("status and op names", "[proto][frame]") {
    CHECK(op_name(Op::bundle_end) == "BUNDLE_END");
    CHECK(status_name(Status::version_mismatch) == "VERSION_MISMATCH");
    CHECK(is_error(Status::malformed));
    CHECK_FALSE(is_error(Status::not_stored));
    CHECK(closes_connection(Status::key_too_long));
    CHECK_FALSE(closes_connection(Status::storage_error));
    CHECK_FALSE(is_known_op(0x00));
    CHECK(is_known_op(0x09));
}
