// SPDX-License-Identifier: MIT
#include "config/redis_url.hpp"

#include <catch2/catch.hpp>
#include <fmt/core.h>

using namespace pt2cache::config;

TEST_CASE("redis:// URLs with every part", "[config][redis_url]") {
    auto url = parse_redis_url("redis://user:pw@h:7000/3");
    REQUIRE(url);
    CHECK(url->host == "h");
    CHECK(url->port == 7000);
    CHECK(url->username == "user");
    CHECK(url->password == "pw");
    CHECK(url->db == 3);
    CHECK(url->unix_socket.empty());
}

TEST_CASE("redis:// URLs with parts left out", "[config][redis_url]") {
    SECTION("password only") {
        auto url = parse_redis_url("redis://:pw@h");
        REQUIRE(url);
        CHECK(url->host == "h");
        CHECK(url->port == 6379);
        CHECK(url->username.empty());
        CHECK(url->password == "pw");
        CHECK(url->db == 0);
    }
    SECTION("host only, trailing slash") {
        auto url = parse_redis_url("redis://cache.example.com/");
        REQUIRE(url);
        CHECK(url->host == "cache.example.com");
        CHECK(url->port == 6379);
        CHECK(url->username.empty());
        CHECK(url->password.empty());
        CHECK(url->db == 0);
    }
    SECTION("user name without password") {
        auto url = parse_redis_url("redis://alice@h:1");
        REQUIRE(url);
        CHECK(url->username == "alice");
        CHECK(url->password.empty());
        CHECK(url->port == 1);
    }
    SECTION("IPv6 host and db as a parameter") {
        auto url = parse_redis_url("redis://[::1]:6380?db=5");
        REQUIRE(url);
        CHECK(url->host == "::1");
        CHECK(url->port == 6380);
        CHECK(url->db == 5);
    }
    SECTION("percent-encoded credentials") {
        auto url = parse_redis_url("redis://us%40er:p%3Aw%2F@h");
        REQUIRE(url);
        CHECK(url->username == "us@er");
        CHECK(url->password == "p:w/");
    }
}

TEST_CASE("rediss:// URLs ask for TLS", "[config][redis_url]") {
    auto url = parse_redis_url("rediss://user:pw@cache.example.com:6380/2");
    REQUIRE(url);
    CHECK(url->tls);
    CHECK(url->host == "cache.example.com");
    CHECK(url->port == 6380);
    CHECK(url->username == "user");
    CHECK(url->db == 2);
    CHECK(format_redis_url(*url) == "rediss://user:pw@cache.example.com:6380/2");
    CHECK(mask_redis_url("rediss://user:pw@h") == "rediss://user:***@h");

    auto plain = parse_redis_url("redis://h");
    REQUIRE(plain);
    CHECK_FALSE(plain->tls);
    CHECK(format_redis_url(*plain) == "redis://h:6379");
    auto v6 = parse_redis_url("rediss://[::1]");
    REQUIRE(v6);
    CHECK(format_redis_url(*v6) == "rediss://[::1]:6379");
}

TEST_CASE("unix:// URLs", "[config][redis_url]") {
    auto url = parse_redis_url("unix:///run/r.sock");
    REQUIRE(url);
    CHECK(url->unix_socket == "/run/r.sock");
    CHECK(url->host.empty());
    CHECK(url->db == 0);

    auto with_db = parse_redis_url("unix://:secret@/run/r.sock?db=2");
    REQUIRE(with_db);
    CHECK(with_db->unix_socket == "/run/r.sock");
    CHECK(with_db->password == "secret");
    CHECK(with_db->db == 2);
}

