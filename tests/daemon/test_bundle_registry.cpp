// SPDX-License-Identifier: MIT
// BundleRegistry's limits (daemon/bundles.hpp): open tokens, bytes per
// bundle and in all, with small limits.
#include <chrono>
#include <string>
#include <thread>

#include "daemon/bundles.hpp"

#include <catch2/catch.hpp>

using namespace pt2cache::daemon;
using namespace std::chrono_literals;

TEST_CASE("opening past the limit drops the bundle idle longest", "[bundles]") {
    BundleRegistry registry(600s,
                            BundleLimits{.open = 3, .bundle_bytes = 1000, .total_bytes = 10'000});
    const auto first = registry.open("a", false);
    std::this_thread::sleep_for(2ms);
    const auto second = registry.open("b", false);
    REQUIRE(registry.add(second, "x.best_config", "{}"));
    const auto bytes_of_second = registry.bytes();
    CHECK(bytes_of_second > 0);
    std::this_thread::sleep_for(2ms);
    const auto third = registry.open("c", false);
    std::this_thread::sleep_for(2ms);
    CHECK(registry.touch(first)); // now "b" is the one idle longest
    const auto fourth = registry.open("d", false);
    CHECK(registry.size() == 3);
    CHECK_FALSE(registry.touch(second));
    CHECK(registry.bytes() == 0); // its bytes went with it
    CHECK((registry.touch(first) && registry.touch(third) && registry.touch(fourth)));
    CHECK(registry.refusals().dropped == 1);
}

TEST_CASE("a bundle past its byte limit collects nothing more", "[bundles]") {
    BundleRegistry registry(600s,
                            BundleLimits{.open = 10, .bundle_bytes = 100, .total_bytes = 150});
    const auto token = registry.open("k", false);
    const std::string thirty(30, 'j');
    REQUIRE(registry.add(token, "a", thirty));
    REQUIRE(registry.add(token, "a", thirty)); // replaced, not added
    CHECK(registry.bytes() == 31);
    REQUIRE(registry.add(token, "b", thirty));
    REQUIRE(registry.add(token, "c", thirty)); // 93 bytes
    CHECK(registry.refusals().overflowed == 0);
    CHECK(registry.add(token, "d", thirty)); // 124 > 100: overflows
    CHECK(registry.bytes() == 0);
    CHECK(registry.add(token, "e", "1"));
    CHECK(registry.refusals().overflowed == 1);
    const auto closed = registry.close(token);
    REQUIRE(closed);
    CHECK(closed->entries.empty());

    SECTION("all bundles together") {
        const auto one = registry.open("1", false);
        const auto two = registry.open("2", false);
        REQUIRE(registry.add(one, "a", std::string(90, 'x')));
        REQUIRE(registry.add(two, "a", std::string(50, 'x'))); // 91 + 51 = 142
        CHECK(registry.add(two, "b", std::string(20, 'x')));   // would be 163 > 150
        CHECK(registry.refusals().overflowed == 2);
        CHECK(registry.bytes() == 91);
        CHECK(registry.close(one)->entries.size() == 1);
        CHECK(registry.close(two)->entries.empty());
        CHECK(registry.bytes() == 0);
    }
}

TEST_CASE("expired bundles give their bytes back", "[bundles]") {
    BundleRegistry registry(1s);
    const auto token = registry.open("k", false);
    REQUIRE(registry.add(token, "a", "{}"));
    CHECK(registry.bytes() == 3);
    CHECK(registry.expire(std::chrono::steady_clock::now() + 2s) == 1);
    CHECK(registry.bytes() == 0);
}
