// SPDX-License-Identifier: MIT
//
// client::Client against the real pt2cached: every operation, value sizes
// from 0 B to 64 MiB, pipelining and persistence.
#include <algorithm>
#include <chrono>
#include <set>
#include <string>
#include <thread>

#include "client/client.hpp"
#include "proto/frame.hpp"
#include "tests/client/helpers.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

using namespace pt2cache;
using namespace std::chrono_literals;
using client::Bytes;
using tests::DaemonProcess;
using tests::pattern;

TEST_CASE("connect performs the handshake", "[client]") {
    PT2CACHE_REQUIRE_DAEMON();
    DaemonProcess daemon;
    client::Client client(tests::options_for(daemon));
    CHECK_FALSE(client.connected());
    auto ok = client.connect();
    INFO((ok ? std::string() : tests::describe(ok.error())));
    REQUIRE(ok);
    CHECK(client.connected());
    CHECK(client.max_value() == 512ull << 20);
    CHECK(client.socket_path() == daemon.socket_path());
    auto rtt = client.ping();
    REQUIRE(rtt);
    CHECK(rtt->count() >= 0);
}

TEST_CASE("values round-trip at every size", "[client][get][put]") {
    PT2CACHE_REQUIRE_DAEMON();
    DaemonProcess daemon;
    client::Client client(tests::options_for(daemon));
    const std::size_t size = GENERATE(std::size_t{0}, std::size_t{1}, std::size_t{1} << 10,
                                      std::size_t{1} << 20, std::size_t{64} << 20);
    const Bytes value = pattern(size, size);
    const std::string key = "key-" + std::to_string(size);

    auto stored = client.put("fx-graph", key, value);
    INFO((stored ? std::string() : tests::describe(stored.error())));
    REQUIRE(stored);
    CHECK(*stored);

    auto got = client.get("fx-graph", key);
    REQUIRE(got);
    REQUIRE(got->has_value());
    CHECK(got->value().size() == size);
    CHECK(got->value() == value);

    SECTION("a miss is not an error") {
        auto missing = client.get("fx-graph", key + "-absent");
        REQUIRE(missing);
        CHECK_FALSE(missing->has_value());
    }
}

TEST_CASE("keys are binary and namespaces separate", "[client][get][put]") {
    PT2CACHE_REQUIRE_DAEMON();
    DaemonProcess daemon;
    client::Client client(tests::options_for(daemon));
    const std::string key("a\0b\xff\n", 5);
    REQUIRE(client.put("pgo", key, tests::bytes_of("pgo value")).value());
    REQUIRE(client.put("autotune", key, tests::bytes_of("autotune value")).value());
    CHECK(client.get("pgo", key).value() == tests::bytes_of("pgo value"));
    CHECK(client.get("autotune", key).value() == tests::bytes_of("autotune value"));
    const std::string long_key(1024, 'k');
    CHECK(client.put("pgo", long_key, tests::bytes_of("v")).value());
    CHECK(client.get("pgo", long_key).value() == tests::bytes_of("v"));
}

TEST_CASE("only_if_absent stores once", "[client][put]") {
    PT2CACHE_REQUIRE_DAEMON();
    DaemonProcess daemon;
    client::Client client(tests::options_for(daemon));
    client::PutOptions nx;
    nx.only_if_absent = true;
    CHECK(client.put("fx-graph", "k", tests::bytes_of("first"), nx).value() == true);
    CHECK(client.put("fx-graph", "k", tests::bytes_of("second"), nx).value() == false);
    CHECK(client.get("fx-graph", "k").value() == tests::bytes_of("first"));
    // Without the flag, PUT overwrites.
    CHECK(client.put("fx-graph", "k", tests::bytes_of("third")).value() == true);
    CHECK(client.get("fx-graph", "k").value() == tests::bytes_of("third"));
}

TEST_CASE("entries expire after their ttl", "[client][put][ttl]") {
    PT2CACHE_REQUIRE_DAEMON();
    DaemonProcess daemon;
    client::Client client(tests::options_for(daemon));
    client::PutOptions options;
    options.ttl = 300ms;
    REQUIRE(client.put("autotune", "short", tests::bytes_of("v"), options).value());
    REQUIRE(client.put("autotune", "forever", tests::bytes_of("v")).value());
    CHECK(client.get("autotune", "short").value().has_value());
    CHECK(client.exists("autotune", "short").value());
    std::this_thread::sleep_for(600ms);
    CHECK_FALSE(client.get("autotune", "short").value().has_value());
    CHECK_FALSE(client.exists("autotune", "short").value());
    CHECK(client.get("autotune", "forever").value().has_value());
    // An expired entry no longer blocks only_if_absent.
    client::PutOptions nx;
    nx.only_if_absent = true;
    CHECK(client.put("autotune", "short", tests::bytes_of("again"), nx).value());
}