TEST_CASE("bad Redis URLs name the problem and the accepted forms", "[config][redis_url]") {
    struct Row {
        std::string_view url;
        std::string_view reason;
        std::string_view shown; // the URL as the message repeats it
    };
    const Row rows[] = {
        {"http://h", "unsupported scheme \"http\"", "http://h"},
        {"redis+tls://h", "unsupported scheme \"redis+tls\"", "redis+tls://h"},
        {"rediss://", "missing host", "rediss://"},
        {"localhost:6379", "not a URL", "localhost:6379"},
        {"redis://", "missing host", "redis://"},
        {"redis://:pw@:80", "missing host", "redis://:***@:80"},
        {"redis://h:0", "bad port \"0\" (1 to 65535)", "redis://h:0"},
        {"redis://h:65536", "bad port \"65536\" (1 to 65535)", "redis://h:65536"},
        {"redis://h:x", "bad port \"x\" (1 to 65535)", "redis://h:x"},
        {"redis://h:", "empty port", "redis://h:"},
        {"redis://h/zero", "bad database number \"zero\"", "redis://h/zero"},
        {"redis://h/-1", "bad database number \"-1\"", "redis://h/-1"},
        {"redis://h?db=x", "bad database number \"x\"", "redis://h?db=x"},
        {"redis://h?db", "URL parameter \"db\" needs a value: db=N", "redis://h?db"},
        {"redis://[::1", "unterminated [IPv6 address]", "redis://[::1"},
        {"redis://u:p%4@h", "bad percent-encoding in the user name or password", "redis://u:***@h"},
        {"unix://run/r.sock",
         "a unix:// URL takes no host: write unix:///absolute/path (three slashes)",
         "unix://run/r.sock"},
        {"unix://", "missing socket path", "unix://"},
        // A password holding an unencoded '/' or '?': neither its tail nor
        // its head is shown (it was parsed as a port: bad port "s3cr").
        {"redis://user:s3cr/et@host:6379",
         "malformed URL, or a user name or password holding '/' or '?' (percent-encode them: "
         "%2F, %3F)",
         "redis://user:***@host:6379"},
        {"redis://:s3cr?et@host",
         "malformed URL, or a user name or password holding '/' or '?' (percent-encode them: "
         "%2F, %3F)",
         "redis://:***@host"},
        {"redis://%00:pw@h", "a NUL byte (%00) in the user name or password", "redis://%00:***@h"},
        {"redis://u:p%00w@h", "a NUL byte (%00) in the user name or password", "redis://u:***@h"},
    };
    for (const auto& row : rows) {
        INFO(row.url);
        auto url = parse_redis_url(row.url);
        REQUIRE_FALSE(url);
        CHECK(url.error() == fmt::format("{} in \"{}\"; expected redis[s]://[user:password@]"
                                         "host[:port][/db] (rediss: TLS) or unix:///path[?db=N]",
                                         row.reason, row.shown));
    }
}

TEST_CASE("an '@' in the query is not a password's end", "[config][redis_url]") {
    auto url = parse_redis_url("redis://host:6379/0?client_name=me@x");
    REQUIRE(url);
    CHECK(url->host == "host");
    CHECK(url->db == 0);
    auto tls = parse_redis_url("rediss://host:6380?ssl_ca_certs=/etc/ca@x.pem");
    REQUIRE(tls);
    CHECK(tls->port == 6380);
    // A password that holds a '/' and whose head looks like a port: the
    // database number would quote the tail; nothing of it is shown.
    auto leaky = parse_redis_url("redis://user:123/45@host");
    REQUIRE_FALSE(leaky);
    CHECK(leaky.error().find("45") == std::string::npos);
    CHECK(leaky.error().find("123") == std::string::npos);
}

TEST_CASE("a list splits only before a scheme", "[config][redis_url]") {
    auto list = parse_redis_url_list("redis://h1:1, redis://h2:2\trediss://h3:3,,");
    REQUIRE(list);
    CHECK(list->size() == 3);
    // A ',' or ' ' inside an unencoded password: its head was shown.
    for (const std::string text : {"redis://:pa,ss@h1:6379", "redis://:pa ss@h1:6379"}) {
        auto parsed = parse_redis_url_list(text);
        if (parsed) {
            CHECK(parsed->size() == 1);
        } else {
            CHECK(parsed.error().find("pa") == std::string::npos);
        }
    }
}

TEST_CASE("redis-py's client-side URL parameters are ignored", "[config][redis_url]") {
    auto url = parse_redis_url("unix:///run/r.sock?protocol=2&db=3&socket_timeout=5");
    REQUIRE(url);
    CHECK(url->unix_socket == "/run/r.sock");
    CHECK(url->db == 3);
}

TEST_CASE("mask_redis_url hides only the password", "[config][redis_url]") {
    CHECK(mask_redis_url("redis://user:pw@h:7000/3") == "redis://user:***@h:7000/3");
    CHECK(mask_redis_url("redis://:pw@h") == "redis://:***@h");
    CHECK(mask_redis_url("redis://alice@h") == "redis://alice@h");
    CHECK(mask_redis_url("redis://h:6379/0") == "redis://h:6379/0");
    CHECK(mask_redis_url("unix://:s3cret@/run/r.sock?db=1") == "unix://:***@/run/r.sock?db=1");
    CHECK(mask_redis_url("unix:///run/r.sock") == "unix:///run/r.sock");
    CHECK(mask_redis_url("not a url") == "not a url");
    // The last '@' ends the password, whatever it holds.
    CHECK(mask_redis_url("redis://u:s3cr/et@h:1") == "redis://u:***@h:1");
    CHECK(mask_redis_url("redis://:a?b@c@h") == "redis://:***@h");
    CHECK(mask_redis_url("unix:///run/a@b.sock") == "unix:///run/a@b.sock");
    CHECK(mask_redis_url("unix:///redis://u:p%4@hs.sock") == "unix:///redis://u:p%4@hs.sock");
    CHECK(mask_redis_url("redis://h:6379/0?x@y") == "redis://h:6379/0?x@y");
}
