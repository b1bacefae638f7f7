// SPDX-License-Identifier: MIT
// The disk tier's write queue for `disk.write_mode = "async"`: `DiskTier::put`
// encodes an entry and queues it here; writer threads persist it with the
// tier's own temp-file + rename write.
//
// Policy:
// - bounded in bytes (what a queued write holds: value, head, compressed
//   payload). A push that does not fit waits for room (back-pressure); nothing
//   is ever dropped. A write larger than the whole bound is admitted alone;
// - small entries (those bound for the LMDB store) are handed to a writer in
//   batches of up to 4096 entries or 4 MiB, which it commits in one
//   transaction (group commit); other writes one at a time, in parallel. One
//   writer at a time takes small entries (LMDB has one writer anyway). On a
//   busy queue (k_busy_ready entries or more waiting when it looks) it waits
//   for more until the oldest has waited k_small_batch_window, and it takes
//   small entries at most once per k_small_batch_window (a full batch, a
//   flush or a shutdown ends either wait). So a steady stream of puts costs
//   one commit (one fdatasync) per window instead of one per few dozen puts,
//   and a put of an entry still queued replaces it instead of being written
//   too. A queue quiet for a window is committed at once, and so is a busy
//   one after a commit longer than the window;
// - one write per entry at a time. A newer write of an entry still
//   queued replaces it (last write wins, counted in `coalesced`); one of an
//   entry being written waits behind that write;
// - `find` sees queued and in-flight writes, the newest first;
// - `cancel` and `cancel_namespace` drop queued writes and wait for those in
//   flight, so that an unlink after them is final;
// - `flush_until` is a barrier: it waits for the writes queued before it.
// Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "daemon/store/disk/disk_entry.hpp"
#include "daemon/store/tier.hpp"
#include "daemon/store/xxh3.hpp"

#include <absl/container/flat_hash_map.h>

namespace pt2cache::daemon::store {

// One entry waiting to be written.
struct PendingWrite {
    std::string ns;
    std::string key;
    Hash128 id;  // entry_hash(ns, key): the file name
    Entry entry; // what lookups answer while the write waits
    // The entry as stored: `payload` views `entry.value` or
    // `encoded.compressed_payload`. Encoded when queued if the value was
    // compressed; else by the writer that takes the write (`encode`), off the
    // I/O threads and only for writes that are not replaced first. Only
    // that writer touches it then (one write per entry at a time); lookups
    // read `entry`, never this.
    mutable EncodedEntry encoded;
    mutable bool encoded_ready = false;
    std::uint64_t encoded_size = 0; // encoded.size(), known when queued
    std::uint64_t held_bytes = 0;   // bytes held, for the queue's bound
    bool small = false;             // bound for the small-entry store: may share a batch

    std::uint64_t bytes() const { return held_bytes; }
    // `encoded`, ready (for the writer holding this write).
    const EncodedEntry& encode() const {
        if (!encoded_ready) {
            encoded = encode_parts(ns, key, entry, ~std::uint64_t{0}, 0);
            encoded_ready = true;
        }
        return encoded;
    }
};

class DiskWriteQueue {
public:
    using Clock = std::chrono::steady_clock;
    // Persists a batch of writes (one, or several small ones); reports its
    // own errors.
    using WriteFn = std::function<void(std::span<const PendingWrite* const>)>;
    static constexpr std::size_t k_max_small_batch = 4096;
    static constexpr std::uint64_t k_max_batch_bytes = 4ULL << 20;
    // How long a writer gathers small entries before committing them.
    static constexpr std::chrono::milliseconds k_small_batch_window{40};
    static constexpr std::size_t k_busy_ready = 128;

    // Starts `threads` (at least 1) writer threads calling `write`.
    DiskWriteQueue(std::uint64_t capacity_bytes, unsigned threads, WriteFn write);
    // `shutdown` with the default deadline, unless it already ran.
    ~DiskWriteQueue();
    DiskWriteQueue(const DiskWriteQueue&) = delete;
    DiskWriteQueue& operator=(const DiskWriteQueue&) = delete;

    // Queues `write`, waiting for room first.
    void push(std::shared_ptr<const PendingWrite> write);
    // Queues `write` if there is room now; false (nothing queued) otherwise.
    // Never blocks on the queue's bound (for the I/O threads).
    bool try_push(std::shared_ptr<const PendingWrite>& write);
    // `try_push` for the longest prefix of `writes` that has room now, under
    // one lock (a pipeline's puts take the lock, and wake a writer, once
    // instead of once each); how many were queued (moved from).
    std::size_t try_push_many(std::span<std::shared_ptr<const PendingWrite>> writes);

    // The newest queued or in-flight write of `id`, or null.
    std::shared_ptr<const PendingWrite> find(const Hash128& id) const;

    // Drops the queued write of `id` and waits for one in flight. True when a
    // queued write was dropped.
    bool cancel(const Hash128& id);

    // `cancel` for every write of `ns`; the ids whose queued write was dropped.
    std::vector<Hash128> cancel_namespace(std::string_view ns);

