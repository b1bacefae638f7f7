// SPDX-License-Identifier: MIT
#include <cstring>
#include <string>
#include <vector>

#include "proto/redis_reply.hpp"

#include <catch2/catch.hpp>

using namespace pt2cache::proto;

namespace {

using Type = RedisValue::Type;

struct Outcome {
    std::vector<RedisValue> replies;
    std::optional<std::string> error;
};

// Feeds `wire` in pieces of `step` bytes (0: all at once).
Outcome read_all(std::string_view wire, std::size_t step = 0, RedisReplyLimits limits = {}) {
    RedisReplyReader reader(limits);
    Outcome out;
    if (step == 0) {
        step = wire.size() + 1;
    }
    for (std::size_t pos = 0; pos < wire.size(); pos += step) {
        if (!reader.feed(wire.substr(pos, step))) {
            break;
        }
        while (auto value = reader.next()) {
            out.replies.push_back(std::move(*value));
        }
    }
    out.error = reader.error();
    return out;
}

std::string error_of(std::string_view wire, RedisReplyLimits limits = {}) {
    const auto out = read_all(wire, 0, limits);
    REQUIRE(out.error.has_value());
    // The same error whatever the split.
    CHECK(read_all(wire, 1, limits).error == out.error);
    return *out.error;
}

RedisValue one(std::string_view wire, RedisReplyLimits limits = {}) {
    const auto out = read_all(wire, 0, limits);
    INFO(out.error.value_or(""));
    REQUIRE(!out.error);
    REQUIRE(out.replies.size() == 1);
    return out.replies.front();
}

RedisValue str(std::string_view text, Type type = Type::string) {
    RedisValue value{.type = type};
    const auto bytes = std::as_bytes(std::span(text.data(), text.size()));
    value.data.assign(bytes.begin(), bytes.end());
    return value;
}

RedisValue integer(std::int64_t n) {
    return RedisValue{.type = Type::integer, .integer = n};
}

RedisValue array(std::vector<RedisValue> elements) {
    return RedisValue{.type = Type::array, .elements = std::move(elements)};
}

} // namespace

TEST_CASE("redis reply: every RESP2 type", "[redis_reply]") {
    CHECK(one("+OK\r\n") == str("OK", Type::status));
    CHECK(one("-ERR wrong\r\n") == str("ERR wrong", Type::error));
    CHECK(one(":42\r\n") == integer(42));
    CHECK(one(":-7\r\n") == integer(-7));
    CHECK(one(":9223372036854775807\r\n") == integer(INT64_MAX));
    CHECK(one(":-9223372036854775808\r\n") == integer(INT64_MIN));
    CHECK(one("$5\r\nhello\r\n") == str("hello"));
    CHECK(one("$0\r\n\r\n") == str(""));
    CHECK(one("$4\r\na\r\nb\r\n") == str("a\r\nb")); // binary-safe
    CHECK(one("$-1\r\n").type == Type::nil);
    CHECK(one("*-1\r\n").type == Type::nil);
    CHECK(one("*0\r\n") == array({}));
    CHECK(one("+\r\n") == str("", Type::status));
}

TEST_CASE("redis reply: nested arrays and several replies", "[redis_reply]") {
    const std::string wire = "*3\r\n:1\r\n*2\r\n$1\r\na\r\n$-1\r\n*0\r\n+OK\r\n$3\r\nxyz\r\n";
    const std::vector<RedisValue> expected = {
        array({integer(1), array({str("a"), RedisValue{}}), array({})}),
        str("OK", Type::status),
        str("xyz"),
    };
    for (const std::size_t step : std::vector<std::size_t>{0, 1, 2, 3, 5, 7}) {
        const auto out = read_all(wire, step);
        INFO("step " << step);
        CHECK(!out.error);
        CHECK(out.replies == expected);
    }
}

