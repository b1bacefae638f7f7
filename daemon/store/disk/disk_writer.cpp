// SPDX-License-Identifier: MIT
#include "daemon/store/disk/disk_writer.hpp"

#include <algorithm>
#include <cassert>
#include <utility>

#include "daemon/store/log.hpp"

#include <spdlog/spdlog.h>

namespace pt2cache::daemon::store {

namespace {

constexpr std::chrono::seconds k_first_progress_log{2};
constexpr std::chrono::seconds k_progress_log_interval{5};
// Ended writes per hold of the queue's lock (see run()).
constexpr std::size_t k_end_part = 128;

} // namespace

DiskWriteQueue::DiskWriteQueue(std::uint64_t capacity_bytes, unsigned threads, WriteFn write)
    : m_capacity(capacity_bytes)
    , m_write(std::move(write)) {
    threads = std::max(threads, 1U);
    m_threads.reserve(threads);
    for (unsigned i = 0; i < threads; ++i) {
        m_threads.emplace_back([this] { run(); });
    }
}

DiskWriteQueue::~DiskWriteQueue() {
    shutdown();
}

std::shared_ptr<const PendingWrite> DiskWriteQueue::drop_queued_locked(Slot& slot) {
    if (!slot.queued) {
        return nullptr;
    }
    m_bytes -= slot.queued_bytes;
    if (slot.queued->small) {
        m_small_bytes -= slot.queued_bytes;
    }
    std::shared_ptr<const PendingWrite> dropped = std::move(slot.queued);
    slot.queued.reset();
    m_outstanding.fetch_sub(1, std::memory_order_release);
    // Only the front push's end can let the front move.
    if (!m_pushes.empty() && m_pushes.front().seq == slot.queued_seq) {
        prune_locked();
    }
    return dropped;
}

bool DiskWriteQueue::idle_before_locked(std::uint64_t seq) const {
    return m_pushes.empty() || m_pushes.front().seq > seq;
}

void DiskWriteQueue::prune_locked() {
    while (!m_pushes.empty()) {
        const Push& push = m_pushes.front();
        const auto it = m_slots.find(push.id);
        if (it != m_slots.end()) {
            const Slot& slot = it->second;
            if ((slot.queued && slot.queued_seq == push.seq) ||
                (slot.writing && slot.writing_seq == push.seq)) {
                return; // still outstanding
            }
        }
        m_pushes.pop_front();
    }
}

void DiskWriteQueue::push(std::shared_ptr<const PendingWrite> write) {
    assert(write);
    const Hash128 id = write->id;
    const std::uint64_t size = write->bytes();
    std::shared_ptr<const PendingWrite> replaced;
    std::unique_lock lock(m_mutex);
    m_done.wait(lock, [&] {
        const auto it = m_slots.find(id);
        return fits_locked(it != m_slots.end() ? &it->second : nullptr, size, write->small);
    });
    replaced = push_locked(m_slots[id], std::move(write), Clock::now());
    lock.unlock(); // `replaced` is freed without the lock
}

bool DiskWriteQueue::try_push(std::shared_ptr<const PendingWrite>& write) {
    return try_push_many(std::span(&write, 1)) == 1;
}

std::size_t DiskWriteQueue::try_push_many(std::span<std::shared_ptr<const PendingWrite>> writes) {
    const auto now = Clock::now();
    std::size_t pushed = 0;
    // The writes replaced, freed after the lock is let go: freeing an entry
    // (its strings, its value's last reference) under the lock made the
    // other I/O thread and the writer wait for it.
    std::vector<std::shared_ptr<const PendingWrite>> replaced;
    std::unique_lock lock(m_mutex);
    for (auto& write : writes) {
        assert(write);
        auto it = m_slots.find(write->id);
        if (!fits_locked(it != m_slots.end() ? &it->second : nullptr, write->bytes(),
                         write->small)) {
            break;
        }
        if (it == m_slots.end()) {
            it = m_slots.try_emplace(write->id).first;
        }
        if (auto old = push_locked(it->second, std::move(write), now)) {
            replaced.push_back(std::move(old));
        }
        ++pushed;
    }
    lock.unlock();
    return pushed;
}

bool DiskWriteQueue::fits_locked(const Slot* slot, std::uint64_t size, bool small) const {
    const std::uint64_t freed = slot != nullptr && slot->queued ? slot->queued_bytes : 0;
    const std::uint64_t others = m_bytes - freed;
    if (others == 0 || others + size <= m_capacity) {
        return true;
    }
    // Small entries have room of their own beyond the bound, so that a put
    // of a few hundred bytes does not wait for a large file to be written
    // (a review: other clients' 100-byte SETs held up to 5 s behind 256 MiB
    // puts, which the queue takes whole when it is empty).
    const bool replaced_small = slot != nullptr && slot->queued && slot->queued->small;
    return small && m_small_bytes - (replaced_small ? freed : 0) + size <= small_reserve();
}

std::shared_ptr<const PendingWrite>
DiskWriteQueue::push_locked(Slot& slot, std::shared_ptr<const PendingWrite> write,
                            Clock::time_point now) {
    const Hash128 id = write->id;
    const std::uint64_t size = write->bytes();
    auto replaced = drop_queued_locked(slot);
    if (replaced) {
        ++m_coalesced;
        m_done.notify_all(); // a flush may have waited for the replaced write
    } else if (!slot.writing) {
        m_ready.push_back(id);
        // Writers wait only for an empty queue: wake one when work appears,
        // not on every push (a futex wake and a context switch each). A
        // writer that takes a write wakes the next one if more wait; one
        // gathering small entries is woken when a batch is full.
        if (m_ready.size() == 1) {
            m_work.notify_one();
        } else if (m_ready.size() == k_max_small_batch ||
                   (m_bytes < batch_bytes_goal() && m_bytes + size >= batch_bytes_goal())) {
            m_work.notify_all();
        }
    }
    // Otherwise the writer of the in-flight write queues `id` again when done.
    slot.queued = std::move(write);
    slot.queued_seq = ++m_next_seq;
    slot.queued_bytes = size;
    m_pushes.push_back(Push{slot.queued_seq, id, now});
    m_outstanding.fetch_add(1, std::memory_order_release);
    m_bytes += size;
    if (slot.queued->small) {
        m_small_bytes += size;
    }
    return replaced;
}

std::shared_ptr<const PendingWrite> DiskWriteQueue::find(const Hash128& id) const {
    std::lock_guard lock(m_mutex);
    const auto it = m_slots.find(id);
    if (it == m_slots.end()) {
        return nullptr;
    }
    return it->second.queued ? it->second.queued : it->second.writing;
}

bool DiskWriteQueue::cancel(const Hash128& id) {
    std::unique_lock lock(m_mutex);
    const auto it = m_slots.find(id);
    if (it == m_slots.end()) {
        return false;
    }
    const bool dropped = drop_queued_locked(it->second) != nullptr;
    const std::shared_ptr<const PendingWrite> in_flight = it->second.writing;
    if (!in_flight) {
        m_slots.erase(it);
    }
    m_done.notify_all();
    if (in_flight) {
        m_done.wait(lock, [&] {
            const auto now = m_slots.find(id);
            return now == m_slots.end() || now->second.writing != in_flight;
        });
    }
    return dropped;
}

std::vector<Hash128> DiskWriteQueue::cancel_namespace(std::string_view ns) {
    std::vector<Hash128> dropped;
    std::vector<std::pair<Hash128, std::shared_ptr<const PendingWrite>>> in_flight;
    std::unique_lock lock(m_mutex);
    for (auto it = m_slots.begin(); it != m_slots.end();) {
        const auto current = it++; // erase() invalidates `current` only
        Slot& slot = current->second;
        const PendingWrite& newest = slot.queued ? *slot.queued : *slot.writing;
        if (newest.ns != ns) {
            continue;
        }
        if (drop_queued_locked(slot)) {
            dropped.push_back(current->first);
        }
        if (slot.writing) {
            in_flight.emplace_back(current->first, slot.writing);
        } else {
            m_slots.erase(current);
        }
    }
    m_done.notify_all();
    m_done.wait(lock, [&] {
        return std::all_of(in_flight.begin(), in_flight.end(), [&](const auto& write) {
            const auto now = m_slots.find(write.first);
            return now == m_slots.end() || now->second.writing != write.second;
        });
    });
    return dropped;
}

bool DiskWriteQueue::flush_until(Clock::time_point deadline) {
    std::unique_lock lock(m_mutex);
    const std::uint64_t last = m_next_seq;
    const auto done = [&] { return idle_before_locked(last); };
    if (done()) {
        return true;
    }
    // A lingering writer commits at once while anyone waits for a flush.
    ++m_flushes;
    m_work.notify_all();
    bool flushed = true;
    if (deadline == Clock::time_point::max()) {
        m_done.wait(lock, done);
    } else {
        flushed = m_done.wait_until(lock, deadline, done);
    }
    --m_flushes;
    return flushed;
}

std::size_t DiskWriteQueue::shutdown(std::chrono::seconds deadline) {
    if (m_threads.empty()) {
        return 0;
    }
    std::size_t abandoned = 0;
    set_paused(false);
    const auto started = Clock::now();
    const auto give_up = started + deadline;
    auto next_log = started + k_first_progress_log;
    while (!flush_until(std::min(next_log, give_up))) {
        const auto waited =
            std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - started);
        if (Clock::now() >= give_up) {
            abandoned = size();
            logger().error("gave up after {} s: {} queued disk writes ({} bytes) abandoned",
                           waited.count(), abandoned, bytes());
            break;
        }
        logger().info("still writing {} queued disk entries ({} bytes) after {} s", size(), bytes(),
                      waited.count());
        next_log += k_progress_log_interval;
    }
    {
        std::lock_guard lock(m_mutex);
        m_stop = true;
    }
    m_work.notify_all();
    for (auto& thread : m_threads) {
        thread.join();
    }
    m_threads.clear();
    return abandoned;
}

