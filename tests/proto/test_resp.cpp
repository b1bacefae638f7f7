#include <cstdint>
#include <limits>
#include <string>

#include "proto/bytes.hpp"
#include "proto/resp.hpp"

#include <catch2/catch.hpp>

using namespace pt2cache::proto;
using namespace pt2cache::proto::resp;

namespace {

ParseResult parse(std::string_view text, Limits limits = {}) {
    return parse_command(as_bytes(text), limits);
}

std::string error_of(const ParseResult& result) {
    REQUIRE(std::holds_alternative<ProtocolError>(result));
    return std::get<ProtocolError>(result).message;
}

std::string written(auto fn, int version = 2) {
    std::vector<std::byte> out;
    Writer writer(out, version);
    fn(writer);
    return std::string(as_text(out));
}

} // namespace

TEST_CASE("multibulk commands", "[proto][resp]") {
    const std::string wire = "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nv\r\nx!\r\n*1\r\n$4\r\nPING\r\n";
    auto result = parse(wire);
    REQUIRE(std::holds_alternative<Command>(result));
    const auto& command = std::get<Command>(result);
    REQUIRE(command.args.size() == 3);
    CHECK(command.args[0] == "SET");
    CHECK(command.args[2] == "v\r\nx!");
    CHECK(command.consumed == wire.find("*1"));

    SECTION("every prefix of a command needs more") {
        for (std::size_t n = 1; n < command.consumed; ++n) {
            CHECK(std::holds_alternative<NeedMore>(parse(std::string_view(wire).substr(0, n))));
        }
    }
}

TEST_CASE("a command's argument vector can be handed back for the next parse", "[proto][resp]") {
    const std::string wire = "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n*1\r\n$4\r\nPING\r\n";
    auto first = parse_command(as_bytes(wire), Limits{});
    REQUIRE(std::holds_alternative<Command>(first));
    auto& set = std::get<Command>(first);
    REQUIRE(set.args.size() == 3);
    const auto* storage = set.args.data();
    const auto rest = std::string_view(wire).substr(set.consumed);
    auto second = parse_command(as_bytes(rest), Limits{}, std::move(set.args));
    REQUIRE(std::holds_alternative<Command>(second));
    const auto& ping = std::get<Command>(second);
    // The old arguments are gone, the vector's storage is reused.
    REQUIRE(ping.args.size() == 1);
    CHECK(ping.args[0] == "PING");
    CHECK(ping.args.data() == storage);
}

TEST_CASE("inline commands", "[proto][resp]") {
    auto result = parse("set  key \"a value\"\r\n");
    REQUIRE(std::holds_alternative<Command>(result));
    const auto& command = std::get<Command>(result);
    REQUIRE(command.args.size() == 3);
    CHECK(command.args[2] == "a value");

    auto bare = parse("PING\n");
    REQUIRE(std::holds_alternative<Command>(bare));
    CHECK(std::get<Command>(bare).args.size() == 1);

    auto empty = parse("\r\n");
    REQUIRE(std::holds_alternative<Command>(empty));
    CHECK(std::get<Command>(empty).args.empty());
    CHECK(std::get<Command>(empty).consumed == 2);

    CHECK(error_of(parse("GET \"open\n")) == "unbalanced quotes in request");
    CHECK(error_of(parse(std::string(70 * 1024, 'a'))) == "too big inline request");
}

TEST_CASE("hostile RESP is refused with Redis's wording", "[proto][resp]") {
    CHECK(error_of(parse("*3000000000\r\n")) == "invalid multibulk length");
    CHECK(error_of(parse("*abc\r\n")) == "invalid multibulk length");
    CHECK(error_of(parse("*1\r\n$2000000000\r\n")) == "invalid bulk length");
    CHECK(error_of(parse("*1\r\n$-5\r\n")) == "invalid bulk length");
    CHECK(error_of(parse("*1\r\n$x\r\n")) == "invalid bulk length");
    CHECK(error_of(parse("*1\r\n+3\r\n")) == "expected '$', got '+'");
    CHECK(error_of(parse("*1\r\n$3\r\nGETxx")) == "expected CRLF after bulk string");
    CHECK(error_of(parse("*1\r\n$11\r\nhello", Limits{.max_bulk = 10})) == "invalid bulk length");
    CHECK(error_of(parse("*" + std::string(70 * 1024, '1'))) == "too big mbulk count string");

    // Before AUTH, where a password is required: Redis's lower limits.
    const Limits stranger{.unauthenticated = true};
    CHECK(error_of(parse("*11\r\n", stranger)) == "unauthenticated multibulk length");
    CHECK(std::holds_alternative<NeedMore>(parse("*10\r\n", stranger)));
    CHECK(error_of(parse("*2\r\n$3\r\nSET\r\n$16385\r\n", stranger)) ==
          "unauthenticated bulk length");
    CHECK(std::holds_alternative<NeedMore>(parse("*2\r\n$3\r\nSET\r\n$16384\r\n", stranger)));
    CHECK(error_of(parse("*1\r\n$-5\r\n", stranger)) == "invalid bulk length");

    SECTION("a claimed count larger than the buffer reserves nothing huge") {
        auto result = parse("*1048576\r\n$1\r\na\r\n");
        CHECK(std::holds_alternative<NeedMore>(result));
    }
}

