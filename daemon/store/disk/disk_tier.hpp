// SPDX-License-Identifier: MIT
// The disk tier: self-describing entries (see disk_entry.hpp), small ones in
// one LMDB store (disk_small_store.hpp), the others one file each
// (disk_layout.hpp), written atomically, bounded by size with one LRU
// eviction across both on a background thread.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "daemon/store/disk/deletes_under_way.hpp"
#include "daemon/store/disk/disk_index.hpp"
#include "daemon/store/disk/disk_layout.hpp"
#include "daemon/store/disk/disk_small_store.hpp"
#include "daemon/store/disk/disk_writer.hpp"
#include "daemon/store/disk/shared_reads.hpp"
#include "daemon/store/read_budget.hpp"
#include "daemon/store/stats.hpp"
#include "daemon/store/tier.hpp"

namespace pt2cache::daemon::store {

enum class DiskWriteMode {
    sync,  // put() returns once the entry's file is in place
    async, // put() queues the encoded entry; writer threads write it (disk_writer.hpp)
};

struct DiskOptions {
    std::uint64_t max_size = 10ULL << 30;    // bytes of entry files; 0 disables the tier
    std::uint64_t compress_threshold = 4096; // values at least this big are compressed
    int compress_level = 1;                  // zstd level
    DiskWriteMode write_mode = DiskWriteMode::sync;
    std::uint64_t write_queue_bytes = 64ULL << 20; // async: put() waits while this much is queued
    unsigned writer_threads = 2;                   // async
    // Encoded entries up to this size live in <root>/small.mdb; 0: every entry
    // is a file (an existing small.mdb is still read, never written).
    std::uint64_t small_entry_max = 16ULL << 10;
    std::uint64_t small_map_size = 0; // LMDB map size; 0: max(2 × max_size, 64 MiB)
    // Large values read by get() take their size from it (read_budget.hpp);
    // null: unbounded.
    std::shared_ptr<ReadBudget> read_budget;
};

// Thread-safe. get/put/remove work on paths and small.mdb directly and are
// served from the moment of construction; a background scan builds the index
// meanwhile (small entries from small.mdb's meta records), then migrates small
// files into small.mdb. When the entries exceed `max_size` (as `du` counts
// them), a background thread removes the least recently used ones of either
// store (last read or write; file mtimes and small.mdb's access times across
// restarts) until they fit in 90% of it, compacting small.mdb when needed.
// Broken entries are misses, removed and counted in `Stats` as `corrupt`;
// nothing here throws on bad data. docs/architecture.md, "Small entries in
// LMDB", has the rules.
//
// With `DiskWriteMode::async`, put() encodes the entry and hands it to a
// DiskWriteQueue; get(), exists() and remove() see queued writes, clear()
// cancels them, list() first waits for the writes queued before it, and the
// destructor writes everything still queued. A failed queued write is logged
// and counted as a disk `errors`.
class DiskTier final : public Tier {
public:
    // Starts the scan and eviction threads, and the writer threads in async
    // mode (unless `options.max_size` is 0). `stats` must outlive the tier.
    DiskTier(std::filesystem::path root, DiskOptions options, Stats& stats);
    // Writes what is queued (async mode; see DiskWriteQueue::shutdown), then
    // stops and joins the threads; an unfinished scan is abandoned.
    ~DiskTier() override;
    DiskTier(const DiskTier&) = delete;
    DiskTier& operator=(const DiskTier&) = delete;

    std::string_view name() const override { return "disk"; }

    tl::expected<std::optional<Entry>, StoreError> get(std::string_view ns,
                                                       std::string_view key) override;
    tl::expected<void, StoreError> put(std::string_view ns, std::string_view key,
                                       const Entry& entry) override;
    tl::expected<bool, StoreError> remove(std::string_view ns, std::string_view key) override;
    // put() when it can finish at once, without blocking: async mode, a
    // value below the compression threshold, and room in the write queue.
    // nullopt (nothing done) otherwise.
    std::optional<tl::expected<void, StoreError>> try_put(std::string_view ns, std::string_view key,
                                                          const Entry& entry);
    // try_put for the longest prefix of `puts` that it would take, queued
    // under one lock of the write queue; how many were queued.
    std::size_t try_put_many(std::span<const QuickPut> puts);
    tl::expected<std::uint64_t, StoreError> clear(std::string_view ns) override;