void DiskWriteQueue::set_paused(bool paused) {
    {
        std::lock_guard lock(m_mutex);
        m_paused = paused;
    }
    m_work.notify_all();
}

std::uint64_t DiskWriteQueue::bytes() const {
    std::lock_guard lock(m_mutex);
    return m_bytes;
}

std::size_t DiskWriteQueue::size() const {
    return m_outstanding.load(std::memory_order_acquire);
}

std::vector<Hash128> DiskWriteQueue::pending_ids() const {
    std::lock_guard lock(m_mutex);
    std::vector<Hash128> ids;
    ids.reserve(m_slots.size());
    for (const auto& [id, slot] : m_slots) {
        if (slot.queued || slot.writing) {
            ids.push_back(id);
        }
    }
    return ids;
}

DiskWriteQueue::Clock::duration DiskWriteQueue::oldest_age() const {
    std::lock_guard lock(m_mutex);
    if (m_pushes.empty()) {
        return Clock::duration::zero();
    }
    return Clock::now() - m_pushes.front().at;
}

std::uint64_t DiskWriteQueue::coalesced() const {
    std::lock_guard lock(m_mutex);
    return m_coalesced;
}

bool DiskWriteQueue::front_is_small_locked() {
    while (!m_ready.empty()) {
        const auto it = m_slots.find(m_ready.front());
        // Stale: cancelled, or already taken (one write per entry at a time).
        if (it == m_slots.end() || !it->second.queued || it->second.writing) {
            m_ready.pop_front();
            continue;
        }
        return it->second.queued->small;
    }
    return false;
}

