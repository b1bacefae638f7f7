// SPDX-License-Identifier: MIT
//
// The C API (client/pt2cache.h): return codes, ownership of values, NULLs.
#include <cstring>
#include <string>

#include "client/pt2cache.h"
#include "tests/client/helpers.hpp"

#include <catch2/catch.hpp>

using pt2cache::tests::CapiHandle;
using pt2cache::tests::DaemonProcess;

namespace {} // namespace

TEST_CASE("C API: NULL arguments are PT2CACHE_E_INVALID", "[capi]") {
    CapiHandle handle("/nonexistent/pt2cache.sock");
    REQUIRE(handle.client != nullptr);
    pt2cache_client* c = handle.client;
    void* value = reinterpret_cast<void*>(0x1);
    size_t len = 7;

    CHECK(pt2cache_get(nullptr, "pgo", "k", 1, &value, &len) == PT2CACHE_E_INVALID);
    CHECK(value == nullptr);
    CHECK(len == 0);
    CHECK(pt2cache_get(c, nullptr, "k", 1, &value, &len) == PT2CACHE_E_INVALID);
    CHECK(pt2cache_get(c, "pgo", nullptr, 1, &value, &len) == PT2CACHE_E_INVALID);
    CHECK(pt2cache_get(c, "pgo", "k", 1, nullptr, &len) == PT2CACHE_E_INVALID);
    CHECK(pt2cache_get(c, "pgo", "k", 1, &value, nullptr) == PT2CACHE_E_INVALID);
    CHECK(std::string(pt2cache_last_error(c)).find("NULL") != std::string::npos);
    CHECK(pt2cache_put(nullptr, "pgo", "k", 1, "v", 1, 0, 0) == PT2CACHE_E_INVALID);
    CHECK(pt2cache_put(c, nullptr, "k", 1, "v", 1, 0, 0) == PT2CACHE_E_INVALID);
    CHECK(pt2cache_put(c, "pgo", nullptr, 1, "v", 1, 0, 0) == PT2CACHE_E_INVALID);
    CHECK(pt2cache_put(c, "pgo", "k", 1, nullptr, 1, 0, 0) == PT2CACHE_E_INVALID);
    CHECK(pt2cache_exists(nullptr, "pgo", "k", 1) == PT2CACHE_E_INVALID);
    CHECK(pt2cache_exists(c, "pgo", nullptr, 1) == PT2CACHE_E_INVALID);
    CHECK(pt2cache_del(nullptr, "pgo", "k", 1) == PT2CACHE_E_INVALID);
    CHECK(pt2cache_del(c, nullptr, "k", 1) == PT2CACHE_E_INVALID);
    CHECK(pt2cache_ping(nullptr, nullptr) == PT2CACHE_E_INVALID);
    CHECK(pt2cache_last_error(nullptr) != nullptr);
    pt2cache_close(nullptr);
    pt2cache_free(nullptr);
}

TEST_CASE("C API: an absent daemon is PT2CACHE_E_UNREACHABLE", "[capi]") {
    CapiHandle handle("/nonexistent/pt2cache.sock");
    void* value = nullptr;
    size_t len = 0;
    CHECK(pt2cache_get(handle.client, "pgo", "k", 1, &value, &len) == PT2CACHE_E_UNREACHABLE);
    CHECK(value == nullptr);
    CHECK(std::string(pt2cache_last_error(handle.client)).find("/nonexistent/pt2cache.sock") !=
          std::string::npos);
    CHECK(pt2cache_put(handle.client, "pgo", "k", 1, "v", 1, 0, 0) == PT2CACHE_E_UNREACHABLE);
    CHECK(pt2cache_ping(handle.client, nullptr) == PT2CACHE_E_UNREACHABLE);
}

TEST_CASE("C API: round trip", "[capi]") {
    PT2CACHE_REQUIRE_DAEMON();
    DaemonProcess daemon;
    CapiHandle handle(daemon.socket_path().c_str());
    pt2cache_client* c = handle.client;
    const char key[] = {'k', '\0', 'y'};
    const std::string data = "compiled artifact";
    void* value = nullptr;
    size_t len = 0;

    CHECK(pt2cache_get(c, "fx-graph", key, sizeof key, &value, &len) == PT2CACHE_MISS);
    CHECK(value == nullptr);
    CHECK(std::string(pt2cache_last_error(c)).empty());
    CHECK(pt2cache_exists(c, "fx-graph", key, sizeof key) == PT2CACHE_MISS);

    REQUIRE(pt2cache_put(c, "fx-graph", key, sizeof key, data.data(), data.size(), 0, 0) ==
            PT2CACHE_OK);
    CHECK(pt2cache_put(c, "fx-graph", key, sizeof key, "other", 5, 0, PT2CACHE_ONLY_IF_ABSENT) ==
          PT2CACHE_MISS);
    CHECK(pt2cache_exists(c, "fx-graph", key, sizeof key) == PT2CACHE_OK);

    REQUIRE(pt2cache_get(c, "fx-graph", key, sizeof key, &value, &len) == PT2CACHE_OK);
    REQUIRE(value != nullptr);
    CHECK(std::string(static_cast<const char*>(value), len) == data);
    pt2cache_free(value);

    // An empty value still comes back as a non-NULL buffer.
    REQUIRE(pt2cache_put(c, "fx-graph", "empty", 5, nullptr, 0, 60'000, 0) == PT2CACHE_OK);
    REQUIRE(pt2cache_get(c, "fx-graph", "empty", 5, &value, &len) == PT2CACHE_OK);
    CHECK(value != nullptr);
    CHECK(len == 0);
    pt2cache_free(value);

    uint64_t rtt = ~uint64_t{0};
    CHECK(pt2cache_ping(c, &rtt) == PT2CACHE_OK);
    CHECK(rtt < 10'000'000);

    CHECK(pt2cache_del(c, "fx-graph", key, sizeof key) == PT2CACHE_OK);
    CHECK(pt2cache_del(c, "fx-graph", key, sizeof key) == PT2CACHE_MISS);

    // The daemon's rules come back as PT2CACHE_E_SERVER.
    CHECK(pt2cache_get(c, "Bad Namespace", "k", 1, &value, &len) == PT2CACHE_E_SERVER);
    CHECK(pt2cache_put(c, "pgo", "k", 0, "v", 1, 0, 0) == PT2CACHE_E_SERVER);
    CHECK(std::string(pt2cache_last_error(c)).find("key") != std::string::npos);
}
