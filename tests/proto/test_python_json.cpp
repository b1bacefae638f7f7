// SPDX-License-Identifier: MIT
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "proto/python_json.hpp"
#include "tests/proto/python_oracle.hpp"

#include <catch2/catch.hpp>

using namespace pt2cache::proto;
using pt2cache::tests::run_python;
using Json = nlohmann::ordered_json;
using namespace std::string_literals;

namespace {

// Every value as CPython writes it: [json.dumps(v), repr(v)].
constexpr const char* k_dumps_script = R"(
import json, sys
with open(sys.argv[1]) as f:
    values = json.load(f)
print(json.dumps([[json.dumps(v), repr(v)] for v in values]))
)";

// Each 64-bit pattern as a double: [repr(x), json.dumps(x)].
constexpr const char* k_float_script = R"(
import json, struct, sys
with open(sys.argv[1]) as f:
    patterns = json.load(f)
out = []
for bits in patterns:
    x = struct.unpack("<d", struct.pack("<Q", bits))[0]
    out.append([repr(x), json.dumps(x)])
print(json.dumps(out))
)";

Json string_cases() {
    return Json::array({
        "", "plain", "quote \" backslash \\ slash /", "\n\r\t\b\f",
        "nul \0 unit sep \x1f del \x7f"s,
        "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",           // é € 😀
        "nbsp \xc2\xa0 shy \xc2\xad c1 \xc2\x85",              // U+00A0 U+00AD U+0085
        "ls \xe2\x80\xa8 zwsp \xe2\x80\x8b bom \xef\xbb\xbf",  // U+2028 U+200B U+FEFF
        "pua \xee\x80\x80 ideo \xe3\x80\x80 cjk \xe4\xb8\xad", // U+E000 U+3000 U+4E2D
        "it's", "say \"hi\"", "it's \"both\"",
        "\xf4\x8f\xbf\xbf",         // U+10FFFF
        "\xef\xbf\xbd replacement", // U+FFFD itself
    });
}

Json structured_cases() {
    Json nested = Json::object();
    nested["z"] = 1;
    nested["a"] = Json::array({1, 2.5, nullptr, true, false, "x"});
    nested["m"] = Json::object();
    nested["e"] = Json::array();
    nested["XBLOCK"] = 8;
    Json best = Json::object();
    best["XBLOCK"] = 1024;
    best["R0_BLOCK"] = 64;
    best["num_warps"] = 4;
    best["num_stages"] = 1;
    best["configs_hash"] = std::string(64, 'e');
    best["found_by_coordesc"] = false;
    best["time_taken_ms"] = 117;
    best["triton_cache_hash"] = nullptr;
    return Json::array({
        nullptr,
        true,
        false,
        0,
        -1,
        42,
        std::numeric_limits<std::int64_t>::min(),
        std::numeric_limits<std::int64_t>::max(),
        std::numeric_limits<std::uint64_t>::max(),
        0.0,
        -0.0,
        1.0,
        -2.5,
        0.1,
        0.1 + 0.2,
        1e16,
        1e15,
        9999999999999998.0,
        123456789012345680.0,
        1e-4,
        1e-5,
        0.00012345,
        1.5e300,
        5e-324,
        std::numeric_limits<double>::max(),
        nested,
        best,
        Json::array({Json::object(), Json::array(), Json::array({Json::array()})}),
    });
}

} // namespace

TEST_CASE("python_json_dumps and python_repr equal CPython's json.dumps and repr",
          "[proto][python_json]") {
    Json values = structured_cases();
    for (const auto& text : string_cases()) {
        values.push_back(text);
        Json keyed = Json::object();
        keyed[text.get<std::string>()] = text;
        values.push_back(keyed);
    }
    const Json expected = run_python(k_dumps_script, values);
    REQUIRE(expected.size() == values.size());
    for (std::size_t i = 0; i < values.size(); ++i) {
        INFO("value " << values[i].dump(-1, ' ', true));
        CHECK(python_json_dumps(values[i]) == expected[i][0].get<std::string>());
        CHECK(python_repr(values[i]) == expected[i][1].get<std::string>());
    }
}