bool DiskWriteQueue::has_work_locked() {
    if (m_paused || m_ready.empty()) {
        return false;
    }
    // Small entries share one LMDB writer: a second thread would only wait
    // for the first one's commit, and split its batch.
    return !m_small_writer_busy || !front_is_small_locked();
}

void DiskWriteQueue::linger_locked(std::unique_lock<std::mutex>& lock) {
    // Committed at once, a steady stream of puts (16 clients' SETs) made
    // about a thousand commits a second of a few dozen entries each: every
    // one an fdatasync and a copy of each page it touched, a fifth of the
    // daemon's CPU per SET. One commit per window costs a window of
    // latency, which nobody waits for (puts are acknowledged when queued,
    // reads see the queue, a flush ends the wait).
    //
    // The window runs from the last take, and on a busy queue from its
    // oldest write if that came later: a burst after a quiet spell is
    // gathered for a window from its first write, while a steady stream is
    // taken once per window, and at once after a commit that took longer
    // than one. So a write waits at most a window, or the commit before its
    // own, and then its own commit: never a window after a slow commit too.
    auto until = m_small_taken + k_small_batch_window;
    if (m_ready.size() >= k_busy_ready && !m_pushes.empty()) {
        until = std::max(until, m_pushes.front().at + k_small_batch_window);
    }
    const auto now = Clock::now();
    if (until > now) {
        m_work.wait_until(lock, until, [&] {
            return m_stop || m_flushes > 0 || m_ready.size() >= k_max_small_batch ||
                   m_bytes >= batch_bytes_goal();
        });
    }
    m_small_taken = Clock::now();
}

