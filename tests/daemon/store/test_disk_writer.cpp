// SPDX-License-Identifier: MIT
// DiskWriteQueue on its own: which writer takes which writes, and when
// (daemon/store/disk/disk_writer.hpp). The write function here records what
// it is given instead of writing; the tier's own writes are tested in
// test_disk_async.cpp and test_disk_small.cpp.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "daemon/store/disk/disk_layout.hpp"
#include "daemon/store/disk/disk_writer.hpp"
#include "tests/daemon/store/helpers.hpp"

#include <catch2/catch.hpp>
#include <fmt/format.h>

using namespace pt2cache::daemon::store;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

std::shared_ptr<const PendingWrite> write_of(int n, bool small, std::size_t value_bytes = 100) {
    auto write = std::make_shared<PendingWrite>();
    write->ns = "fxgraph";
    write->key = fmt::format("key-{}", n);
    write->id = entry_hash(write->ns, write->key);
    write->entry.value = Blob::copy_of(std::string(value_bytes, 'v'));
    write->encoded_size = encoded_entry_size(write->ns.size(), write->key.size(), value_bytes);
    write->held_bytes = write->encoded_size;
    write->small = small;
    return write;
}

// Records each batch's size and how many batches were being written at once.
struct Recorder {
    std::mutex mutex;
    std::condition_variable changed;
    std::vector<std::size_t> batches;
    std::vector<Clock::time_point> starts; // when each batch's write began
    bool mixed = false;                    // a batch held a file and anything else
    int writing = 0;
    int most_writing = 0;
    std::chrono::milliseconds hold{0}; // how long each write takes

    DiskWriteQueue::WriteFn fn() {
        return [this](std::span<const PendingWrite* const> batch) {
            {
                std::lock_guard lock(mutex);
                starts.push_back(Clock::now());
                ++writing;
                most_writing = std::max(most_writing, writing);
                changed.notify_all();
            }
            std::this_thread::sleep_for(hold);
            std::lock_guard lock(mutex);
            --writing;
            const bool small = batch.front()->small;
            for (const PendingWrite* write : batch) {
                mixed = mixed || write->small != small || (!small && batch.size() > 1);
            }
            batches.push_back(batch.size());
            changed.notify_all();
        };
    }
    std::size_t written() {
        std::lock_guard lock(mutex);
        std::size_t total = 0;
        for (const std::size_t size : batches) {
            total += size;
        }
        return total;
    }
};

} // namespace

namespace {

// Queues `count` small writes numbered from `first` while the writers are
// paused, so that a writer finds them all waiting: a busy queue.
void push_paused(DiskWriteQueue& queue, int first, int count, std::size_t value_bytes = 100) {
    queue.set_paused(true);
    for (int i = first; i < first + count; ++i) {
        queue.push(write_of(i, true, value_bytes)); // fits: the queue's bound is far
    }
    queue.set_paused(false);
}

} // namespace

TEST_CASE("write queue gathers small writes into one commit when busy", "[store][disk][writer]") {
    Recorder recorder;
    DiskWriteQueue queue(64ULL << 20, 2, recorder.fn());
    constexpr int k_waiting = static_cast<int>(DiskWriteQueue::k_busy_ready) + 10;
    const auto started = Clock::now();
    push_paused(queue, 0, k_waiting);
    // Pushed within the window: the writer waits for these too instead of
    // committing the first ones alone.
    for (int i = k_waiting; i < k_waiting + 50; ++i) {
        queue.push(write_of(i, true));
    }
    const bool within_window = Clock::now() - started < DiskWriteQueue::k_small_batch_window / 2;
    // No flush: the window alone ends the wait.
    REQUIRE(pt2cache::tests::wait_until([&] { return queue.size() == 0; }, 5s));
    CHECK(recorder.written() == k_waiting + 50);
    if (within_window) { // else the machine was too slow to say anything
        std::lock_guard lock(recorder.mutex);
        CHECK(recorder.batches.size() == 1);
    }
}

