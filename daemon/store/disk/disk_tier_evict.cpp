// SPDX-License-Identifier: MIT
// DiskTier's background thread: eviction under max_size (both stores, one
// LRU), compaction of small.mdb, the flush of small entries' access times,
// the salvage of a quarantined small-entry store, and the deletion of small
// copies that failed puts replaced.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <optional>
#include <sys/stat.h>
#include <unistd.h>
#include <utility>
#include <vector>

#include "daemon/store/disk/disk_file.hpp"
#include "daemon/store/disk/disk_tier.hpp"
#include "daemon/store/disk/posix_file.hpp"
#include "daemon/store/log.hpp"

#include <spdlog/spdlog.h>

namespace pt2cache::daemon::store {

namespace {

constexpr std::size_t k_evict_batch = 256; // small entries deleted per LMDB transaction
// The least time between two passes that make room on a full filesystem.
constexpr std::chrono::seconds k_space_pass_interval{10};

} // namespace

void DiskTier::wait_for_salvage() {
    std::unique_lock lock(m_mutex);
    m_wake.wait(lock, [this] { return m_stop || (!m_salvage_job && !m_salvage_running); });
}

void DiskTier::hold_salvage(bool held) {
    {
        std::lock_guard lock(m_mutex);
        m_salvage_held = held;
    }
    m_wake.notify_all();
}

void DiskTier::wake_evictor_if_needed() {
    if (size_bytes() <= m_options.max_size) {
        return;
    }
    // Taking the mutex orders this wake-up after the evictor's predicate
    // check, so it cannot be lost.
    { std::lock_guard lock(m_mutex); }
    m_wake.notify_all();
}

void DiskTier::note_space_short() {
    if (m_space_short.exchange(true, std::memory_order_relaxed)) {
        return; // the evictor has not taken the last one yet
    }
    { std::lock_guard lock(m_mutex); }
    m_wake.notify_all();
}

void DiskTier::evict_loop() {
    const std::uint64_t target = m_options.max_size / 10 * 9;
    // What eviction can lower: the files' blocks and the small entries'
    // estimated pages, plus what the last compaction showed the estimate
    // misses. Deleting scattered entries frees few whole LMDB pages, so the
    // file's own size is brought down by compaction instead.
    const auto in_use = [this] {
        return m_index.total_bytes() + m_small_overhead.load(std::memory_order_relaxed);
    };
    // After a pass that could not get under max_size (say, LMDB's fixed
    // pages alone exceed a tiny bound), the next waits for the timeout.
    bool stuck = false;
    auto next_space_pass = std::chrono::steady_clock::time_point();
    std::unique_lock lock(m_mutex);
    for (;;) {
        m_wake.wait_for(lock, std::chrono::seconds(1), [this, stuck] {
            return m_stop || m_small_map_full.load(std::memory_order_relaxed) ||
                   (scan_complete() && m_salvage_job && !m_salvage_held) ||
                   (!stuck && scan_complete() && m_space_short.load(std::memory_order_relaxed)) ||
                   (!stuck && scan_complete() && size_bytes() > m_options.max_size);
        });
        stuck = false;
        if (m_stop) {
            return;
        }
        // A quarantined store is salvaged once the index knows every file.
        std::optional<QuarantinedStore> salvage;
        if (scan_complete() && !m_salvage_held) {
            salvage = std::exchange(m_salvage_job, std::nullopt);
            m_salvage_running = salvage.has_value();
        }
        lock.unlock();
        if (salvage) {
            salvage_small(*salvage);
            {
                std::lock_guard done(m_mutex);
                m_salvage_running = false;
            }
            m_wake.notify_all();
        }
        flush_touches();
        if (m_small) {
            m_small->set_aside_if_detached();
        }
        retry_replaced();
        // A full LMDB map: make room for a quarter of what it holds.
        std::uint64_t goal = target;
        if (m_small_map_full.exchange(false) && m_small) {
            const std::uint64_t now_used = in_use();
            goal = std::min(goal, now_used - std::min(now_used, m_index.small_bytes() / 4));
        } else if (scan_complete() && m_space_short.exchange(false) &&
                   std::chrono::steady_clock::now() >= next_space_pass) {
            // The filesystem filled up below max_size (other files on it,
            // or max_size above its size): a tenth of the cache makes room,
            // once in k_space_pass_interval at most, so that a filesystem
            // that stays full does not empty the cache within seconds.
            next_space_pass = std::chrono::steady_clock::now() + k_space_pass_interval;
            const std::uint64_t now_used = in_use();
            goal = std::min(goal, now_used - now_used / 10);
            static LogThrottle throttle(60'000);
            if (const auto left_out = throttle.take()) {
                logger().warn("the filesystem of {} is full below disk.max_size ({} bytes in "
                              "use): evicting a tenth of the cache{}",
                              m_layout.root(), now_used, left_out_note(*left_out));
            }
        } else if (!scan_complete() || size_bytes() <= m_options.max_size) {
            lock.lock();
            continue;
        }
        std::uint64_t files = 0;
        std::uint64_t small = 0;
        std::vector<DiskIndex::Victim> small_victims;
        // Once a delete from small.mdb fails (a full filesystem: LMDB's
        // deletes need pages too), its entries are passed over this pass
        // and put back after it, so that files can still make room; a
        // bounded number, so that a pass stays short.
        bool small_failed = false;
        std::vector<DiskIndex::Victim> passed_over;
        while (!m_stop_requested.load(std::memory_order_relaxed) && in_use() > goal) {
            auto victim = m_index.pop_least_recent();
            if (!victim) {
                break;
            }
            if (victim->small && small_failed) {
                passed_over.push_back(std::move(*victim));
                if (passed_over.size() >= 16 * k_evict_batch) {
                    break;
                }
                continue;
            }
            if (victim->small) {
                small_victims.push_back(std::move(*victim));
                if (small_victims.size() >= k_evict_batch) {
                    small += evict_small(small_victims, small_failed);
                }
                continue;
            }
            const std::string path = m_layout.entry_path(victim->ns, victim->id.hex());
            // Under the key's lock, and not when a write has renamed a newer
            // file into its place since the victim was taken (the index
            // records it; a newer small entry leaves the file stale).
            std::lock_guard stripe_lock(stripe(victim->id));
            if (m_index.where(victim->id) == false) {
                continue;
            }
            if (::unlink(path.c_str()) == 0) {
                ++files;
                m_stats.tier(victim->ns, TierId::disk)
                    .evictions.fetch_add(1, std::memory_order_relaxed);
            } else if (errno != ENOENT) {
                logger().warn("cannot evict {}: {}", path, errno_text(errno));
            }
        }
        small += evict_small(small_victims, small_failed);
        if (!passed_over.empty()) {
            put_back_stored(passed_over);
        }
        compact_if_needed(false);
        stuck = size_bytes() > m_options.max_size;
        logger().debug("evicted {} files and {} small entries, {} bytes left", files, small,
                       size_bytes());
        lock.lock();
    }
}

void DiskTier::forget_replaced(std::string_view ns, const Hash128& id) {
    {
        std::lock_guard lock(m_replaced_mutex);
        m_replaced.insert_or_assign(id, std::string(ns));
        m_replaced_count.store(m_replaced.size(), std::memory_order_release);
    }
    m_index.erase(id); // after the insert: put_back_stored() checks both
    // A file of the id goes too: one an interrupted migration left beside
    // the small copy would otherwise be served once the mark is gone.
    const bool file_gone = unlink_entry_file(ns, id);
    bool small_gone = true;
    if (m_small) {
        const SmallKeyRef keys[] = {{ns, id}};
        auto erased = m_small->erase(keys);
        small_gone = erased && !salvage_pending();
        if (!erased) {
            note_space_short(); // most likely: LMDB's delete needs pages too
        }
    }
    if (file_gone && small_gone) {
        clear_replaced(id);
    }
}

bool DiskTier::unlink_entry_file(std::string_view ns, const Hash128& id) {
    return ::unlink(m_layout.entry_path(ns, id.hex()).c_str()) == 0 || errno == ENOENT ||
           errno == ENOTDIR;
}

std::size_t DiskTier::retry_replaced(bool final) {
    std::vector<std::pair<Hash128, std::string>> pending;
    {
        std::lock_guard lock(m_replaced_mutex);
        if (m_replaced.empty()) {
            return 0;
        }
        pending.assign(m_replaced.begin(), m_replaced.end());
    }
    std::vector<Hash128> ids;
    for (const auto& [id, ns] : pending) {
        ids.push_back(id);
    }
    const auto locks = lock_stripes(ids);
    std::vector<SmallKeyRef> keys;
    {
        // Under the stripes: one written since is no longer to delete.
        std::lock_guard lock(m_replaced_mutex);
        for (const auto& [id, ns] : pending) {
            if (m_replaced.contains(id)) {
                keys.push_back({ns, id});
            }
        }
    }
    // Kept while a quarantined store waits for its salvage (or is being
    // salvaged): deleted from the fresh store, a copy would come back with
    // the salvage, which skips what is still marked here. A file the
    // filesystem would not let go of (EROFS, EACCES, EIO) keeps its mark too.
    bool small_gone = true;
    if (m_small) {
        auto erased = m_small->erase(keys);
        small_gone = erased && (final || !salvage_pending());
    }
    std::vector<Hash128> gone;
    for (const SmallKeyRef& key : keys) {
        if (unlink_entry_file(key.ns, key.id) && small_gone) {
            gone.push_back(key.id);
        }
    }
    {
        std::lock_guard lock(m_replaced_mutex);
        for (const Hash128& id : gone) {
            m_replaced.erase(id);
        }
        m_replaced_count.store(m_replaced.size(), std::memory_order_release);
    }
    std::lock_guard lock(m_replaced_mutex);
    return m_replaced.size();
}

void DiskTier::abandon_replaced() {
    std::vector<std::pair<Hash128, std::string>> left;
    {
        std::lock_guard lock(m_replaced_mutex);
        left.assign(m_replaced.begin(), m_replaced.end());
    }
    std::size_t small_left = 0;
    for (const auto& [id, ns] : left) {
        const std::string path = m_layout.entry_path(ns, id.hex());
        struct stat info {};
        if (::lstat(path.c_str(), &info) == 0) {
            logger().critical("{}, replaced by a failed put or delete, could not be deleted: "
                              "delete it before the next start, which would serve it",
                              path);
        }
        small_left += m_small && m_small->contains(ns, id) ? 1 : 0;
    }
    if (small_left > 0) {
        // They must not be served after a restart, and nothing can be
        // written (a full filesystem): the store is removed, which needs no
        // space and frees its own. Its other entries are lost with it,
        // never served stale.
        const std::string& path = m_small->path();
        if (::unlink(path.c_str()) == 0) {
            logger().error("{} replaced small entries could not be deleted from {}: removed it "
                           "(its entries are lost)",
                           small_left, path);
        } else {
            logger().critical("{} replaced small entries could not be deleted from {}, nor the "
                              "file removed ({}): delete it before the next start, which would "
                              "serve them",
                              small_left, path, errno_text(errno));
        }
    }
    m_stats.daemon().writes_abandoned.fetch_add(left.size(), std::memory_order_relaxed);
}

bool DiskTier::replaced_pending(const Hash128& id) {
    if (m_replaced_count.load(std::memory_order_acquire) == 0) {
        return false; // the usual case: no lock
    }
    std::lock_guard lock(m_replaced_mutex);
    return m_replaced.contains(id);
}

bool DiskTier::salvage_pending() {
    // A quarantine swaps the store before its callback queues the salvage:
    // one not handled yet counts as pending too.
    if (m_small &&
        m_small->quarantines() != m_quarantines_handled.load(std::memory_order_acquire)) {
        return true;
    }
    std::lock_guard lock(m_mutex);
    return m_salvage_job.has_value() || m_salvage_running;
}

bool DiskTier::hidden_name(std::string_view ns, std::string_view entry_name) {
    const bool replaced = m_replaced_count.load(std::memory_order_acquire) != 0;
    if (!replaced && !m_deleting.any()) {
        return false;
    }
    const auto id = parse_entry_name(entry_name);
    return id && ((replaced && replaced_pending(*id)) || m_deleting.hides(ns, *id));
}

void DiskTier::clear_replaced(const Hash128& id) {
    if (m_replaced_count.load(std::memory_order_acquire) == 0) {
        return;
    }
    std::lock_guard lock(m_replaced_mutex);
    m_replaced.erase(id);
    m_replaced_count.store(m_replaced.size(), std::memory_order_release);
}

void DiskTier::put_back_stored(std::span<const DiskIndex::Victim> victims) {
    // The oldest last: the least recently used again.
    for (auto it = victims.rbegin(); it != victims.rend(); ++it) {
        if (!replaced_pending(it->id) && m_small->contains(it->ns, it->id)) {
            m_index.put_back(*it);
        }
    }
}

std::uint64_t DiskTier::evict_small(std::vector<DiskIndex::Victim>& victims, bool& failed) {
    if (victims.empty() || !m_small) {
        victims.clear();
        return 0;
    }
    std::vector<Hash128> ids;
    for (const auto& victim : victims) {
        ids.push_back(victim.id);
    }
    const auto locks = lock_stripes(ids);
    std::vector<SmallKeyRef> keys;
    for (const auto& victim : victims) {
        // Written again since it was chosen: no longer a victim.
        if (!m_index.contains(victim.id)) {
            keys.push_back({victim.ns, victim.id});
            // A file left behind by an interrupted migration goes too.
            ::unlink(m_layout.entry_path(victim.ns, victim.id.hex()).c_str());
        }
    }
    std::uint64_t evicted = 0;
    if (auto erased = m_small->erase(keys); !erased) {
        static LogThrottle throttle(1'000);
        if (const auto left_out = throttle.take()) {
            logger().warn("cannot evict from {}: {}{}", m_small->path(), erased.error(),
                          left_out_note(*left_out));
        }
        // Still stored: indexed again, or they would hold their space
        // unseen until a restart's scan.
        put_back_stored(victims);
        failed = true;
    } else {
        evicted = *erased;
        for (const SmallKeyRef& key : keys) {
            m_stats.tier(key.ns, TierId::disk).evictions.fetch_add(1, std::memory_order_relaxed);
        }
    }
    victims.clear();
    return evicted;
}

void DiskTier::compact_if_needed(bool at_startup) {
    if (!m_small) {
        return;
    }
    const std::uint64_t file = m_small->file_bytes();
    const std::uint64_t used = m_small->used_bytes();
    const bool needed =
        at_startup ? file > (1ULL << 20) && (file - std::min(file, used)) * 4 > file
                   : m_index.file_bytes() + file > m_options.max_size && file > used + 4 * k_page;
    const auto measure_overhead = [this] {
        const std::uint64_t size = m_small->file_bytes();
        const std::uint64_t charged = m_index.small_bytes();
        m_small_overhead.store(size > charged ? size - charged : 0, std::memory_order_relaxed);
    };
    if (!needed) {
        if (!at_startup && m_index.file_bytes() + file > m_options.max_size) {
            measure_overhead(); // tight already: the estimate is short
        }
        return;
    }
    const auto started = std::chrono::steady_clock::now();
    if (auto compacted = m_small->compact(); !compacted) {
        // Measured all the same: eviction must see what the file holds
        // beyond its entries, or it never gets under max_size.
        measure_overhead();
        static LogThrottle throttle(60'000);
        if (const auto left_out = throttle.take()) {
            logger().warn("cannot compact {}: {}{}", m_small->path(), compacted.error(),
                          left_out_note(*left_out));
        }
        return;
    }
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - started);
    measure_overhead();
    logger().info("compacted {}: {} -> {} bytes in {} ms", m_small->path(), file,
                  m_small->file_bytes(), took.count());
}

} // namespace pt2cache::daemon::store