TEST_CASE("python_float_repr matches repr(float) for random and edge doubles",
          "[proto][python_json]") {
    std::vector<std::uint64_t> patterns;
    for (double x : {0.0,
                     -0.0,
                     1.0,
                     0.5,
                     1e16,
                     1e15,
                     1e17,
                     1e-4,
                     1e-5,
                     9.999e-5,
                     0.1,
                     1.0 / 3,
                     2.0 / 3,
                     1e22,
                     1e23,
                     5e-324,
                     2.2250738585072014e-308,
                     std::numeric_limits<double>::max(),
                     4503599627370496.5,
                     1234567.0,
                     12345678901234567.0}) {
        patterns.push_back(std::bit_cast<std::uint64_t>(x));
        patterns.push_back(std::bit_cast<std::uint64_t>(-x));
    }
    std::mt19937_64 random(20240531);
    while (patterns.size() < 3000) {
        const std::uint64_t bits = random();
        const double x = std::bit_cast<double>(bits);
        if (std::isfinite(x)) {
            patterns.push_back(bits);
        }
        // Values of everyday magnitude, where fixed and exponent forms meet.
        std::uniform_real_distribution<double> mantissa(1.0, 10.0);
        std::uniform_int_distribution<int> exponent(-8, 20);
        patterns.push_back(
            std::bit_cast<std::uint64_t>(mantissa(random) * std::pow(10.0, exponent(random))));
    }
    const Json expected = run_python(k_float_script, patterns);
    REQUIRE(expected.size() == patterns.size());
    for (std::size_t i = 0; i < patterns.size(); ++i) {
        const double x = std::bit_cast<double>(patterns[i]);
        INFO("bits " << patterns[i]);
        REQUIRE(python_float_repr(x) == expected[i][0].get<std::string>());
        REQUIRE(python_json_dumps(Json(x)) == expected[i][1].get<std::string>());
    }
}

TEST_CASE("non-finite floats use Python's spellings", "[proto][python_json]") {
    const double inf = std::numeric_limits<double>::infinity();
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const Json expected = run_python(R"(
import json
print(json.dumps([json.dumps([float("inf"), float("-inf"), float("nan")]),
                  repr([float("inf"), float("-inf"), float("nan")])]))
)",
                                     nullptr);
    const Json values = Json::array({inf, -inf, nan});
    CHECK(python_json_dumps(values) == expected[0].get<std::string>());
    CHECK(python_repr(values) == expected[1].get<std::string>());
    CHECK(python_json_dumps(values) == "[Infinity, -Infinity, NaN]");
    CHECK(python_float_repr(-nan) == "nan");
}

TEST_CASE("invalid UTF-8 bytes are written as U+FFFD", "[proto][python_json]") {
    CHECK(python_json_dumps(Json(std::string("a\xff"
                                             "b"))) == "\"a\\ufffdb\"");
    CHECK(python_json_dumps(Json(std::string("\xc3"))) == "\"\\ufffd\"");
    CHECK(python_json_dumps(Json(std::string("\xed\xa0\x80"))) == "\"\\ufffd\\ufffd\\ufffd\"");
    CHECK(python_json_dumps(Json(std::string("\xc0\xaf"))) == "\"\\ufffd\\ufffd\"");
    CHECK(python_repr(Json(std::string("\xff"))) == "'\xef\xbf\xbd'");
}

TEST_CASE("binary values are written as lists of integers", "[proto][python_json]") {
    const auto binary = Json::binary({1, 2, 255});
    CHECK(python_json_dumps(binary) == "[1, 2, 255]");
    CHECK(python_repr(binary) == "[1, 2, 255]");
    CHECK(python_json_dumps(Json(Json::value_t::discarded)) == "null");
}

TEST_CASE("parse_json refuses JSON nested deeper than k_max_json_depth", "[proto][python_json]") {
    const auto nested = [](std::size_t depth) {
        return "{\"a\": " + std::string(depth - 1, '[') + std::string(depth - 1, ']') + "}";
    };
    CHECK(parse_json(nested(k_max_json_depth)).is_object());
    CHECK(parse_json(nested(k_max_json_depth + 1)).is_discarded());
    // 100,000 levels (about 200 KB) once took the daemon's stack when written
    // back out; now they are not JSON to it.
    CHECK(parse_json(nested(100'000)).is_discarded());
    // Brackets inside strings do not count, escaped quotes included.
    const std::string deep_text = "\"\\\"" + std::string(10'000, '[') + "\"";
    CHECK(parse_json(deep_text) == nlohmann::ordered_json("\"" + std::string(10'000, '[')));
    CHECK(parse_json("{\"x\": [1, 2").is_discarded());
    CHECK(parse_json("[[]]]").is_discarded()); // a stray close is the parser's to refuse
}

TEST_CASE("parse_json refuses integers it would turn into floats", "[proto][python_json]") {
    // json.dumps writes 2**64 back as 18446744073709551616; the parser makes
    // it a double (1.8446744073709552e+19): such a text is not taken.
    CHECK(parse_json(R"({"a": 18446744073709551615})")["a"] == 18446744073709551615ULL);
    CHECK(parse_json(R"({"a": -9223372036854775808})")["a"] == INT64_MIN);
    CHECK(parse_json(R"({"a": 18446744073709551616})").is_discarded());
    CHECK(parse_json(R"({"a": -9223372036854775809})").is_discarded());
    CHECK(parse_json(R"([1, 123456789012345678901234567890])").is_discarded());
    // Floats, and digits inside strings, are not integers.
    CHECK(parse_json(R"({"a": 123456789012345678901234567890.5})").is_object());
    CHECK(parse_json(R"({"a": 1e30})").is_object());
    CHECK(
        parse_json(R"({"123456789012345678901234567890": "99999999999999999999999"})").is_object());
    CHECK(python_json_dumps(parse_json(R"({"a": 18446744073709551615, "b": -1})")) ==
          R"({"a": 18446744073709551615, "b": -1})");
}