TEST_CASE("write queue commits a queue quiet for a window at once", "[store][disk][writer]") {
    Recorder recorder;
    DiskWriteQueue queue(64ULL << 20, 1, recorder.fn());
    // A writer that waited out the window would take at least that long
    // every time; a slow machine may take that long now and then.
    auto fastest = Clock::duration::max();
    for (int i = 0; i < 5; ++i) {
        std::this_thread::sleep_for(DiskWriteQueue::k_small_batch_window);
        const auto started = Clock::now();
        queue.push(write_of(i, true));
        REQUIRE(pt2cache::tests::wait_until([&] { return queue.size() == 0; }, 5s));
        fastest = std::min(fastest, Clock::now() - started);
    }
    CHECK(fastest < DiskWriteQueue::k_small_batch_window);
}

TEST_CASE("write queue takes small writes at most once per window", "[store][disk][writer]") {
    Recorder recorder;
    DiskWriteQueue queue(64ULL << 20, 1, recorder.fn());
    // A steady trickle, far below a busy queue: each write is pushed as soon
    // as the one before it is written.
    constexpr int k_writes = 4;
    const auto started = Clock::now();
    for (int i = 0; i < k_writes; ++i) {
        queue.push(write_of(i, true));
        REQUIRE(pt2cache::tests::wait_until([&] { return queue.size() == 0; }, 5s));
    }
    // The first is taken at once, each later one a window after the one
    // before it (committed at once, the four would take far less).
    CHECK(Clock::now() - started >= (k_writes - 1) * DiskWriteQueue::k_small_batch_window);
    CHECK(recorder.written() == k_writes);
    // A flush does not wait for the window (the fastest of a few: a slow
    // machine may take that long now and then).
    auto fastest = Clock::duration::max();
    for (int i = 0; i < 3; ++i) {
        queue.push(write_of(k_writes + i, true));
        const auto flushed = Clock::now();
        REQUIRE(queue.flush_until(Clock::now() + 5s));
        fastest = std::min(fastest, Clock::now() - flushed);
    }
    CHECK(fastest < DiskWriteQueue::k_small_batch_window);
}

TEST_CASE("write queue takes a busy stream again at once after a commit longer than the window",
          "[store][disk][writer]") {
    Recorder recorder;
    // Each commit takes one and a half windows: the stream's writes pile up
    // meanwhile, and have waited long enough when it ends.
    recorder.hold = DiskWriteQueue::k_small_batch_window * 3 / 2;
    DiskWriteQueue queue(64ULL << 20, 1, recorder.fn());
    // A steady, busy stream (new entries, nothing coalesces) for about ten
    // commits; bounded in count and time.
    const auto started = Clock::now();
    int pushed = 0;
    for (int round = 0; round < 400 && Clock::now() - started < 10 * recorder.hold; ++round) {
        for (int i = 0; i < 32; ++i) {
            queue.push(write_of(pushed++, true));
        }
        std::this_thread::sleep_for(5ms);
    }
    // The flush ends any wait: only the batches started before it count.
    const auto stream_ended = Clock::now();
    queue.flush();
    CHECK(recorder.written() == static_cast<std::size_t>(pushed));
    std::lock_guard lock(recorder.mutex);
    const auto during_stream =
        std::count_if(recorder.starts.begin(), recorder.starts.end(),
                      [&](Clock::time_point start) { return start < stream_ended; });
    REQUIRE(during_stream >= 4);
    // A writer that waited a window after each commit would start the next
    // one at least a commit and a window after the last; taken at once, the
    // next starts right after it (the fastest gap: a slow machine may add
    // a delay now and then).
    auto fastest = Clock::duration::max();
    for (std::size_t i = 1; i < static_cast<std::size_t>(during_stream); ++i) {
        fastest = std::min(fastest, recorder.starts[i] - recorder.starts[i - 1]);
    }
    CHECK(fastest >= recorder.hold);
    CHECK(fastest < recorder.hold + DiskWriteQueue::k_small_batch_window / 2);
}

TEST_CASE("write queue lets one writer at a time take small writes", "[store][disk][writer]") {
    Recorder recorder;
    recorder.hold = 2ms;
    DiskWriteQueue queue(64ULL << 20, 4, recorder.fn());
    // Paced over several windows, so that writes keep arriving while one
    // writer commits: the idle writers must leave them to it.
    constexpr int k_writes = 3000;
    for (int i = 0; i < k_writes; ++i) {
        queue.push(write_of(i, true));
        if (i % 100 == 99) {
            std::this_thread::sleep_for(3ms);
        }
    }
    queue.flush();
    CHECK(recorder.written() == k_writes);
    std::lock_guard lock(recorder.mutex);
    CHECK(recorder.most_writing == 1);
}

