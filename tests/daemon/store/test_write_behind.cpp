// SPDX-License-Identifier: MIT
#include <algorithm>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

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

    SECTION("requeue at the back lets the others go first") {
        WriteBehindQueue behind(small_queue(1000));
        behind.push(item("down", 9)); // a suspended cluster node's key
        behind.push(item("up1", 9));
        behind.push(item("up2", 9));
        auto down = behind.pop(Clock::now());
        REQUIRE(down->key == "down");
        CHECK(behind.requeue(std::move(*down), true));
        for (const char* key : {"up1", "up2", "down"}) {
            auto next = behind.pop(Clock::now());
            REQUIRE(next);
            CHECK(next->key == key);
            behind.finished(key);
        }
    }

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

namespace {

// The queue's policy (write_behind.hpp) written as plainly as possible: lanes
// as vectors searched from end to end. The queue must agree with it on every
// answer, whatever it indexes.
struct ModelQueue {
    struct Item {
        std::string key;
        std::string value;
        Clock::time_point queued_at;
        std::uint64_t bytes() const { return key.size() + value.size(); }
    };
    std::uint64_t capacity;
    std::uint64_t small_limit;
    std::vector<Item> small, large;
    std::vector<std::string> in_flight, erased_in_flight;
    std::uint64_t bytes = 0;

    std::vector<Item>& lane(const Item& item) {
        return item.value.size() <= small_limit ? small : large;
    }
    std::size_t remove_queued(const std::string& key) {
        std::size_t removed = 0;
        for (auto* from : {&small, &large}) {
            for (auto it = from->begin(); it != from->end();) {
                if (it->key == key) {
                    bytes -= it->bytes();
                    it = from->erase(it);
                    ++removed;
                } else {
                    ++it;
                }
            }
        }
        return removed;
    }
    bool flying(const std::string& key) const {
        return std::find(in_flight.begin(), in_flight.end(), key) != in_flight.end();
    }
    WriteBehindQueue::PushResult push(Item item) {
        WriteBehindQueue::PushResult result;
        result.superseded = remove_queued(item.key);
        if (item.bytes() > capacity) {
            result.accepted = false;
            result.dropped = 1;
            return result;
        }
        while (bytes + item.bytes() > capacity && (!small.empty() || !large.empty())) {
            auto* oldest = small.empty() || (!large.empty() &&
                                             large.front().queued_at < small.front().queued_at)
                               ? &large
                               : &small;
            bytes -= oldest->front().bytes();
            oldest->erase(oldest->begin());
            ++result.dropped;
        }
        bytes += item.bytes();
        lane(item).push_back(std::move(item));
        return result;
    }
    std::optional<Item> pop() {
        for (auto* from : {&small, &large}) { // never aged in this test
            for (auto it = from->begin(); it != from->end(); ++it) {
                if (!flying(it->key)) {
                    Item item = std::move(*it);
                    from->erase(it);
                    bytes -= item.bytes();
                    in_flight.push_back(item.key);
                    return item;
                }
            }
        }
        return std::nullopt;
    }
    bool requeue(Item item) {
        const bool erased = std::erase(erased_in_flight, item.key) > 0;
        std::erase(in_flight, item.key);
        const bool newer = std::any_of(small.begin(), small.end(),
                                       [&](const Item& i) { return i.key == item.key; }) ||
                           std::any_of(large.begin(), large.end(),
                                       [&](const Item& i) { return i.key == item.key; });
        if (erased || newer) {
            return true;
        }
        if (bytes + item.bytes() > capacity) {
            return false;
        }
        bytes += item.bytes();
        auto& to = lane(item);
        to.insert(to.begin(), std::move(item));
        return true;
    }
    void finished(const std::string& key) {
        std::erase(in_flight, key);
        std::erase(erased_in_flight, key);
    }
    std::size_t erase(const std::string& key) {
        // Marked once: two DELs of a key in flight leave one mark, which its
        // end clears.
        if (flying(key) && std::find(erased_in_flight.begin(), erased_in_flight.end(), key) ==
                               erased_in_flight.end()) {
            erased_in_flight.push_back(key);
        }
        return remove_queued(key);
    }
};

} // namespace

namespace {
WriteItem delete_of(const std::string& key) {
    WriteItem item;
    item.key = key;
    item.erase = true;
    return item;
}
} // namespace

TEST_CASE("write-behind queue: a queued delete reads as erasing until it is sent",
          "[store][write_behind]") {
    WriteBehindQueue queue(small_queue(1 << 20));
    CHECK_FALSE(queue.erasing("k"));
    SECTION("queued, then in flight, then over") {
        queue.push(item("k", 3));
        queue.push(delete_of("k")); // replaces the queued write: it must not land after
        CHECK(queue.size() == 1);
        CHECK(queue.erasing("k"));
        CHECK_FALSE(queue.erasing("other"));
        auto popped = queue.pop(Clock::now());
        REQUIRE(popped);
        CHECK(popped->erase);
        CHECK(queue.erasing("k")); // in flight: Redis may still hold the value
        SECTION("a newer write queued behind it carries it") {
            queue.push(item("k", 3));
            CHECK(queue.erasing("k"));
            queue.finished("k");
            CHECK(queue.erasing("k")); // until the newer write is written
            auto newer = queue.pop(Clock::now());
            REQUIRE(newer);
            CHECK(newer->replaces_delete);
            queue.finished("k");
            CHECK_FALSE(queue.erasing("k"));
        }
        SECTION("sent") {
            queue.finished("k");
            CHECK_FALSE(queue.erasing("k"));
        }
        SECTION("failed and requeued") {
            CHECK(queue.requeue(std::move(*popped)));
            CHECK(queue.erasing("k"));
        }
        SECTION("given up: queued again") {
            CHECK(queue.abandon(*popped));
            CHECK(queue.erasing("k"));
            CHECK(queue.pop(Clock::now())->erase);
        }
    }
    SECTION("a key erased twice in flight leaves no mark for a later delete") {
        queue.push(item("k", 3));
        REQUIRE(queue.pop(Clock::now()));
        CHECK(queue.erase("k") == 0); // two DELs while its write is out
        CHECK(queue.erase("k") == 0);
        queue.finished("k");
        queue.push(delete_of("k"));
        auto failed = queue.pop(Clock::now());
        REQUIRE(failed);
        CHECK(queue.requeue(std::move(*failed))); // tried again, not taken for erased
        CHECK(queue.size() == 1);
        CHECK(queue.erasing("k"));
    }
    SECTION("a later delete sent at once removes it") {
        queue.push(delete_of("k"));
        CHECK(queue.erase("k") == 1);
        CHECK_FALSE(queue.erasing("k"));
    }
}