    // Waits until every write queued before the call is done (written, failed,
    // replaced or cancelled), at most until `deadline`; false when it passed.
    bool flush_until(Clock::time_point deadline);
    void flush() { flush_until(Clock::time_point::max()); }

    // Writes everything queued (logging progress every few seconds) for at
    // most `deadline`, then stops and joins the writer threads; what is still
    // queued then is logged and abandoned. Resumes a paused queue first.
    // How many writes it abandoned (0 when it had run already).
    std::size_t shutdown(std::chrono::seconds deadline = k_shutdown_deadline);

    // For tests: while paused, the writer threads take no new writes.
    void set_paused(bool paused);

    std::uint64_t bytes() const;
    // Queued and in-flight writes, read without the queue's lock: a write
    // pushed before the call (happens-before) counts until it has ended, and
    // a write ends only after the writer has recorded it. So 0 means that
    // `find` would find nothing.
    std::size_t size() const;
    // The entries with a queued or in-flight write.
    std::vector<Hash128> pending_ids() const;
    std::uint64_t coalesced() const; // writes replaced by a newer one before being written
    // How long the oldest queued or in-flight write has waited (zero when
    // none): a replaced write's successor counts from its own push.
    Clock::duration oldest_age() const;
    std::uint64_t capacity() const { return m_capacity; }

    static constexpr std::chrono::seconds k_shutdown_deadline{60};

private:
    struct Slot {
        std::shared_ptr<const PendingWrite> queued; // waiting, the newest
        std::uint64_t queued_seq = 0;
        std::uint64_t queued_bytes = 0;              // queued->bytes(), read without touching it
        std::shared_ptr<const PendingWrite> writing; // in flight
        std::uint64_t writing_seq = 0;
    };
    // Flat: a push looks its slot up under the lock that every I/O thread
    // and the writer share, and a node per slot missed the cache.
    using Slots = absl::flat_hash_map<Hash128, Slot, Hash128Low>;

    void run();
    using Batch = std::vector<std::pair<Hash128, std::shared_ptr<const PendingWrite>>>;
    // Whether the first live queued write is small (drops stale ids first).
    bool front_is_small_locked();
    // Whether a writer may take a batch now.
    bool has_work_locked();
    // Queued bytes that make a batch worth committing without waiting more.
    std::uint64_t batch_bytes_goal() const { return std::min(k_max_batch_bytes, m_capacity / 2); }
    // Waits for a batch worth a commit: until a window has passed since
    // small entries were last taken, and on a busy queue since its oldest
    // write was pushed.
    void linger_locked(std::unique_lock<std::mutex>& lock);
    // Moves queued writes into `batch`: small ones up to a batch's bounds,
    // or one file write.
    void take_batch_locked(Batch& batch, bool small);
    // A push: the write `seq` of `id`, outstanding while its slot's queued
    // or in-flight write has that sequence number.
    struct Push {
        std::uint64_t seq = 0;
        Hash128 id;
        Clock::time_point at;
    };

    // Takes the queued write of `slot` out of the queue (null when none);
    // the caller frees it, after letting go of the lock where it can.
    std::shared_ptr<const PendingWrite> drop_queued_locked(Slot& slot);
    bool idle_before_locked(std::uint64_t seq) const;
    // Pops the pushes at the front of `m_pushes` that are no longer
    // outstanding (a write that ends elsewhere stays until it reaches the
    // front): the front is the oldest outstanding write.
    void prune_locked();

    const std::uint64_t m_capacity;
    const WriteFn m_write;
    mutable std::mutex m_mutex;
    std::condition_variable m_work; // writers wait for a write
    // Whether `size` bytes fit now, `slot` (may be null) being the write's
    // slot: its queued write is replaced, so its bytes count as room.
    bool fits_locked(const Slot* slot, std::uint64_t size, bool small) const;
    // Bytes of small entries queued beyond the bound when large ones fill it.
    std::uint64_t small_reserve() const { return m_capacity / 4; }
    // Queues `write` (it fits) in `slot`, its slot, pushed at `now`; the
    // write it replaces, if any, which the caller frees.
    std::shared_ptr<const PendingWrite>
    push_locked(Slot& slot, std::shared_ptr<const PendingWrite> write, Clock::time_point now);

    std::condition_variable m_done; // pushes, flushes and cancels wait for progress
    Slots m_slots;
    std::deque<Hash128> m_ready; // ids with a queued write (may hold stale ids)
    // Pushes in order, the front outstanding (see prune_locked).
    std::deque<Push> m_pushes;
    // Queued and in-flight writes: changed under `m_mutex`, read without it.
    std::atomic<std::size_t> m_outstanding{0};
    std::uint64_t m_next_seq = 0;
    std::uint64_t m_bytes = 0;
    std::uint64_t m_small_bytes = 0; // of m_bytes, those of small entries
    std::uint64_t m_coalesced = 0;
    unsigned m_flushes = 0;            // flush_until calls waiting
    bool m_small_writer_busy = false;  // a writer is gathering or committing small entries
    Clock::time_point m_small_taken{}; // when small entries were last taken
    bool m_paused = false;
    bool m_stop = false;
    std::vector<std::thread> m_threads;
};

} // namespace pt2cache::daemon::store
