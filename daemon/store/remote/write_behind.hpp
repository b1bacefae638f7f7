// SPDX-License-Identifier: MIT
// The remote tier's write-behind queue: puts are answered once they are
// stored locally and reach Redis later, through this queue, written by the
// tier's flusher threads.
//
// Policy:
// - bounded in bytes (key + value); a push that does not fit drops the
//   OLDEST entries until it does (an entry larger than the whole queue is
//   dropped itself); every drop is counted by the caller;
// - two lanes: values up to `small_limit` and larger ones. `pop` serves the
//   small lane first, so one large upload does not hold small entries back;
//   a large entry that has waited `large_aging` is served before small ones,
//   so large entries are not starved either;
// - a delete that could not be sent when it was made (Redis suspended or
//   not answering) is queued as an entry of its own (`erase`), ordered with
//   the key's writes as they are, and the key reads as absent meanwhile
//   (`erasing`). A write pushed while a delete of its key is queued or in
//   flight takes the delete's place and its duty (`replaces_delete`): if
//   that write is refused, dropped to make room or given up (`abandon`),
//   the delete is queued again, so that Redis's older value never outlives
//   both (a review: a refused SET took the queued delete with it);
// - one key's writes reach Redis in the order they were pushed: a push
//   replaces the key's queued write (the newer value is the one to send), a
//   key has at most one write in flight (`pop` passes over a queued write of
//   a key in flight), a failed write put back behind a newer one of its key
//   is dropped, and so is one whose key was erased while it was in flight.
// Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/store/blob.hpp"

#include <absl/container/flat_hash_map.h>

namespace pt2cache::daemon::store {

struct WriteItem {
    std::string key; // the Redis key
    Blob value;
    std::int64_t ttl_ms = 0; // 0: no expiry
    std::chrono::steady_clock::time_point queued_at{};
    unsigned attempts = 0;
    bool erase = false; // a DEL of `key` to send (no value)
    // When Redis first refused this delete with a transient error (unset:
    // it has not).
    std::chrono::steady_clock::time_point refused_since{};
    // A write that took the place of a delete not sent yet: until it is
    // written, Redis may hold the value deleted.
    bool replaces_delete = false;

    std::uint64_t bytes() const { return key.size() + value.size(); }
};

struct WriteBehindOptions {
    std::uint64_t capacity_bytes = 256ULL << 20;
    std::uint64_t small_limit = 256ULL << 10;
    std::chrono::milliseconds large_aging{1000};
};

class WriteBehindQueue {
public:
    using Clock = std::chrono::steady_clock;

    explicit WriteBehindQueue(WriteBehindOptions options = {});

    struct PushResult {
        bool accepted = true;
        std::uint64_t dropped = 0;    // entries dropped to make room (or this one)
        std::uint64_t superseded = 0; // the key's queued write, replaced by this one
    };

    // Queues `item`, stamping `queued_at` when it is unset. An item larger
    // than the whole queue is refused (a delete it would have replaced
    // stays queued).
    PushResult push(WriteItem item);

    // Puts back an entry that `pop` handed out (its write failed and it gets
    // another try) at the head of its lane, or with `at_back` at its tail
    // (in a cluster, behind the writes of nodes that are up); false when
    // there is no room (nothing else is dropped for it; a delete it is or
    // carries is queued all the same). True, without
    // queueing it, when a newer write of its key is queued or its key was
    // erased meanwhile. Ends the entry's `in flight` state.
    bool requeue(WriteItem item, bool at_back = false);

    // The next entry (see the policy above) of a key with no write in
    // flight; it is `in flight` until `finished` or `requeue`. Waits until
    // `wake_at` for one; nullopt on timeout, after `notify`, or when closed
    // and nothing can be handed out.
    std::optional<WriteItem> pop(Clock::time_point wake_at);

    // The write of a popped entry of `key` is over (written or given up).
    void finished(std::string_view key);

    // A popped entry that was given up (refused, or failed too often): as
    // `finished`, but a delete it is or carries (`erase`, `replaces_delete`)
    // is queued again unless a newer entry of its key, or a delete made
    // since, took it over. True when it queued one.
    bool abandon(const WriteItem& item);

    // Waits until no write of `key` is in flight, at most until `deadline`;
    // true when none is.
    bool wait_settled(std::string_view key, Clock::time_point deadline);

    // Waits until `wake_at`, `notify` or `close`.
    void wait(Clock::time_point wake_at);

    // Wakes every waiter of `pop` and `wait`.
    void notify();

    // No more waiting: `pop` returns at once when empty. Pushes still work.
    void close();

    // Waits until nothing is queued or in flight, at most until `deadline`;
    // true when that happened.
    bool wait_idle(Clock::time_point deadline);

    // Removes and returns every queued entry.
    std::vector<WriteItem> drain();

    // Removes queued writes of `key` (it was deleted meanwhile); how many. A
    // write of it in flight that fails is not tried again.
    std::size_t erase(std::string_view key);

    // Whether `key`'s queued entry, or the one in flight, is or carries a
    // delete: Redis may still hold the value deleted.
    bool erasing(std::string_view key) const;

    std::uint64_t bytes() const;
    std::size_t size() const;

private:
    using Lane = std::list<WriteItem>;

    Lane& lane(const WriteItem& item);
    // Queues `item` at the front or back of its lane, and in the index.
    void enqueue(WriteItem item, bool front);
    // Removes the queued entry at `at` from its lane and the index.
    WriteItem dequeue(Lane::iterator at);
    // Drops the oldest queued entry (a write carrying a delete leaves the
    // delete in its place); false when empty.
    bool drop_oldest();
    // Whether `key`'s queued or in-flight entry is or carries a delete.
    bool carries_delete_locked(std::string_view key) const;
    // Queues a delete of `key` at the front of its lane.
    void enqueue_delete(std::string key, Clock::time_point queued_at);
    // Removes the queued write of `key`; how many (0 or 1).
    std::size_t remove_queued(std::string_view key);
    // The first entry of `from` whose key has no write in flight, or end.
    Lane::iterator first_ready(Lane& from);
    bool in_flight(std::string_view key) const;

    const WriteBehindOptions m_options;
    mutable std::mutex m_mutex;
    std::condition_variable m_changed;
    Lane m_small;
    Lane m_large;
    // Each key has at most one queued write (a push replaces it): where it
    // is (its lane follows from its size), by the key it holds. Pushes,
    // erases and requeues then cost the same with a million small entries
    // queued (Redis down) as with one.
    absl::flat_hash_map<std::string_view, Lane::iterator> m_queued;
    std::uint64_t m_bytes = 0;
    std::vector<std::string> m_in_flight;         // keys; two flushers: a few at most
    std::vector<std::string> m_erased_in_flight;  // of those, keys erased meanwhile
    std::vector<std::string> m_deletes_in_flight; // of those, carrying a delete
    std::uint64_t m_generation = 0;               // bumped by notify
    bool m_closed = false;
};

} // namespace pt2cache::daemon::store