TEST_CASE("write-behind queue: a write that replaced a delete never loses it",
          "[store][write_behind]") {
    WriteBehindQueue queue(small_queue(1000));
    queue.push(delete_of("k"));
    SECTION("a write larger than the queue is refused, and the delete stays") {
        const auto pushed = queue.push(item("k", 2000));
        CHECK_FALSE(pushed.accepted);
        CHECK(queue.erasing("k"));
        CHECK(queue.pop(Clock::now())->erase);
    }
    SECTION("the write taking its place, then refused: the delete stays") {
        queue.push(item("k", 10));
        CHECK(queue.push(item("k", 2000)).superseded == 1);
        CHECK(queue.erasing("k"));
        CHECK(queue.pop(Clock::now())->erase);
    }
    SECTION("the write dropped to make room leaves the delete in its place") {
        queue.push(item("k", 600));
        const auto pushed = queue.push(item("other", 600));
        CHECK(pushed.dropped == 1);
        CHECK(queue.erasing("k"));
        CHECK(queue.size() == 2);
    }
    SECTION("the write given up: the delete is queued again") {
        queue.push(item("k", 10));
        auto write = queue.pop(Clock::now());
        REQUIRE(write);
        CHECK(write->replaces_delete);
        CHECK(queue.abandon(*write));
        CHECK(queue.pop(Clock::now())->erase);
    }
    SECTION("the write failed with no room to requeue it: the delete is queued") {
        queue.push(item("k", 10));
        auto write = queue.pop(Clock::now());
        REQUIRE(write);
        REQUIRE(queue.push(item("filler", 990)).accepted); // 996 of 1000 bytes
        CHECK(queue.requeue(std::move(*write)));
        CHECK(queue.erasing("k"));
        CHECK(queue.size() == 2);
        CHECK(queue.bytes() == 997); // the filler and the delete ("k"), not the write
    }
    SECTION("a plain write given up queues nothing") {
        queue.erase("k");
        queue.push(item("k", 10));
        auto write = queue.pop(Clock::now());
        REQUIRE(write);
        CHECK_FALSE(write->replaces_delete);
        CHECK_FALSE(queue.abandon(*write));
        CHECK(queue.size() == 0);
    }
}

TEST_CASE("write-behind queue agrees with a plain model of its policy", "[store][write_behind]") {
    const auto seed = GENERATE(1u, 2u, 3u, 4u);
    std::mt19937 random(seed);
    const auto pick = [&](std::uint32_t n) {
        return std::uniform_int_distribution<std::uint32_t>(0, n - 1)(random);
    };
    WriteBehindQueue queue(WriteBehindOptions{
        .capacity_bytes = 3000, .small_limit = 100, .large_aging = std::chrono::hours(1)});
    ModelQueue model{.capacity = 3000, .small_limit = 100};
    std::vector<WriteItem> held; // popped: in flight, as a flusher holds them
    const auto t0 = Clock::now();
    for (int step = 0; step < 20000; ++step) {
        INFO("seed " << seed << ", step " << step);
        const std::string key = "k" + std::to_string(pick(40));
        switch (pick(5)) {
        case 0:
        case 1: {
            // Values name their step: a pop shows which write came out.
            std::string value = std::to_string(step);
            value.resize(std::max<std::size_t>(value.size(), pick(400)), '.');
            const auto at = t0 + std::chrono::milliseconds(step);
            const auto got = queue.push(WriteItem{key, Blob::copy_of(value), 0, at});
            const auto want = model.push({key, value, at});
            CHECK(got.accepted == want.accepted);
            CHECK(got.dropped == want.dropped);
            CHECK(got.superseded == want.superseded);
            break;
        }
        case 2:
            CHECK(queue.erase(key) == model.erase(key));
            break;
        case 3:
            if (held.size() < 2) {
                auto got = queue.pop(Clock::now() - 1s);
                const auto want = model.pop();
                REQUIRE(got.has_value() == want.has_value());
                if (got) {
                    CHECK(got->key == want->key);
                    CHECK(got->value.text() == want->value);
                    held.push_back(std::move(*got));
                }
            }
            break;
        default:
            if (!held.empty()) {
                WriteItem item = std::move(held.front());
                held.erase(held.begin());
                if (pick(2) == 0) {
                    const std::string item_key = item.key;
                    queue.finished(item_key);
                    model.finished(item_key);
                } else {
                    ModelQueue::Item copy{item.key, std::string(item.value.text()), item.queued_at};
                    CHECK(queue.requeue(std::move(item)) == model.requeue(std::move(copy)));
                }
            }
        }
        REQUIRE(queue.size() == model.small.size() + model.large.size());
        REQUIRE(queue.bytes() == model.bytes);
    }
}