TEST_CASE("write queue writes files in parallel", "[store][disk][writer]") {
    Recorder recorder;
    recorder.hold = 300ms;
    DiskWriteQueue queue(64ULL << 20, 2, recorder.fn());
    std::this_thread::sleep_for(100ms); // both writers asleep on an empty queue
    queue.push(write_of(1, false));
    queue.push(write_of(2, false));
    // Files are not the one small-entry writer's: both write at once.
    {
        std::unique_lock lock(recorder.mutex);
        recorder.changed.wait_for(lock, 5s, [&] { return recorder.writing == 2; });
        CHECK(recorder.most_writing == 2);
    }
    queue.flush();
    std::lock_guard lock(recorder.mutex);
    CHECK(recorder.batches == std::vector<std::size_t>{1, 1});
}

TEST_CASE("write queue flush does not wait out the window", "[store][disk][writer]") {
    Recorder recorder;
    DiskWriteQueue queue(64ULL << 20, 1, recorder.fn());
    // Many windows' worth of flushes: each commits at once.
    constexpr int k_rounds = 20;
    const auto started = Clock::now();
    for (int i = 0; i < k_rounds; ++i) {
        queue.push(write_of(i, true));
        REQUIRE(queue.flush_until(Clock::now() + 10s));
    }
    CHECK(recorder.written() == k_rounds);
    CHECK(Clock::now() - started < k_rounds * DiskWriteQueue::k_small_batch_window);
}

TEST_CASE("write queue coalesces repeated small writes within the window",
          "[store][disk][writer]") {
    Recorder recorder;
    DiskWriteQueue queue(64ULL << 20, 1, recorder.fn());
    constexpr int k_waiting = static_cast<int>(DiskWriteQueue::k_busy_ready);
    const auto started = Clock::now();
    push_paused(queue, 0, k_waiting);
    for (int i = 0; i < 20; ++i) {
        queue.push(write_of(1000, true));
    }
    const bool within_window = Clock::now() - started < DiskWriteQueue::k_small_batch_window / 2;
    queue.flush();
    if (within_window) {
        CHECK(queue.coalesced() == 19);
        CHECK(recorder.written() == k_waiting + 1);
    }
    CHECK(recorder.written() + queue.coalesced() == k_waiting + 20);
}

TEST_CASE("write queue ends the window once a batch's bytes wait", "[store][disk][writer]") {
    Recorder recorder;
    // 4 MiB of room: a batch is worth committing at 2 MiB.
    DiskWriteQueue queue(4ULL << 20, 1, recorder.fn());
    // A busy queue already past 2 MiB: the writer need not wait. One that
    // waited out the window would take at least that long every time.
    constexpr int k_waiting = static_cast<int>(DiskWriteQueue::k_busy_ready) + 32;
    constexpr std::size_t k_value = 16 << 10;
    auto fastest = Clock::duration::max();
    for (int round = 0; round < 3; ++round) {
        const auto started = Clock::now();
        push_paused(queue, round * 1000, k_waiting, k_value);
        REQUIRE(pt2cache::tests::wait_until([&] { return queue.size() == 0; }, 5s));
        fastest = std::min(fastest, Clock::now() - started);
    }
    CHECK(recorder.written() == 3 * k_waiting);
    CHECK(fastest < DiskWriteQueue::k_small_batch_window);
}

TEST_CASE("write queue never mixes a file into a batch of small writes", "[store][disk][writer]") {
    Recorder recorder;
    DiskWriteQueue queue(64ULL << 20, 1, recorder.fn());
    // Small writes make the writer wait for more; meanwhile they are
    // cancelled, and the front of the queue becomes a file.
    push_paused(queue, 100, static_cast<int>(DiskWriteQueue::k_busy_ready));
    std::this_thread::sleep_for(DiskWriteQueue::k_small_batch_window / 5);
    CHECK(queue.cancel_namespace("fxgraph").size() == DiskWriteQueue::k_busy_ready);
    queue.push(write_of(2, false));
    queue.push(write_of(3, true));
    queue.push(write_of(4, true));
    queue.push(write_of(5, false));
    queue.flush();
    CHECK(recorder.written() == 4);
    std::lock_guard lock(recorder.mutex);
    CHECK_FALSE(recorder.mixed);
}