TEST_CASE("redis reply: split at every byte boundary", "[redis_reply]") {
    const std::string wire = "*2\r\n$12\r\nhello\r\nworld\r\n-ERR x\r\n:12345\r\n$-1\r\n";
    const auto whole = read_all(wire);
    REQUIRE(!whole.error);
    REQUIRE(whole.replies.size() == 3);
    for (std::size_t cut = 1; cut < wire.size(); ++cut) {
        RedisReplyReader reader;
        std::vector<RedisValue> replies;
        REQUIRE(reader.feed(std::string_view(wire).substr(0, cut)));
        while (auto value = reader.next()) {
            replies.push_back(std::move(*value));
        }
        REQUIRE(reader.feed(std::string_view(wire).substr(cut)));
        while (auto value = reader.next()) {
            replies.push_back(std::move(*value));
        }
        INFO("cut at " << cut);
        CHECK(replies == whole.replies);
        CHECK(reader.idle());
    }
}

TEST_CASE("redis reply: rejections", "[redis_reply]") {
    CHECK(error_of("$abc\r\n") == "bulk length \"abc\" is not a number");
    CHECK(error_of("$\r\n") == "bulk length \"\" is not a number");
    CHECK(error_of("$+5\r\n") == "bulk length \"+5\" is not a number");
    CHECK(error_of("$ 5\r\n") == "bulk length \" 5\" is not a number");
    CHECK(error_of("$5x\r\n") == "bulk length \"5x\" is not a number");
    CHECK(error_of("$-2\r\n") == "negative bulk length -2");
    CHECK(error_of("*-5\r\n") == "negative array length -5");
    CHECK(error_of("*x\r\n") == "array length \"x\" is not a number");
    CHECK(error_of(":1.5\r\n") == "integer reply \"1.5\" is not a number");
    CHECK(error_of(":\r\n") == "integer reply \"\" is not a number");
    CHECK(error_of(":9223372036854775808\r\n") ==
          "integer reply \"9223372036854775808\" is not a number");
    CHECK(error_of("$99999999999\r\n") ==
          "bulk length 99999999999 over the limit of 536870912 bytes");
    CHECK(error_of("$9223372036854775807\r\n") ==
          "bulk length 9223372036854775807 over the limit of 536870912 bytes");
    CHECK(error_of("$9223372036854775808\r\n") ==
          "bulk length \"9223372036854775808\" is not a number");
    CHECK(error_of("*2147483647\r\n") ==
          "array of 2147483647 elements: over the limit of 65536 elements in a reply");
    CHECK(error_of("*9223372036854775807\r\n") ==
          "array of 9223372036854775807 elements: over the limit of 65536 elements in a reply");
    CHECK(error_of("\r\n") == "empty reply line");
    CHECK(error_of("+OK\n") == "LF without CR after \"+OK\"");
    CHECK(error_of("+OK\rX") == "CR not followed by LF after \"+OK\"");
    CHECK(error_of("$3\r\nabcX\r\n") == "bulk string of 3 bytes not followed by CRLF");
    CHECK(error_of("$3\r\nabc\rX") == "bulk string of 3 bytes not followed by CRLF");
    CHECK(error_of("?what\r\n") == "unknown reply type byte 0x3f in \"?what\"");
    CHECK(error_of(std::string("\x00\x01\r\n", 4)) ==
          "unknown reply type byte 0x00 in \"\\x00\\x01\"");
    CHECK(error_of("HTTP/1.1 400 Bad Request\r\n") ==
          "unknown reply type byte 0x48 in \"HTTP/1.1 400 Bad Request\"");
}

TEST_CASE("redis reply: RESP3 types are refused", "[redis_reply]") {
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"%1\r\n+a\r\n+b\r\n", "map"},
        {"~1\r\n+a\r\n", "set"},
        {">2\r\n+a\r\n+b\r\n", "push"},
        {"|1\r\n+a\r\n+b\r\n", "attribute"},
        {"_\r\n", "null"},
        {",1.5\r\n", "double"},
        {"#t\r\n", "boolean"},
        {"=7\r\ntxt:abc\r\n", "verbatim string"},
        {"(12345\r\n", "big number"},
        {"!3\r\nerr\r\n", "blob error"},
    };
    for (const auto& [wire, name] : cases) {
        CHECK(error_of(wire) == "RESP3 reply type '" + wire.substr(0, 1) + "' (" + name +
                                    ") not accepted: the remote tier speaks RESP2");
    }
    // Inside an array too.
    CHECK(error_of("*2\r\n:1\r\n%0\r\n").starts_with("RESP3 reply type '%' (map)"));
}

