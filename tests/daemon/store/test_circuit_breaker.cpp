// SPDX-License-Identifier: MIT
#include "daemon/store/remote/circuit_breaker.hpp"

#include <catch2/catch.hpp>

using namespace pt2cache::daemon::store;
using namespace std::chrono_literals;
using Admission = CircuitBreaker::Admission;
using State = CircuitBreaker::State;

namespace {

BreakerOptions options() {
    return BreakerOptions{.failure_threshold = 3, .base_cooldown = 100ms, .max_cooldown = 1000ms};
}

} // namespace

TEST_CASE("breaker opens after consecutive failures", "[store][breaker]") {
    CircuitBreaker breaker(options());
    const auto t0 = CircuitBreaker::Clock::now();
    CHECK(breaker.admit(t0) == Admission::allowed);
    CHECK_FALSE(breaker.failure(Admission::allowed, t0));
    CHECK_FALSE(breaker.failure(Admission::allowed, t0));
    const auto until = breaker.failure(Admission::allowed, t0);
    REQUIRE(until);
    CHECK(*until == t0 + 100ms);
    CHECK(breaker.snapshot().state == State::open);
    CHECK(breaker.admit(t0 + 50ms) == Admission::refused);

    SECTION("a success in between resets the count") {
        CircuitBreaker other(options());
        other.failure(Admission::allowed, t0);
        other.failure(Admission::allowed, t0);
        other.success(Admission::allowed);
        CHECK_FALSE(other.failure(Admission::allowed, t0));
        CHECK(other.snapshot().state == State::closed);
    }
    SECTION("after the cool-down one probe goes through") {
        CHECK(breaker.admit(t0 + 100ms) == Admission::probe);
        CHECK(breaker.snapshot().state == State::half_open);
        CHECK(breaker.admit(t0 + 101ms) == Admission::refused);
        SECTION("its success closes the breaker") {
            breaker.success(Admission::probe);
            CHECK(breaker.snapshot().state == State::closed);
            CHECK(breaker.snapshot().trips == 0);
            CHECK(breaker.admit(t0 + 102ms) == Admission::allowed);
        }
        SECTION("its failure reopens it for twice as long") {
            const auto again = breaker.failure(Admission::probe, t0 + 200ms);
            REQUIRE(again);
            CHECK(*again == t0 + 400ms);
            CHECK(breaker.admit(t0 + 399ms) == Admission::refused);
            CHECK(breaker.admit(t0 + 400ms) == Admission::probe);
        }
        SECTION("a released probe hands the slot on") {
            breaker.release(Admission::probe);
            CHECK(breaker.admit(t0 + 102ms) == Admission::probe);
        }
        SECTION("late failures of other requests do not reopen it") {
            CHECK_FALSE(breaker.failure(Admission::allowed, t0 + 101ms));
            CHECK(breaker.snapshot().state == State::half_open);
        }
    }
    SECTION("late failures do not extend a suspension") {
        CHECK_FALSE(breaker.failure(Admission::allowed, t0 + 50ms));
        CHECK(breaker.snapshot().open_until == t0 + 100ms);
    }
}

TEST_CASE("breaker cool-downs double up to the maximum", "[store][breaker]") {
    CircuitBreaker breaker(options());
    CHECK(breaker.cooldown(0) == 100ms);
    CHECK(breaker.cooldown(1) == 200ms);
    CHECK(breaker.cooldown(3) == 800ms);
    CHECK(breaker.cooldown(4) == 1000ms);
    CHECK(breaker.cooldown(60) == 1000ms);
}
