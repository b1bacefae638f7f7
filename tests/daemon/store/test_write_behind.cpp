// SPDX-License-Identifier: MIT
#include <string>
#include <thread>

#include "daemon/store/remote/write_behind.hpp"

#include <catch2/catch.hpp>

using namespace pt2cache::daemon::store;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

WriteItem item(const std::string& key, std::size_t size, Clock::time_point at = {}) {
    return WriteItem{key, Blob::copy_of(std::string(size, 'v')), 0, at};
}

WriteBehindOptions small_queue(std::uint64_t capacity) {
    return WriteBehindOptions{
        .capacity_bytes = capacity, .small_limit = 100, .large_aging = 1000ms};
}

} // namespace

TEST_CASE("write-behind queue is bounded in bytes and drops the oldest", "[store][write_behind]") {
    WriteBehindQueue queue(small_queue(1000));
    const auto t0 = Clock::now();
    CHECK(queue.push(item("a", 299, t0)).dropped == 0); // 300 bytes with its key
    CHECK(queue.push(item("b", 299, t0 + 1ms)).dropped == 0);
    CHECK(queue.push(item("c", 299, t0 + 2ms)).dropped == 0);
    CHECK(queue.bytes() == 900);
    const auto pushed = queue.push(item("d", 299, t0 + 3ms));
    CHECK(pushed.accepted);
    CHECK(pushed.dropped == 1);
    CHECK(queue.size() == 3);
    CHECK(queue.pop(Clock::now())->key == "b"); // "a", the oldest, is gone

    SECTION("an entry larger than the whole queue is dropped itself") {
        const auto huge = queue.push(item("h", 2000));
        CHECK_FALSE(huge.accepted);
        CHECK(huge.dropped == 1);
        CHECK(queue.size() == 2);
    }
    SECTION("several old entries make room for a big one") {
        CHECK(queue.push(item("e", 899, t0 + 4ms)).dropped == 2);
        CHECK(queue.size() == 1);
    }
}

TEST_CASE("write-behind queue serves small entries before large ones", "[store][write_behind]") {
    WriteBehindQueue queue(small_queue(1 << 20));
    const auto now = Clock::now();
    queue.push(item("large", 500, now));
    queue.push(item("small1", 10, now + 1ms));
    queue.push(item("small2", 10, now + 2ms));
    CHECK(queue.pop(Clock::now())->key == "small1");
    CHECK(queue.pop(Clock::now())->key == "small2");
    CHECK(queue.pop(Clock::now())->key == "large");
}

TEST_CASE("write-behind queue does not starve an aged large entry", "[store][write_behind]") {
    WriteBehindQueue queue(small_queue(1 << 20));
    const auto now = Clock::now();
    queue.push(item("large", 500, now - 2s));
    queue.push(item("small", 10, now));
    CHECK(queue.pop(Clock::now())->key == "large");
}

TEST_CASE("write-behind queue requeue, erase, drain, idle", "[store][write_behind]") {
    WriteBehindQueue queue(small_queue(1000));
    queue.push(item("a", 9));
    queue.push(item("b", 9));
    auto first = queue.pop(Clock::now());
    REQUIRE(first);
    CHECK_FALSE(queue.wait_idle(Clock::now() + 10ms)); // "b" queued, "a" in flight
    CHECK(queue.requeue(std::move(*first)));
    CHECK(queue.pop(Clock::now())->key == "a"); // back at the head
    queue.finished("a");
    CHECK(queue.erase("b") == 1);
    CHECK(queue.wait_idle(Clock::now() + 10ms));
    queue.push(item("c", 9));
    queue.push(item("d", 9));
    CHECK(queue.drain().size() == 2);
    CHECK(queue.bytes() == 0);

    SECTION("requeue without room gives up") {
        WriteBehindQueue tight(small_queue(20));
        tight.push(item("x", 9));
        auto popped = tight.pop(Clock::now());
        tight.push(item("y", 9));
        tight.push(item("z", 9)); // 20 bytes: full
        CHECK_FALSE(tight.requeue(std::move(*popped)));
        CHECK(tight.size() == 2);
    }
}

TEST_CASE("write-behind queue waits are bounded and wakeable",
          "[store][write_behind][concurrency]") {
    WriteBehindQueue queue;
    const auto started = Clock::now();
    CHECK_FALSE(queue.pop(started + 30ms));
    CHECK(Clock::now() - started >= 30ms);

    std::thread pusher([&] {
        std::this_thread::sleep_for(20ms);
        queue.push(item("late", 1));
    });
    CHECK(queue.pop(Clock::now() + 5s)->key == "late");
    pusher.join();
    queue.finished("late");

    std::thread closer([&] {
        std::this_thread::sleep_for(20ms);
        queue.close();
    });
    const auto before_close = Clock::now();
    CHECK_FALSE(queue.pop(before_close + 5s));
    CHECK(Clock::now() - before_close < 2s);
    closer.join();
}

TEST_CASE("write-behind queue keeps one key's writes in order", "[store][write_behind]") {
    WriteBehindQueue queue(small_queue(1 << 20));
    const auto now = Clock::now();
    SECTION("a push replaces the key's queued write, even in the other lane") {
        queue.push(item("k", 500, now)); // large lane
        const auto pushed = queue.push(item("k", 3, now + 1ms));
        CHECK(pushed.superseded == 1);
        CHECK(queue.size() == 1);
        auto popped = queue.pop(Clock::now());
        REQUIRE(popped);
        CHECK(popped->value.size() == 3);
    }
    SECTION("a key in flight is passed over until its write is over") {
        queue.push(item("k", 500, now));
        auto old = queue.pop(Clock::now());
        REQUIRE(old);
        queue.push(item("k", 3, now + 1ms)); // newer, and small: served first before
        queue.push(item("other", 3, now + 2ms));
        CHECK(queue.pop(Clock::now())->key == "other");
        queue.finished("other");
        CHECK_FALSE(queue.pop(Clock::now() + 20ms)); // "k" waits for its old write
        std::thread writer([&] {
            std::this_thread::sleep_for(20ms);
            queue.finished("k");
        });
        auto newer = queue.pop(Clock::now() + 5s); // woken by finished()
        writer.join();
        REQUIRE(newer);
        CHECK(newer->value.size() == 3);
    }
    SECTION("a failed write behind a newer one of its key is dropped") {
        queue.push(item("k", 500, now));
        auto old = queue.pop(Clock::now());
        REQUIRE(old);
        queue.push(item("k", 3, now + 1ms));
        CHECK(queue.requeue(std::move(*old))); // handled: nothing of it to write
        CHECK(queue.size() == 1);
        CHECK(queue.pop(Clock::now())->value.size() == 3);
    }
    SECTION("a failed write of a key erased while in flight is dropped") {
        queue.push(item("k", 5, now));
        auto old = queue.pop(Clock::now());
        REQUIRE(old);
        CHECK(queue.erase("k") == 0);
        CHECK_FALSE(queue.wait_settled("k", Clock::now() + 10ms));
        CHECK(queue.requeue(std::move(*old)));
        CHECK(queue.size() == 0);
        CHECK(queue.wait_settled("k", Clock::now()));
        CHECK(queue.wait_idle(Clock::now()));
    }
}