    // True when a live entry of `ns`/`key` exists. Reads only the file's
    // header (the checksum is verified by `get`), leaves its mtime alone.
    tl::expected<bool, StoreError> exists(std::string_view ns, std::string_view key);

    // Entries of `ns` in ascending file-name (hash) order after `cursor` (the
    // last file name of the previous page; empty for the first). At most
    // `limit` entries (at least 1); `next_cursor` is empty on the last page.
    // Broken and expired files are skipped. `size` is the value's size.
    tl::expected<ListPage, StoreError> list(std::string_view ns, std::string_view cursor,
                                            std::size_t limit);

    // Like get, without side effects: the file's mtime (its LRU place) and
    // the index are left alone.
    tl::expected<std::optional<Entry>, StoreError> peek(std::string_view ns, std::string_view key);

    // A page of live entries of every namespace (or of `namespaces`, sorted
    // or not) created at or after `since_ms`, in (namespace, file name) order
    // after `cursor` ("<ns>/<file name>" of the last file examined; empty for
    // the first page). At most `limit` entries and k_scan_files_per_page
    // files examined; `next_cursor` is empty on the last page. disk_tier_walk.cpp.
    tl::expected<ScanPage, StoreError> scan_entries(std::string_view cursor, std::size_t limit,
                                                    UnixMs since_ms,
                                                    const std::vector<std::string>& namespaces);
    static constexpr std::size_t k_scan_files_per_page = 10'000;

    bool enabled() const { return m_options.max_size > 0; }
    std::uint64_t capacity() const { return m_options.max_size; }
    const DiskOptions& options() const { return m_options; }

    bool scan_complete() const { return m_scan_complete.load(std::memory_order_acquire); }
    // True when the tier certainly holds no entry for `ns`/`key`: the startup
    // scan is complete (from then on the index is authoritative: the daemon
    // owns the directory), no queued write holds it and the index has no
    // file for it. Never blocks on I/O; false means "ask get()".
    bool known_absent(std::string_view ns, std::string_view key) const;
    // Space used: the allocated bytes of the entry files the index knows (all
    // of them once the scan is complete) plus small.mdb's (what `du` counts).
    std::uint64_t size_bytes() const;
    // Entries in the small-entry store, as the index knows them.
    std::uint64_t small_bytes_charged() const { return m_index.small_bytes(); }
    // The small-entry store, if open (tests and tools).
    SmallStore* small_store() const { return m_small.get(); }
    // Blocks until the background migration of small files into the
    // small-entry store has finished (tests and tools).
    void wait_for_migration();
    // Writes the noted access times of small entries (done once a second).
    void flush_touches();
    std::size_t count() const { return m_index.count(); }
    // Entries, files or not yet: the index's files plus the queued writes of
    // entries that have no file yet (async mode). What DBSIZE answers.
    std::size_t entry_count() const;

    // Blocks until the startup scan has finished (for tests and tools).
    void wait_for_scan();
    // Blocks until no salvage of a quarantined small-entry store is pending
    // or running (tests and tools). Salvage waits for the startup scan.
    void wait_for_salvage();
    // Tests: while held, a quarantined store waits to be salvaged.
    void hold_salvage(bool held);

    // Async mode: blocks until the writes queued before the call are done.
    void wait_for_writes();
    // Async mode, for tests: while paused, queued writes stay queued.
    void pause_writes(bool paused);
    // Async mode: writes queued or in flight, and the bytes they hold.
    std::size_t queued_writes() const;
    std::uint64_t queued_bytes() const;
    // Async mode: how long the oldest queued or in-flight write has waited.
    std::chrono::steady_clock::duration oldest_queued_age() const;
    bool async_writes() const { return m_writer != nullptr; }

private:
    void scan();
    // get (`touch`: refresh the mtime and the index) and peek.
    tl::expected<std::optional<Entry>, StoreError> load(std::string_view ns, std::string_view key,
                                                        bool touch);
    tl::expected<std::optional<Entry>, StoreError>
    load_file(std::string_view ns, std::string_view key, const Hash128& id, bool touch);
    void evict_loop();
    void wake_evictor_if_needed();
    // A write failed for want of space (ENOSPC, EDQUOT): wakes the evictor
    // to make room even below max_size.
    void note_space_short();

