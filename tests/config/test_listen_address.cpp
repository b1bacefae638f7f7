// SPDX-License-Identifier: MIT
#include "config/config.hpp"
#include "config/listen_address.hpp"
#include "tests/config/helpers.hpp"

#include <catch2/catch.hpp>

using namespace pt2cache::config;
using pt2cache::tests::ConfigFixture;

TEST_CASE("listen addresses: loopback and explicit addresses", "[config][metrics]") {
    auto v4 = parse_listen_address("127.0.0.1:9464");
    REQUIRE(v4);
    CHECK(v4->host == "127.0.0.1");
    CHECK(v4->port == 9464);
    CHECK(v4->loopback);
    CHECK_FALSE(v4->ipv6);

    auto localhost = parse_listen_address("localhost:1");
    REQUIRE(localhost);
    CHECK(localhost->host == "127.0.0.1");
    CHECK(localhost->loopback);

    auto v6 = parse_listen_address("[::1]:65535");
    REQUIRE(v6);
    CHECK(v6->host == "::1");
    CHECK(v6->ipv6);
    CHECK(v6->loopback);

    auto lan = parse_listen_address("10.1.2.3:9464");
    REQUIRE(lan);
    CHECK_FALSE(lan->loopback);
    auto lan6 = parse_listen_address("[fd00::5]:9464");
    REQUIRE(lan6);
    CHECK_FALSE(lan6->loopback);
}

TEST_CASE("listen addresses: wildcards, names and bad ports are refused", "[config][metrics]") {
    for (const char* text : {"0.0.0.0:9464", "[::]:9464", "[0:0::0]:9464"}) {
        INFO(text);
        auto parsed = parse_listen_address(text);
        REQUIRE_FALSE(parsed);
        CHECK_THAT(parsed.error(), Catch::Contains("every interface"));
    }
    for (const char* text : {"example.com:9464", "127.0.0.1", "127.0.0.1:", "127.0.0.1:0",
                             "127.0.0.1:65536", "127.0.0.1:94x4", ":9464", "::1:9464", "[::1]9464",
                             "[::1", "[127.0.0.1]:9464", "1.2.3:9464"}) {
        INFO(text);
        CHECK_FALSE(parse_listen_address(text));
    }
}

TEST_CASE("metrics.listen is checked when loaded", "[config][metrics]") {
    ConfigFixture fixture;
    auto off = fixture.load("");
    REQUIRE(off);
    CHECK(off->config.metrics_listen.empty());

    auto on = fixture.load("[metrics]\nlisten = \"127.0.0.1:9464\"\n");
    REQUIRE(on);
    CHECK(on->config.metrics_listen == "127.0.0.1:9464");

    auto wildcard = fixture.load("[metrics]\nlisten = \"0.0.0.0:9464\"\n");
    REQUIRE_FALSE(wildcard);
    CHECK_THAT(wildcard.error().message, Catch::Contains("metrics.listen"));
}
