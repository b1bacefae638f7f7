// SPDX-License-Identifier: MIT
// The disk tier's store of small entries: one LMDB environment, small.mdb.
// Layout, flags and the rules around it: docs/architecture.md, "Small entries
// in LMDB". This class knows nothing of the index, eviction or routing; it
// stores encoded entries under (ns, id) and keeps their `meta` records.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/store/disk/disk_entry.hpp"
#include "daemon/store/tier.hpp"
#include "daemon/store/xxh3.hpp"

#include <tl/expected.hpp>

struct MDB_txn; // lmdb.h

namespace pt2cache::daemon::store {

// The largest entry the store ever holds: disk.small_entry_max's own limit
// (config/settings.cpp). A stored size over it is damage.
inline constexpr std::size_t k_small_value_limit = 1 << 20;

struct SmallError {
    bool map_full = false; // MDB_MAP_FULL: the transaction was aborted, nothing written
    std::string message;
    bool no_space = false; // ENOSPC or EDQUOT: the filesystem is full
};

// One entry to store: its encoded bytes in up to three pieces.
struct SmallWrite {
    std::string_view ns;
    Hash128 id;
    std::array<std::span<const std::byte>, 3> parts{};
    UnixMs atime_ms = 0; // 0: the write's `now`

    std::size_t size() const { return parts[0].size() + parts[1].size() + parts[2].size(); }
};

// A `meta` record, as the startup loads it.
struct SmallRecord {
    std::string ns;
    Hash128 id;
    std::uint32_t size = 0;
    UnixMs atime_ms = 0;
};

// A store just quarantined: where its file went, the transaction it last
// committed (what that file should still hold), and the generation of the
// fresh store that replaced it.
struct QuarantinedStore {
    std::string path;
    std::uint64_t txnid = 0;
    std::uint64_t generation = 0;
};

struct SmallKeyRef {
    std::string_view ns;
    Hash128 id;
};

// Thread-safe. Every operation may run on any thread (MDB_NOTLS).
class SmallStore {
public:
    ~SmallStore();
    SmallStore(const SmallStore&) = delete;
    SmallStore& operator=(const SmallStore&) = delete;

    // Opens `path` (creating it), or, when LMDB refuses it, renames it to
    // `<path>.broken`, logs why, sets `recovered` and creates a fresh one.
    // Fails only when no store can be had at all (permissions, no space).
    static tl::expected<std::unique_ptr<SmallStore>, std::string>
    open(const std::string& path, std::uint64_t map_size, bool& recovered);

    // How many entries are stored (from the tree's header: no walk).
    std::size_t size();

    // Calls `fn` for every `meta` record, in key order. A corrupt tree fails
    // it, and quarantines the store.
    tl::expected<void, std::string> load_meta(const std::function<void(SmallRecord&&)>& fn);

    // The stored bytes of (ns, id), copied; nullopt when absent.
    tl::expected<std::optional<std::vector<std::byte>>, std::string> read(std::string_view ns,
                                                                          const Hash128& id);

    // Stores every write (value and meta) in one transaction: all or nothing.
    // Refused as map_full, without trying, once the pages in use would pass
    // 90 % of the map: the rest is kept for deletes.
    tl::expected<void, SmallError> write(std::span<const SmallWrite> writes, UnixMs now);

    // Removes (ns, id) (value and meta) in one transaction; how many existed.
    tl::expected<std::size_t, std::string> erase(std::span<const SmallKeyRef> keys);

    // Removes (ns, id) only if it still holds exactly `bytes`.
    bool erase_if_same(std::string_view ns, const Hash128& id, std::span<const std::byte> bytes);

    // Sets the access time of those keys that still exist, in one transaction.
    void touch(std::span<const SmallKeyRef> keys, UnixMs now);

    // Whether (ns, id) is stored (no value read).
    bool contains(std::string_view ns, const Hash128& id);

    // Up to `limit` ids of `ns` after `after` (all when none), ascending.
    std::vector<Hash128> ids_after(std::string_view ns, const std::optional<Hash128>& after,
                                   std::size_t limit);

    // The namespaces that have entries, sorted.
    std::vector<std::string> namespaces();

    // Removes every entry of `ns`; how many.
    tl::expected<std::uint64_t, std::string> clear(std::string_view ns);

    // Pages in use (every tree, the free list, the metas) and the file's
    // size, in bytes: refreshed after every write.
    std::uint64_t used_bytes() const { return m_used_bytes.load(std::memory_order_relaxed); }
    std::uint64_t file_bytes() const { return m_file_bytes.load(std::memory_order_relaxed); }

    // Copies the entries into a fresh file that replaces the store (a
    // cursor walk of each tree appending to the copy: full pages, no free
    // ones). Writers wait meanwhile; readers only for the swap. A fault in
    // the walk, or a tree it finds inconsistent, quarantines the store
    // (set_on_quarantine).
    tl::expected<void, std::string> compact();

