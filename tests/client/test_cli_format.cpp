// SPDX-License-Identifier: MIT
//
// client/cli/format.cpp: the pure text helpers of the `pt2cache` command.
#include "client/cli/format.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

using namespace pt2cache::client::cli;

TEST_CASE("human_bytes", "[cli][format]") {
    CHECK(human_bytes(0) == "0 B");
    CHECK(human_bytes(1023) == "1023 B");
    CHECK(human_bytes(1024) == "1.0 KiB");
    CHECK(human_bytes(1536) == "1.5 KiB");
    CHECK(human_bytes(512ull << 20) == "512.0 MiB");
    CHECK(human_bytes(10ull << 30) == "10.0 GiB");
}

TEST_CASE("human_duration", "[cli][format]") {
    CHECK(human_duration(0.4) == "0s");
    CHECK(human_duration(42) == "42s");
    CHECK(human_duration(187) == "3m 07s");
    CHECK(human_duration(2 * 3600 + 3 * 60 + 7) == "2h 03m 07s");
    CHECK(human_duration(4 * 86400 + 2 * 3600 + 180) == "4d 02h 03m");
}

TEST_CASE("printable escapes what a terminal would mangle", "[cli][format]") {
    CHECK(printable("plain-key_1") == "plain-key_1");
    CHECK(printable(std::string("a\0b", 3)) == "a\\x00b");
    CHECK(printable("tab\there\n") == "tab\\x09here\\x0a");
    CHECK(printable("back\\slash") == "back\\x5cslash");
    CHECK(printable("\xff") == "\\xff");
}

TEST_CASE("render_stats shows active namespace and tier rows", "[cli][format]") {
    const auto stats = nlohmann::json::parse(R"({
        "version": "0.1.0", "pid": 1234, "socket": "/run/user/1/pt2cache/pt2cached.sock",
        "cache_dir": "/home/u/.cache/pt2cache", "uptime_s": 3725.5,
        "tiers": {"memory": {"bytes": 3072, "capacity": 268435456, "count": 2}, "remote": null},
        "daemon": {"connections_accepted": 3, "requests": 42},
        "namespaces": {
            "fx-graph": {
                "memory": {"hits": 5, "misses": 2, "puts": 3, "bytes_in": 2048,
                           "bytes_out": 0, "evictions": 0, "corrupt": 0, "errors": 0},
                "disk": {"hits": 0, "misses": 0, "puts": 0, "bytes_in": 0,
                         "bytes_out": 0, "evictions": 0, "corrupt": 0, "errors": 0}
            }
        }
    })");
    const std::string text = render_stats(stats);
    CHECK_THAT(text, Catch::StartsWith("pt2cached 0.1.0, pid 1234, up 1h 02m 05s\n"
                                       "socket     /run/user/1/pt2cache/pt2cached.sock\n"
                                       "cache dir  /home/u/.cache/pt2cache\n"));
    CHECK_THAT(text, Catch::Contains("memory            2     3.0 KiB   256.0 MiB"));
    CHECK_THAT(text, Catch::Contains("remote          off"));
    CHECK_THAT(text, Catch::Contains("connections_accepted  3"));
    CHECK_THAT(text, Catch::Contains("requests              42"));
    CHECK_THAT(text, Catch::Contains("NAMESPACE  TIER    HITS  MISSES  PUTS  BYTES IN"));
    CHECK_THAT(text, Catch::Contains("fx-graph   memory     5       2     3   2.0 KiB"));
    CHECK_THAT(text, !Catch::Contains("fx-graph   disk"));

    const auto idle = nlohmann::json::parse(R"({"uptime_s": 1, "daemon": {}, "namespaces": {}})");
    CHECK_THAT(render_stats(idle), Catch::Contains("no cache activity yet"));
    CHECK_THROWS_AS(render_stats(nlohmann::json::parse("[]")), nlohmann::json::exception);
}

TEST_CASE("render_stats shows the disk write queue in async mode", "[cli][format]") {
    auto stats = nlohmann::json::parse(R"({
        "version": "0.1.0", "pid": 1, "namespaces": {},
        "tiers": {"disk": {"bytes": 2048, "count": 3, "capacity": 1073741824,
                           "write_queue": {"entries": 2, "bytes": 1536, "capacity": 67108864,
                                           "oldest_age_s": 0.75}}}})");
    const auto text = render_stats(stats);
    CHECK(text.find("disk              3     2.0 KiB     1.0 GiB\n"
                    "          write queue 2 entries, 1.5 KiB of 64.0 MiB, oldest 0.8 s\n") !=
          std::string::npos);
    stats["tiers"]["disk"].erase("write_queue");
    CHECK(render_stats(stats).find("write queue") == std::string::npos);
}