TEST_CASE("redis reply: an error is sticky", "[redis_reply]") {
    RedisReplyReader reader;
    CHECK(!reader.feed(std::string_view("$-3\r\n")));
    CHECK(!reader.feed(std::string_view("+OK\r\n")));
    CHECK(!reader.next());
    CHECK(reader.error() == "negative bulk length -3");
    CHECK(!reader.idle());
}

TEST_CASE("redis reply: bulk limit at 0, at the limit, just over", "[redis_reply]") {
    RedisReplyLimits zero;
    zero.max_bulk = 0;
    CHECK(one("$0\r\n\r\n", zero) == str(""));
    CHECK(error_of("$1\r\nx\r\n", zero) == "bulk length 1 over the limit of 0 bytes");

    RedisReplyLimits small;
    small.max_bulk = 10;
    CHECK(one("$10\r\n0123456789\r\n", small) == str("0123456789"));
    CHECK(error_of("$11\r\n", small) == "bulk length 11 over the limit of 10 bytes");
    CHECK(error_of("$9223372036854775807\r\n", small) ==
          "bulk length 9223372036854775807 over the limit of 10 bytes");
}

TEST_CASE("redis reply: header line limit", "[redis_reply]") {
    RedisReplyLimits limits;
    limits.max_line = 8;
    CHECK(one("+1234567\r\n", limits) == str("1234567", Type::status)); // 8 bytes with '+'
    CHECK(error_of("+12345678\r\n", limits) == "reply line longer than 8 bytes");
    // Found before any CRLF arrives: a peer that never ends its line.
    RedisReplyReader reader(limits);
    CHECK(reader.feed(std::string_view("+1234567")));
    CHECK(!reader.feed(std::string_view("8")));
    CHECK(reader.error() == "reply line longer than 8 bytes");

    CHECK(error_of("+" + std::string(64 << 10, 'x') + "\r\n") ==
          "reply line longer than 65536 bytes");
}

TEST_CASE("redis reply: depth and element limits", "[redis_reply]") {
    RedisReplyLimits limits;
    limits.max_depth = 2;
    limits.max_elements = 4;
    CHECK(one("*1\r\n*1\r\n:1\r\n", limits) == array({array({integer(1)})}));
    CHECK(error_of("*1\r\n*1\r\n*1\r\n:1\r\n", limits) == "arrays nested deeper than 2 levels");
    // Empty arrays hold nothing open.
    CHECK(one("*1\r\n*1\r\n*0\r\n", limits) == array({array({array({})})}));

    CHECK(one("*4\r\n:1\r\n:2\r\n:3\r\n:4\r\n", limits).elements.size() == 4);
    CHECK(error_of("*5\r\n", limits) ==
          "array of 5 elements: over the limit of 4 elements in a reply");
    // Summed over the nesting of one reply.
    CHECK(error_of("*2\r\n*2\r\n:1\r\n:2\r\n*1\r\n:3\r\n", limits) ==
          "array of 1 elements: over the limit of 4 elements in a reply");
    CHECK(one("*2\r\n*1\r\n:1\r\n:2\r\n", limits).elements.size() == 2);
    // ... but not over separate replies.
    const auto out = read_all("*3\r\n:1\r\n:2\r\n:3\r\n*3\r\n:1\r\n:2\r\n:3\r\n", 0, limits);
    CHECK(!out.error);
    CHECK(out.replies.size() == 2);

    RedisReplyLimits none;
    none.max_depth = 0;
    none.max_elements = 0;
    CHECK(one("*0\r\n", none) == array({}));
    CHECK(error_of("*1\r\n:1\r\n", none) ==
          "array of 1 elements: over the limit of 0 elements in a reply");
}

