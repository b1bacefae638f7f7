// SPDX-License-Identifier: MIT
#include <limits>

#include "config/config.hpp"
#include "config/values.hpp"

#include <catch2/catch.hpp>
#include <fmt/core.h>

using namespace pt2cache::config;

TEST_CASE("parse_size accepts integers and suffixed sizes", "[config][values]") {
    struct Row {
        std::string_view text;
        std::uint64_t bytes;
    };
    const Row rows[] = {
        {"0", 0},
        {"1000", 1000},
        {"512MiB", 512ull << 20},
        {"10GiB", 10ull << 30},
        {"64KiB", 64ull << 10},
        {"1.5GiB", 1610612736},
        {"2TiB", 2ull << 40},
        {"7B", 7},
        {"1kB", 1000},
        {"1KB", 1000},
        {"3MB", 3000000},
        {"2GB", 2000000000},
        {"1TB", 1000000000000},
        {"10 GiB", 10ull << 30},
        {"  64kib ", 64ull << 10},
        {"0.5KiB", 512},
        {"1.0001KiB", 1024}, // rounds down to a whole byte
        {"1.1234567KiB", 1150},
        {"16777215TiB", 16777215ull << 40},
        {"18446744073709551615", std::numeric_limits<std::uint64_t>::max()},
    };
    for (const auto& row : rows) {
        INFO(row.text);
        auto size = parse_size(row.text);
        REQUIRE(size);
        CHECK(*size == row.bytes);
    }
}

TEST_CASE("parse_size rejects malformed sizes and names the suffixes", "[config][values]") {
    for (std::string_view text : {"", "ten", "-1", "+1", "1.5", "1.5B", "10G", "10 GiBs", "1e3",
                                  ".5GiB", "1.GiB", "GiB", "0x10", "1,000", "5 5"}) {
        INFO(text);
        auto size = parse_size(text);
        REQUIRE_FALSE(size);
        CHECK(size.error() ==
              fmt::format("expected a size like 10GiB or an integer number of bytes, got \"{}\" "
                          "(suffixes: B, KiB, MiB, GiB, TiB, kB, MB, GB, TB)",
                          text));
    }
}

TEST_CASE("parse_size reports sizes too large for 64 bits", "[config][values]") {
    for (std::string_view text :
         {"18446744073709551616", "16777216TiB", "99999999999999999999999GiB"}) {
        INFO(text);
        auto size = parse_size(text);
        REQUIRE_FALSE(size);
        CHECK(size.error() == fmt::format("size \"{}\" is too large (at most "
                                          "18446744073709551615 bytes)",
                                          text));
    }
}

TEST_CASE("parse_bool accepts the usual spellings", "[config][values]") {
    for (std::string_view text : {"true", "TRUE", "1", "yes", "Yes", "on"}) {
        INFO(text);
        CHECK(parse_bool(text) == true);
    }
    for (std::string_view text : {"false", "False", "0", "no", "off", "OFF"}) {
        INFO(text);
        CHECK(parse_bool(text) == false);
    }
    auto bad = parse_bool("maybe");
    REQUIRE_FALSE(bad);
    CHECK(bad.error() == "expected true or false (or 1/0, yes/no, on/off), got \"maybe\"");
    CHECK_FALSE(parse_bool(""));
    CHECK_FALSE(parse_bool("2"));
}

TEST_CASE("parse_integer checks digits and range", "[config][values]") {
    CHECK(parse_integer("1", 1, 64) == 1u);
    CHECK(parse_integer("64", 1, 64) == 64u);
    CHECK(parse_integer("18446744073709551615", 0, std::numeric_limits<std::uint64_t>::max()) ==
          std::numeric_limits<std::uint64_t>::max());
    for (std::string_view text : {"0", "65", "", "-1", "+3", " 3", "3 ", "3x", "1e2", "0x10"}) {
        INFO(text);
        auto value = parse_integer(text, 1, 64);
        REQUIRE_FALSE(value);
        CHECK(value.error() == fmt::format("expected an integer from 1 to 64, got \"{}\"", text));
    }
    auto unbounded = parse_integer("x", 0, std::numeric_limits<std::uint64_t>::max());
    REQUIRE_FALSE(unbounded);
    CHECK(unbounded.error() == "expected an integer of at least 0, got \"x\"");
}

TEST_CASE("parse_log_level accepts spdlog's names in any case", "[config][values]") {
    CHECK(parse_log_level("trace") == std::string("trace"));
    CHECK(parse_log_level("DEBUG") == std::string("debug"));
    CHECK(parse_log_level("Warn") == std::string("warn"));
    CHECK(parse_log_level("off") == std::string("off"));
    auto bad = parse_log_level("verbose");
    REQUIRE_FALSE(bad);
    CHECK(bad.error() ==
          "expected one of trace, debug, info, warn, error, critical, off; got \"verbose\"");
    CHECK(log_level_names().size() == 7);
}

TEST_CASE("quote escapes like a TOML basic string", "[config][values]") {
    CHECK(quote("plain") == "\"plain\"");
    CHECK(quote("a\"b\\c") == "\"a\\\"b\\\\c\"");
    CHECK(quote("line\nbreak\ttab") == "\"line\\nbreak\\ttab\"");
    CHECK(quote(std::string_view("\x01", 1)) == "\"\\u0001\"");
    CHECK(trim("  x y \t") == "x y");
    CHECK(trim(" \n ").empty());
}