    // Writes an encoded entry to a temp file and renames it into place, then
    // records it in the index.
    tl::expected<void, StoreError> write_entry(std::string_view ns, const Hash128& id,
                                               const std::string& hex, const EncodedEntry& encoded);
    // An async write of `entry`, encoded.
    std::shared_ptr<PendingWrite> pending_write(std::string_view ns, std::string_view key,
                                                const Hash128& id, const Entry& entry) const;
    // The writer threads' write: errors are counted and logged (throttled).
    void write_queued(std::span<const PendingWrite* const> batch);
    // Async mode: cancels the queued writes of `ns`; how many of them had no
    // file yet (`clear` counts the files itself).
    std::uint64_t cancel_queued(std::string_view ns);

    // --- the small-entry store (disk_tier_small.cpp) ---
    void open_small_store();
    // Whether an encoded entry of `size` bytes goes to the small-entry store.
    bool routes_small(std::uint64_t size) const;
    // Writes a batch of queued small entries (or one, in sync mode) in one
    // transaction; each write's file copy is removed first. With `report`
    // (the writer threads) failures are logged and counted here, else the
    // first one is returned.
    tl::expected<void, StoreError> write_small(std::span<const PendingWrite* const> batch,
                                               bool report);
    // Removes the small-entry copy of `id`, if any (the caller holds its
    // stripe).
    tl::expected<void, StoreError> remove_small_copy(std::string_view ns, const Hash128& id);
    tl::expected<std::optional<Entry>, StoreError>
    load_small(std::string_view ns, std::string_view key, const Hash128& id, bool touch);
    bool exists_small(std::string_view ns, std::string_view key, const Hash128& id);
    void note_touch(std::string_view ns, const Hash128& id);
    // Loads small.mdb's meta records for the startup scan.
    void scan_small(std::vector<DiskIndex::ScannedFile>& scanned);
    // Moves entry files of at most small_entry_max bytes into the store.
    void migrate(const std::vector<std::pair<std::string, Hash128>>& files);
    // A put or delete of (ns, id) failed while the small-entry store or an
    // entry file may still hold the value it was replacing: that copy must
    // never be served again. The index forgets the key now (caller holds
    // its stripe), and the copies are deleted now or, when they cannot be
    // (a full filesystem fails LMDB's deletes too; EROFS, EACCES or EIO an
    // unlink), by retry_replaced() on every evictor pass and at shutdown.
    void forget_replaced(std::string_view ns, const Hash128& id);
    // Unlinks the entry file of (ns, id): true when it is gone.
    bool unlink_entry_file(std::string_view ns, const Hash128& id);
    // Deletes the copies forget_replaced() could not; how many are left.
    // A mark stays while a salvage may bring its copy back, unless `final`
    // (at destruction: no salvage runs after it).
    std::size_t retry_replaced(bool final = false);
    // At destruction, for the copies retry_replaced(true) left: names each
    // file left (critical: the next start would serve it), and removes
    // small.mdb when it still holds some (its other entries are lost).
    void abandon_replaced();
    // Whether forget_replaced() still has the id (not deleted yet): every
    // read (load, exists, LIST, SCAN) treats it as absent.
    bool replaced_pending(const Hash128& id);
    // Whether a walk (LIST, SCAN) passes over the entry named `entry_name`
    // (its hex name, a file or in small.mdb): replaced by a failed put or
    // delete, or being deleted.
    bool hidden_name(std::string_view ns, std::string_view entry_name);
    // A write of the id succeeded: nothing of it is left to delete.
    void clear_replaced(const Hash128& id);
    // Whether a quarantined store waits for its salvage or is being salvaged.
    bool salvage_pending();
    // Puts victims whose deletion failed back into the index, those still
    // in small.mdb and not replaced meanwhile.
    void put_back_stored(std::span<const DiskIndex::Victim> victims);
    // Deletes a batch of evicted small entries; the number deleted. When
    // the delete fails, the victims go back into the index (they are still
    // stored) and `failed` is set.
    std::uint64_t evict_small(std::vector<DiskIndex::Victim>& victims, bool& failed);
    // Compacts small.mdb when its free pages push the tier over max_size.
    void compact_if_needed(bool at_startup);
    // Puts back what can be read of a quarantined small-entry store and was
    // not changed since (docs/architecture.md, "Salvage"); the evictor's
    // thread runs it.
    void salvage_small(const QuarantinedStore& quarantined);
    // The stripe locks of `ids`, taken in order.
    std::vector<std::unique_lock<std::mutex>> lock_stripes(std::span<const Hash128> ids);
    std::mutex& stripe(const Hash128& id) { return m_stripes[id.low % m_stripes.size()]; }
    void log_write_error(std::string_view ns, std::string_view key, const StoreError& error);