TEST_CASE("exists and remove", "[client][exists][del]") {
    PT2CACHE_REQUIRE_DAEMON();
    DaemonProcess daemon;
    client::Client client(tests::options_for(daemon));
    CHECK_FALSE(client.exists("fx-graph", "k").value());
    CHECK_FALSE(client.remove("fx-graph", "k").value());
    REQUIRE(client.put("fx-graph", "k", tests::bytes_of("v")).value());
    CHECK(client.exists("fx-graph", "k").value());
    CHECK(client.remove("fx-graph", "k").value());
    CHECK_FALSE(client.exists("fx-graph", "k").value());
    CHECK_FALSE(client.get("fx-graph", "k").value().has_value());
    CHECK_FALSE(client.remove("fx-graph", "k").value());
}

TEST_CASE("list pages through a namespace", "[client][list]") {
    PT2CACHE_REQUIRE_DAEMON();
    DaemonProcess daemon;
    client::Client client(tests::options_for(daemon));
    std::set<std::string> keys;
    for (int i = 0; i < 25; ++i) {
        const std::string key = "entry-" + std::to_string(i);
        REQUIRE(client.put("pgo", key, pattern(100 + i, i)).value());
        keys.insert(key);
    }
    REQUIRE(client.put("fx-graph", "elsewhere", tests::bytes_of("v")).value());

    std::set<std::string> seen;
    std::string cursor;
    int pages = 0;
    const auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
    do {
        auto page = client.list("pgo", cursor, 10);
        INFO((page ? std::string() : tests::describe(page.error())));
        REQUIRE(page);
        CHECK(page->entries.size() <= 10);
        for (const auto& entry : page->entries) {
            CHECK(seen.insert(entry.key).second);
            const int i = std::stoi(entry.key.substr(6));
            CHECK(entry.size == static_cast<std::uint64_t>(100 + i));
            CHECK(std::abs(static_cast<std::int64_t>(entry.mtime_ms) - now_ms) < 60'000);
        }
        cursor = page->next_cursor;
        REQUIRE(++pages < 100);
    } while (!cursor.empty());
    CHECK(seen == keys);
    CHECK(pages >= 3);

    auto empty = client.list("autotune");
    REQUIRE(empty);
    CHECK(empty->entries.empty());
    CHECK(empty->next_cursor.empty());
}

TEST_CASE("clear empties one namespace", "[client][clear]") {
    PT2CACHE_REQUIRE_DAEMON();
    DaemonProcess daemon;
    client::Client client(tests::options_for(daemon));
    for (int i = 0; i < 5; ++i) {
        REQUIRE(client.put("autotune", "k" + std::to_string(i), tests::bytes_of("v")).value());
    }
    REQUIRE(client.put("pgo", "kept", tests::bytes_of("v")).value());
    auto removed = client.clear("autotune");
    REQUIRE(removed);
    CHECK(*removed == 5);
    for (int i = 0; i < 5; ++i) {
        CHECK_FALSE(client.get("autotune", "k" + std::to_string(i)).value().has_value());
    }
    CHECK(client.get("pgo", "kept").value().has_value());
    CHECK(client.clear("autotune").value() == 0);
}

TEST_CASE("get_many pipelines and keeps the order", "[client][get_many]") {
    PT2CACHE_REQUIRE_DAEMON();
    DaemonProcess daemon;
    client::Client client(tests::options_for(daemon));
    std::vector<std::string> keys;
    for (int i = 0; i < 100; ++i) {
        keys.push_back("key-" + std::to_string(i));
        if (i % 3 != 0) {
            REQUIRE(
                client.put("fx-graph", keys.back(), pattern(static_cast<std::size_t>(i) * 37, i))
                    .value());
        }
    }
    auto values = client.get_many("fx-graph", keys);
    INFO((values ? std::string() : tests::describe(values.error())));
    REQUIRE(values);
    REQUIRE(values->size() == keys.size());
    for (int i = 0; i < 100; ++i) {
        INFO("key " << i);
        if (i % 3 == 0) {
            CHECK_FALSE((*values)[i].has_value());
        } else {
            REQUIRE((*values)[i].has_value());
            CHECK(*(*values)[i] == pattern(static_cast<std::size_t>(i) * 37, i));
        }
    }
    // More requests than the pipeline window, with long keys, still work.
    std::vector<std::string> many;
    for (int i = 0; i < 2000; ++i) {
        many.push_back(std::string(1000, 'x') + std::to_string(i));
    }
    auto misses = client.get_many("fx-graph", many);
    REQUIRE(misses);
    CHECK(
        std::none_of(misses->begin(), misses->end(), [](const auto& v) { return v.has_value(); }));
    CHECK(client.get_many("fx-graph", {}).value().empty());
    // The connection is still in step.
    CHECK(client.get("fx-graph", "key-1").value() == pattern(37, 1));
}

TEST_CASE("stats_json is a JSON object", "[client][stats]") {
    PT2CACHE_REQUIRE_DAEMON();
    DaemonProcess daemon;
    client::Client client(tests::options_for(daemon));
    REQUIRE(client.put("fx-graph", "k", tests::bytes_of("v")).value());
    REQUIRE(client.get("fx-graph", "k").value());
    auto text = client.stats_json();
    REQUIRE(text);
    const auto stats = nlohmann::json::parse(*text);
    REQUIRE(stats.is_object());
    CHECK(stats.contains("uptime_s"));
    CHECK(stats.contains("namespaces"));
}

TEST_CASE("arguments are checked before sending", "[client][errors]") {
    PT2CACHE_REQUIRE_DAEMON();
    DaemonProcess daemon;
    client::Client client(tests::options_for(daemon));
    REQUIRE(client.connect());

    auto bad_ns = client.get("Not/A/Namespace", "k");
    REQUIRE_FALSE(bad_ns);
    CHECK(bad_ns.error().kind == client::ErrorKind::server);
    CHECK(bad_ns.error().status == client::Status::bad_namespace);

    auto empty_key = client.put("pgo", "", tests::bytes_of("v"));
    REQUIRE_FALSE(empty_key);
    CHECK(empty_key.error().status == client::Status::key_too_long);

    auto long_key = client.exists("pgo", std::string(1025, 'k'));
    REQUIRE_FALSE(long_key);
    CHECK(long_key.error().status == client::Status::key_too_long);

    // None of these cost the connection.
    CHECK(client.connected());
    CHECK(client.ping());
}

TEST_CASE("a value over the daemon's max_value is refused", "[client][put][errors]") {
    PT2CACHE_REQUIRE_DAEMON();
    DaemonProcess daemon({"--set", "daemon.max_value_size=1MiB"});
    client::Client client(tests::options_for(daemon));
    REQUIRE(client.connect());
    CHECK(client.max_value() == 1u << 20);
    CHECK(client.put("pgo", "fits", pattern(1u << 20)).value());
    auto too_large = client.put("pgo", "too-large", pattern((1u << 20) + 1));
    REQUIRE_FALSE(too_large);
    CHECK(too_large.error().kind == client::ErrorKind::server);
    CHECK(too_large.error().status == client::Status::value_too_large);
    CHECK(client.get("pgo", "fits").value() == pattern(1u << 20));
}

TEST_CASE("HELLO announces at most the value a frame carries", "[client][put][errors]") {
    // daemon.max_value_size may be up to 4 GiB - 1 (RESP's bulk length is
    // text), but a PUT frame's length is a u32 that also holds its head.
    PT2CACHE_REQUIRE_DAEMON();
    DaemonProcess daemon({"--set", "daemon.max_value_size=4294967295"});
    client::Client client(tests::options_for(daemon));
    REQUIRE(client.connect());
    CHECK(client.max_value() == proto::k_max_frame_value);
    CHECK(client.max_value() + proto::k_put_overhead == 0xFFFF'FFFFu);
}

TEST_CASE("entries persist across a daemon restart", "[client][persistence]") {
    PT2CACHE_REQUIRE_DAEMON();
    DaemonProcess daemon;
    const Bytes value = pattern(200'000, 7);
    {
        client::Client client(tests::options_for(daemon));
        REQUIRE(client.put("aot-autograd", "persisted", value).value());
    }
    const int status = daemon.restart();
    CHECK(DaemonProcess::describe(status) == "exit status 0");
    client::Client client(tests::options_for(daemon));
    auto got = client.get("aot-autograd", "persisted");
    INFO((got ? std::string() : tests::describe(got.error())));
    REQUIRE(got);
    REQUIRE(got->has_value());
    CHECK(**got == value);
}