void DiskWriteQueue::take_batch_locked(Batch& batch, bool small) {
    const std::size_t max_count = small ? k_max_small_batch : 1;
    std::uint64_t batch_bytes = 0;
    while (!m_ready.empty() && batch.size() < max_count) {
        const Hash128 id = m_ready.front();
        const auto it = m_slots.find(id);
        if (it == m_slots.end() || !it->second.queued || it->second.writing) {
            m_ready.pop_front(); // stale
            continue;
        }
        Slot& slot = it->second;
        const std::uint64_t size = slot.queued->encoded_size;
        // A batch is all small entries or one file (the front may have
        // changed while the writer waited: then it takes nothing).
        if (slot.queued->small != small ||
            (!batch.empty() && batch_bytes + size > k_max_batch_bytes)) {
            break;
        }
        m_ready.pop_front();
        slot.writing = std::move(slot.queued);
        slot.writing_seq = slot.queued_seq;
        slot.queued.reset();
        batch_bytes += size;
        batch.emplace_back(id, slot.writing);
    }
}

void DiskWriteQueue::run() {
    std::unique_lock lock(m_mutex);
    Batch batch;
    std::vector<const PendingWrite*> views;
    for (;;) {
        m_work.wait(lock, [this] { return m_stop || has_work_locked(); });
        if (m_stop) {
            return;
        }
        const bool small = front_is_small_locked();
        if (small) {
            m_small_writer_busy = true;
            linger_locked(lock);
        }
        batch.clear();
        if (!m_paused) {
            take_batch_locked(batch, small);
        }
        if (!m_ready.empty()) {
            m_work.notify_one(); // more writes wait: the next writer takes them
        }
        if (batch.empty()) {
            if (small) {
                m_small_writer_busy = false;
                m_work.notify_one();
            }
            continue;
        }
        views.clear();
        for (const auto& item : batch) {
            views.push_back(item.second.get());
        }

        lock.unlock();
        m_write(views);
        lock.lock();

        // A slot stays while it has a write in flight. A large batch is ended
        // a part at a time, letting go of the lock in between: the I/O
        // threads queue puts under it, and must not wait for thousands of
        // entries (each part ends as if its writes had just finished).
        for (std::size_t at = 0; at < batch.size(); at += k_end_part) {
            if (at > 0) {
                lock.unlock();
                lock.lock();
            }
            const std::size_t end = std::min(batch.size(), at + k_end_part);
            for (std::size_t i = at; i < end; ++i) {
                const auto& [id, write] = batch[i];
                const auto it = m_slots.find(id);
                Slot& slot = it->second;
                m_bytes -= write->bytes();
                if (write->small) {
                    m_small_bytes -= write->bytes();
                }
                slot.writing.reset();
                m_outstanding.fetch_sub(1, std::memory_order_release);
                if (slot.queued) {
                    m_ready.push_back(id);
                } else {
                    m_slots.erase(it);
                }
            }
        }
        prune_locked();
        lock.unlock();
        batch.clear(); // frees the entries' buffers outside the lock
        lock.lock();
        if (small) {
            m_small_writer_busy = false;
            m_work.notify_one(); // small entries queued meanwhile: another writer may take them
        }
        m_done.notify_all();
    }
}

} // namespace pt2cache::daemon::store