// Found by tests/fuzz/fuzz_resp.cpp's splitting invariant: with leading
// zeros a length line longer than 64 KiB parsed when it arrived whole but was
// refused ("too big ... count string") when it arrived in pieces. Redis's
// string2ll refuses leading zeros, and so do we.
TEST_CASE("lengths with leading zeros are refused, whole or split", "[proto][resp]") {
    CHECK(error_of(parse("*01\r\n$1\r\na\r\n")) == "invalid multibulk length");
    CHECK(error_of(parse("*1\r\n$01\r\na\r\n")) == "invalid bulk length");
    CHECK(error_of(parse("*1\r\n$-0\r\n")) == "invalid bulk length");
    const std::string zeros(70 * 1024, '0');
    const std::string wire = "*" + zeros + "1\r\n$1\r\na\r\n";
    CHECK(error_of(parse(wire)) == "invalid multibulk length");
    CHECK(std::holds_alternative<ProtocolError>(parse(wire.substr(0, zeros.size()))));
    const std::string bulk = "*1\r\n$" + zeros + "1\r\na\r\n";
    CHECK(error_of(parse(bulk)) == "invalid bulk length");
    // "0" itself and negative counts keep their meaning.
    auto empty = parse("*0\r\n");
    REQUIRE(std::holds_alternative<Command>(empty));
    CHECK(std::get<Command>(empty).args.empty());
    auto null = parse("*-1\r\n");
    REQUIRE(std::holds_alternative<Command>(null));
    auto zero_bulk = parse("*1\r\n$0\r\n\r\n");
    REQUIRE(std::holds_alternative<Command>(zero_bulk));
    CHECK(std::get<Command>(zero_bulk).args == std::vector<std::string_view>{""});
}

// parse_command reads the usual "<up to 18 digits>\r\n" length line in one
// pass and leaves every other line to the general path (find the CRLF, then
// parse the number): the same answers at the edges between the two.
TEST_CASE("length lines at the quick path's edges parse as the general path does",
          "[proto][resp]") {
    const Limits huge{.max_bulk = std::numeric_limits<std::uint64_t>::max(),
                      .max_value = std::numeric_limits<std::uint64_t>::max()};
    // 18 digits (quick), 19 (general), past int64 (refused).
    CHECK(std::holds_alternative<NeedMore>(parse("*1\r\n$999999999999999999\r\n", huge)));
    CHECK(std::holds_alternative<NeedMore>(parse("*1\r\n$9223372036854775807\r\n", huge)));
    CHECK(error_of(parse("*1\r\n$9223372036854775808\r\n", huge)) == "invalid bulk length");
    CHECK(error_of(parse("*1\r\n$999999999999999999\r\n")) == "invalid bulk length");
    // A CR without its LF: the line runs to the next CRLF, and is no number.
    CHECK(error_of(parse("*1\r\n$3\rX\r\nabc\r\n")) == "invalid bulk length");
    CHECK(error_of(parse("*1\rX\r\n$3\r\nabc\r\n")) == "invalid multibulk length");
    CHECK(std::holds_alternative<NeedMore>(parse("*1\r\n$3\rX")));
    // A line cut anywhere needs more.
    CHECK(std::holds_alternative<NeedMore>(parse("*1\r\n$3")));
    CHECK(std::holds_alternative<NeedMore>(parse("*1\r\n$3\r")));
    CHECK(std::holds_alternative<NeedMore>(parse("*1\r")));
    CHECK(std::holds_alternative<NeedMore>(parse("*12")));
    // Either path yields the same command.
    const std::string value(123, 'v');
    const std::string wire = "*2\r\n$3\r\nSET\r\n$123\r\n" + value + "\r\n";
    auto quick = parse(wire); // the arguments view `wire`
    REQUIRE(std::holds_alternative<Command>(quick));
    CHECK(std::get<Command>(quick).args[1] == value);
}

TEST_CASE("a bulk string over max_value is reported as soon as its length is read",
          "[proto][resp]") {
    const Limits limits{.max_bulk = 1000, .max_value = 10};
    auto result = parse("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$11\r\n", limits);
    REQUIRE(std::holds_alternative<TooLarge>(result));
    CHECK(std::get<TooLarge>(result).index == 2);
    CHECK(std::get<TooLarge>(result).length == 11);
    // At the limit it is an ordinary argument; over max_bulk, a protocol error.
    CHECK(
        std::holds_alternative<Command>(parse("*2\r\n$3\r\nSET\r\n$10\r\n0123456789\r\n", limits)));
    CHECK(error_of(parse("*1\r\n$1001\r\n", limits)) == "invalid bulk length");
    // The default limits are Redis's proto-max-bulk-len.
    CHECK(error_of(parse("*1\r\n$536870913\r\n")) == "invalid bulk length");
    CHECK(std::holds_alternative<NeedMore>(parse("*1\r\n$536870912\r\n")));
}