TEST_CASE("redis reply: one reply's total size is bounded", "[redis_reply]") {
    RedisReplyLimits limits;
    limits.max_bulk = 10;
    limits.max_reply_extra = 20;
    // 30 bytes in all: "*2\r\n" (4), "$10\r\n" (5) + 12, "+abcdef\r\n" (9).
    CHECK(one("*2\r\n$10\r\n0123456789\r\n+abcdef\r\n", limits).elements.size() == 2);
    // One byte more: refused.
    CHECK(error_of("*2\r\n$10\r\n0123456789\r\n+abcdefg\r\n", limits) ==
          "reply larger than 30 bytes (the largest value, 10 bytes, plus 20)");
    // Bulks each under max_bulk cannot add up: refused from the header, before
    // their bytes arrive.
    CHECK(error_of("*3\r\n$10\r\n0123456789\r\n$10\r\n", limits) ==
          "reply larger than 30 bytes (the largest value, 10 bytes, plus 20)");
    // Counted per reply: separate replies each get the whole allowance.
    const auto out = read_all("$10\r\n0123456789\r\n$10\r\n0123456789\r\n", 0, limits);
    CHECK(!out.error);
    CHECK(out.replies.size() == 2);

    // Header lines count too: statuses of 64 KiB, whatever max_bulk.
    RedisReplyLimits small;
    small.max_bulk = 10;
    std::string statuses = "*1024\r\n";
    for (int i = 0; i < 300; ++i) {
        statuses += "+" + std::string((64 << 10) - 1, 's') + "\r\n";
    }
    CHECK(read_all(statuses, 0, small).error ==
          "reply larger than 16777226 bytes (the largest value, 10 bytes, plus 16777216)");
}

TEST_CASE("redis reply: memory follows the bytes that arrived", "[redis_reply]") {
    // 500 MiB announced, 10 bytes sent: the buffer holds one small step.
    RedisReplyReader reader;
    REQUIRE(reader.feed(std::string_view("$524288000\r\n0123456789")));
    CHECK(reader.ready() == 0);
    CHECK(!reader.idle());
    const auto room = reader.bulk_room(1 << 30);
    CHECK(room.size() == (64 << 10) - 10);

    // Announcing 2^31 elements allocates nothing: it is refused.
    RedisReplyLimits limits;
    limits.max_elements = std::uint64_t{1} << 40;
    RedisReplyReader arrays(limits);
    REQUIRE(arrays.feed(std::string_view("*1099511627776\r\n:1\r\n")));
    CHECK(arrays.ready() == 0);
}

TEST_CASE("redis reply: reading a bulk straight into its buffer", "[redis_reply]") {
    const std::string value(300'000, 'v');
    RedisReplyReader reader;
    REQUIRE(reader.feed("$" + std::to_string(value.size()) + "\r\n" + value.substr(0, 100)));
    std::size_t filled = 100;
    std::size_t steps = 0;
    while (filled < value.size()) {
        auto room = reader.bulk_room(50'000);
        REQUIRE(!room.empty());
        REQUIRE(room.size() <= 50'000);
        // Never more than twice what arrived (or the first 64 KiB step).
        CHECK(filled + room.size() <= std::max<std::size_t>(2 * filled, 64 << 10));
        const auto n = std::min(room.size(), value.size() - filled);
        std::memcpy(room.data(), value.data() + filled, n);
        reader.commit(n);
        filled += n;
        ++steps;
    }
    CHECK(steps > 6);
    CHECK(reader.bulk_room(10).empty()); // the value is complete: CRLF is next
    CHECK(reader.ready() == 0);
    REQUIRE(reader.feed(std::string_view("\r\n:5\r\n")));
    REQUIRE(reader.ready() == 2);
    CHECK(reader.next() == str(value));
    CHECK(reader.next() == integer(5));
    CHECK(reader.idle());
}

TEST_CASE("redis reply: encode round trip", "[redis_reply]") {
    const auto value = array({integer(-3), str("a\r\nb"), RedisValue{},
                              array({str("x", Type::status)}), str("oops", Type::error)});
    std::string wire;
    encode_redis_value(value, wire);
    CHECK(wire == "*5\r\n:-3\r\n$4\r\na\r\nb\r\n$-1\r\n*1\r\n+x\r\n-oops\r\n");
    CHECK(one(wire) == value);
}