    // A broken file: counted, logged and removed if `path` is still it
    // (`fd` open on it; -1: a symbolic link). Takes the id's stripe, which
    // the _locked variant's caller holds.
    void discard_corrupt(std::string_view ns, const std::string& path, const Hash128& id, int fd,
                         std::string_view reason);
    // For a large value read for a reply (get, not peek): `bytes` held in
    // the read budget until the reply lets the value go (an empty hold
    // otherwise, or without a budget), or Failure::busy when there is no
    // room now.
    tl::expected<ReadHold, StoreError> hold_for_reply(bool large_for_reply, std::uint64_t bytes);
    void discard_corrupt_locked(std::string_view ns, const std::string& path, const Hash128& id,
                                int fd, std::string_view reason);
    tl::expected<void, StoreError> ensure_dirs(std::string_view ns, std::string_view hex);

    const DiskLayout m_layout;
    const DiskOptions m_options;
    Stats& m_stats;
    DiskIndex m_index;
    SharedReads m_shared_reads; // large values read from files, still held
    // Temporary file names' counter; starts at a random value, so that the
    // startup scan tells this process's files from an earlier daemon's of
    // the same pid (pid 1 in a container) without trusting clocks.
    std::atomic<std::uint64_t> m_temp_counter{0};
    std::uint64_t m_temp_counter_start = 0;
    std::atomic<bool> m_final_flush{false}; // the shutdown's flush of the write queue runs
    std::mutex m_replaced_mutex;
    std::unordered_map<Hash128, std::string, Hash128Low> m_replaced; // id -> ns
    std::atomic<std::size_t> m_replaced_count{0}; // m_replaced.size(), read without the lock
    // Quarantines whose salvage on_quarantine has queued (SmallStore counts
    // them as it swaps the store, before the callback).
    std::atomic<std::uint64_t> m_quarantines_handled{0};

    std::mutex m_mutex; // guards the wake-ups below
    std::condition_variable m_wake;
    bool m_stop = false;
    std::atomic<bool> m_stop_requested{false};
    std::atomic<bool> m_scan_complete{false};

    std::thread m_scan_thread;
    std::thread m_evict_thread;

    // Small entries: null when disabled or unavailable (then files only).
    std::unique_ptr<SmallStore> m_small;
    // Puts, removes, eviction and migration of one id, serialised; always
    // taken before an LMDB write transaction. A batch of small writes holds
    // all of them, plus the store's two: ThreadSanitizer tracks at most 64
    // locks held by one thread.
    std::array<std::mutex, 32> m_stripes;
    // Removes and clears between dropping queued writes and deleting the
    // older copies on disk: lookups answer a miss.
    DeletesUnderWay m_deleting;
    std::mutex m_touch_mutex;
    std::vector<std::pair<std::string, Hash128>> m_touched; // small entries read since the flush
    std::atomic<bool> m_migration_done{false};
    std::atomic<bool> m_small_map_full{false}; // a write hit MDB_MAP_FULL: evict
    // A write found the filesystem full (ENOSPC, EDQUOT) below max_size:
    // the evictor makes room for a tenth of the cache.
    std::atomic<bool> m_space_short{false};
    // A quarantined store to salvage, and whether a salvage runs (m_mutex).
    std::optional<QuarantinedStore> m_salvage_job;
    bool m_salvage_running = false;
    bool m_salvage_held = false;
    // Held by a salvage while it checks, writes and records a batch, and by
    // clear() for its small entries: a batch is never written after a CLEAR
    // of its namespace and recorded before the CLEAR forgets that namespace.
    std::mutex m_salvage_mutex;
    // small.mdb's size after the last compaction minus the small entries'
    // charges: what the estimate missed, charged on top of it.
    std::atomic<std::uint64_t> m_small_overhead{0};

    // Async mode only; reset first by the destructor.
    std::unique_ptr<DiskWriteQueue> m_writer;
    std::atomic<UnixMs> m_write_error_logged_ms{0};
    std::atomic<std::uint64_t> m_write_errors_unlogged{0};
};

} // namespace pt2cache::daemon::store