TEST_CASE("a queued write encodes as the tier would have when queued", "[store][disk][writer]") {
    const auto write = write_of(9, true, 300);
    const EncodedEntry expected = encode_parts(write->ns, write->key, write->entry, 4096, 3);
    const EncodedEntry& lazy = write->encode();
    CHECK(lazy.head == expected.head);
    CHECK(std::equal(lazy.payload.begin(), lazy.payload.end(), expected.payload.begin(),
                     expected.payload.end()));
    CHECK(lazy.trailer == expected.trailer);
    CHECK(write->encoded_size == expected.size());
    CHECK(&write->encode() == &lazy); // once
}

TEST_CASE("write queue try_push_many queues the prefix that has room, under its bound",
          "[store][disk][writer]") {
    Recorder recorder;
    // Room for two of these writes (each is charged its encoded size).
    const std::uint64_t one = write_of(0, true, 400)->bytes();
    DiskWriteQueue queue(2 * one + one / 2, 1, recorder.fn());
    queue.set_paused(true);
    std::vector<std::shared_ptr<const PendingWrite>> writes;
    for (int i = 0; i < 4; ++i) {
        // The last is small enough to fit after the third is refused: it
        // stays out too, or the replies would go out of order.
        writes.push_back(write_of(i, true, i == 3 ? 1 : 400));
    }
    CHECK(queue.try_push_many(writes) == 2);
    CHECK(queue.size() == 2);
    CHECK(queue.find(entry_hash("fxgraph", "key-0")));
    CHECK(queue.find(entry_hash("fxgraph", "key-1")));
    CHECK_FALSE(queue.find(entry_hash("fxgraph", "key-2")));
    CHECK_FALSE(queue.find(entry_hash("fxgraph", "key-3")));
    // Those not queued are left to the caller, untouched.
    CHECK(writes[2]);
    CHECK(writes[3]);
    // A write of a queued entry replaces it, so its bytes count as room.
    std::vector<std::shared_ptr<const PendingWrite>> again{write_of(1, true, 400)};
    CHECK(queue.try_push_many(again) == 1);
    CHECK(queue.coalesced() == 1);
    queue.set_paused(false);
    queue.flush();
    CHECK(recorder.written() == 2);
    CHECK(queue.size() == 0);
    CHECK(queue.bytes() == 0);
}

TEST_CASE("write queue ends a batch larger than one hold of its lock in full",
          "[store][disk][writer]") {
    Recorder recorder;
    DiskWriteQueue queue(64ULL << 20, 1, recorder.fn());
    // Several times the part the writer ends per hold of the lock
    // (disk_writer.cpp), and a re-push of some while the batch is written.
    push_paused(queue, 0, 1000);
    for (int i = 0; i < 1000; i += 7) {
        queue.push(write_of(i, true));
    }
    queue.flush();
    CHECK(queue.size() == 0);
    CHECK(queue.bytes() == 0);
    CHECK(queue.pending_ids().empty());
    CHECK(recorder.written() + queue.coalesced() == 1000 + 143);
}

TEST_CASE("write queue keeps room for small writes while a large one fills it",
          "[store][disk][writer]") {
    Recorder recorder;
    recorder.hold = 300ms;
    const std::uint64_t capacity = 1ULL << 20;
    DiskWriteQueue queue(capacity, 2, recorder.fn());
    // A file larger than the whole bound: taken, as the queue is empty.
    queue.push(write_of(1, false, 2 << 20));
    {
        std::unique_lock lock(recorder.mutex);
        recorder.changed.wait_for(lock, 5s, [&] { return recorder.writing == 1; });
    }
    // While it is written, small writes are queued at once (other clients'
    // puts waited for the whole file before), up to a quarter of the bound...
    const std::uint64_t one = write_of(0, true, 4000)->bytes();
    std::size_t queued = 0;
    for (int i = 2; i < 1000; ++i) {
        auto write = write_of(i, true, 4000);
        if (!queue.try_push(write)) {
            break;
        }
        ++queued;
    }
    CHECK(queued == capacity / 4 / one);
    // ... and another file is not.
    auto large = write_of(1000, false, 64 << 10);
    CHECK_FALSE(queue.try_push(large));
    queue.flush();
    CHECK(recorder.written() == 1 + queued);
    CHECK(queue.bytes() == 0);
}