    // A store whose pages made LMDB fault (fault_guard.hpp), or whose tree
    // LMDB reported inconsistent (MDB_CORRUPTED, MDB_PAGE_NOTFOUND), is
    // quarantined: the operation fails, the file moves to `<path>.broken`, a
    // fresh empty store replaces it, and `on_quarantine` runs (on the thread
    // that found it, with no lock of this class held). How many times that
    // happened.
    void set_on_quarantine(std::function<void(const QuarantinedStore&)> on_quarantine);
    std::uint64_t quarantines() const { return m_quarantines.load(std::memory_order_acquire); }
    // Which environment is in use: one more each time it is replaced.
    std::uint64_t generation() const;
    // Quarantines the store, unless it was replaced since `generation`: a
    // value read from it failed verification, or its `meta` records could
    // not be loaded (`why`), so its pages may be damaged too, and no write
    // may touch them (LMDB does not check them: a delete from a damaged leaf
    // overflowed LMDB's page buffer under ASan).
    void set_aside(std::uint64_t generation, std::string_view why);
    // Replaces the store as set_aside does when its file was removed or
    // replaced under the daemon (the cache directory deleted, say): its
    // writes would go on into an unlinked file, lost at the next start.
    void set_aside_if_detached();
    // Runs once in compact()'s copy, after its first entry, inside the
    // guarded read of the store: a test changes the file there, as another
    // process could. Set before use.
    void set_during_copy(std::function<void()> during_copy);
    // Runs in compact() between the copy and the swap, with no lock of this
    // class held: a test quarantines the store there (compaction then drops
    // its copy of the store that was replaced). Set before use.
    void set_after_copy(std::function<void()> after_copy);

    const std::string& path() const { return m_path; }

    struct Env; // the LMDB environment and databases (disk_small_lmdb.hpp)

private:
    // One transaction's work: returns 0, or an LMDB code that aborts it.
    using TxnBody = std::function<int(Env&, MDB_txn*)>;
    // Runs `body` in a transaction under the shared lock; a write transaction
    // commits when `body` returns 0, then the usage is re-measured. Fails when
    // the store is closed or LMDB fails; `rc_out` receives LMDB's code. A
    // memory fault fails it too (rc k_fault) and quarantines the store: the
    // body may own nothing a jump out of it would have to release. A body
    // or commit failing with a corruption code (is_corruption) quarantines
    // it as well, after the transaction is aborted.
    tl::expected<void, std::string> in_txn(bool read_only, const TxnBody& body,
                                           int* rc_out = nullptr);
    SmallStore(std::string path, std::uint64_t map_size);
    // A created, unopened environment with this store's settings.
    tl::expected<std::unique_ptr<Env>, std::string> new_env() const;
    tl::expected<void, std::string> open_env(bool& refused);
    // open_env's part that reads the file's pages.
    tl::expected<void, std::string> open_databases_locked(Env& env, bool& refused);
    // Compaction's copy: a new environment at `path` (replacing any file
    // there), without a lock file, unsynced until compact() syncs it.
    tl::expected<std::unique_ptr<Env>, std::string> create_copy(const std::string& path);
    // Appends every record of `source`'s trees, read in `read`, to `copy`,
    // committing every k_copy_batch_bytes; 0 or an LMDB code.
    int copy_trees(Env& source, MDB_txn* read, Env& copy);
    // Replaces the environment of `generation` (unless another thread
    // already did) by a fresh store, logging `why`; `faulted`: LMDB was
    // interrupted in it (it is never closed).
    void quarantine(std::uint64_t generation, bool faulted, std::string_view why);
    // Opens the store again when an earlier open left it closed (a full
    // filesystem when a quarantine or compaction replaced it): at most
    // once per k_reopen_interval, so that a lasting cause costs little.
    void reopen_if_closed();
    void close_env_locked();
    // Re-measures used and file bytes (caller holds the env lock, shared).
    void refresh_usage_locked();
    // Deletes need pages too (copy-on-write): a delete that hits the map's
    // end grows the map by half and tries again (at most 4 times).
    void grow_map();

    const std::string m_path;
    std::atomic<std::uint64_t> m_map_size;
    // Shared by every operation; exclusive to replace the environment.
    mutable std::shared_mutex m_env_mutex;
    // Held by every write transaction and by compaction's copy.
    std::mutex m_write_mutex;
    std::unique_ptr<Env> m_env;
    // One more each time m_env is replaced (under the exclusive lock): what
    // tells an environment from a later one at the same address.
    std::uint64_t m_generation = 0;
    static constexpr std::chrono::seconds k_reopen_interval{1};
    std::chrono::steady_clock::time_point m_next_reopen; // under the exclusive lock
    std::atomic<std::uint64_t> m_used_bytes{0};
    std::atomic<std::uint64_t> m_file_bytes{0};
    std::atomic<std::uint64_t> m_quarantines{0};
    std::function<void(const QuarantinedStore&)> m_on_quarantine; // set before use
    std::function<void()> m_during_copy;                          // set before use
    std::function<void()> m_after_copy;                           // set before use
};

} // namespace pt2cache::daemon::store