TEST_CASE("reply encoding in RESP2 and RESP3", "[proto][resp]") {
    CHECK(written([](Writer& w) { w.null(); }, 2) == "$-1\r\n");
    CHECK(written([](Writer& w) { w.null(); }, 3) == "_\r\n");
    CHECK(written([](Writer& w) { w.map(1).bulk("proto").integer(3); }, 3) ==
          "%1\r\n$5\r\nproto\r\n:3\r\n");
    CHECK(written([](Writer& w) { w.map(1).bulk("proto").integer(2); }, 2) ==
          "*2\r\n$5\r\nproto\r\n:2\r\n");
    CHECK(written([](Writer& w) { w.simple("OK").error("ERR x"); }) == "+OK\r\n-ERR x\r\n");
    CHECK(written([](Writer& w) { w.verbatim("a"); }, 3) == "=5\r\ntxt:a\r\n");
    CHECK(written([](Writer& w) { w.bulk(""); }) == "$0\r\n\r\n");
    CHECK(written([](Writer& w) { w.integer(0).integer(-42); }) == ":0\r\n:-42\r\n");
    CHECK(written([](Writer& w) { w.integer(std::numeric_limits<std::int64_t>::min()); }) ==
          ":-9223372036854775808\r\n");
    CHECK(written([](Writer& w) { w.integer(std::numeric_limits<std::int64_t>::max()); }) ==
          ":9223372036854775807\r\n");
    CHECK(written([](Writer& w) { w.array(0).bulk_header(1048576); }) == "*0\r\n$1048576\r\n");
}

TEST_CASE("a line reply cannot be split by the text it quotes", "[proto][resp]") {
    CHECK(written([](Writer& w) { w.error("ERR 'a\r\n+OK'"); }) == "-ERR 'a  +OK'\r\n");
    CHECK(written([](Writer& w) { w.simple("x\ny\r"); }) == "+x y \r\n");
    CHECK(written([](Writer& w) { w.bulk("a\r\nb"); }) == "$4\r\na\r\nb\r\n");
}

TEST_CASE("a command parsed in pieces resumes where it was left", "[proto][resp]") {
    std::string whole = "*1001\r\n$4\r\nMGET\r\n";
    for (int i = 0; i < 1000; ++i) {
        const std::string key = "key:" + std::to_string(i * 7919);
        whole += "$" + std::to_string(key.size()) + "\r\n" + key + "\r\n";
    }
    whole += "*1\r\n$4\r\nPING\r\n"; // the next command, not part of this one
    const auto expected = parse(whole);
    REQUIRE(std::holds_alternative<Command>(expected));
    const Limits limits;
    Resume resume;
    std::size_t resumed = 0;
    for (std::size_t cut = 1; cut < std::get<Command>(expected).consumed; cut += 997) {
        const auto partial = parse_command(as_bytes(whole.substr(0, cut)), limits, {}, &resume);
        REQUIRE(std::holds_alternative<NeedMore>(partial));
        resumed += resume.next > 0 ? 1 : 0;
    }
    CHECK(resumed > 10);
    const auto got = parse_command(as_bytes(whole), limits, {}, &resume);
    REQUIRE(std::holds_alternative<Command>(got));
    CHECK(std::get<Command>(got).args == std::get<Command>(expected).args);
    CHECK(std::get<Command>(got).consumed == std::get<Command>(expected).consumed);
    CHECK(resume.count == 0); // reset by the whole command

    SECTION("a state left by another command is not trusted") {
        Resume stale{1001, 500, 7};
        const auto again = parse_command(as_bytes(whole), limits, {}, &stale);
        REQUIRE(std::holds_alternative<Command>(again));
        CHECK(std::get<Command>(again).args == std::get<Command>(expected).args);
    }
    SECTION("an argument over max_value after a resume is TooLarge at its own index") {
        Limits small;
        small.max_value = 4; // "MGET" fits; the keys do not
        Resume fresh;
        const auto first = parse_command(as_bytes(whole.substr(0, 20)), small, {}, &fresh);
        REQUIRE(std::holds_alternative<NeedMore>(first));
        const auto large = parse_command(as_bytes(whole), small, {}, &fresh);
        REQUIRE(std::holds_alternative<TooLarge>(large));
        CHECK(std::get<TooLarge>(large).index == 1);
    }
}

TEST_CASE("unknown command wording", "[proto][resp]") {
    std::vector<std::string_view> args{"FOO", "a", "b"};
    CHECK(unknown_command_message(args) ==
          "ERR unknown command 'FOO', with args beginning with: 'a' 'b' ");
}
