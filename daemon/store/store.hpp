// SPDX-License-Identifier: MIT
// The store: memory, disk and remote tiers chained behind one API. Plain C++,
// thread-safe; the daemon calls it from worker threads (only `get_quick` and
// `put_quick` are meant for the I/O threads: they never block for long).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/store/disk/disk_tier.hpp"
#include "daemon/store/log.hpp"
#include "daemon/store/memory/memory_tier.hpp"
#include "daemon/store/single_flight.hpp"
#include "daemon/store/stats.hpp"
#include "daemon/store/tier.hpp"

#include <nlohmann/json.hpp>

namespace pt2cache::daemon::store {

struct StorePolicy {
    // Every get misses and nothing is stored (TORCHINDUCTOR_FORCE_DISABLE_CACHES);
    // lookups and puts are still counted.
    bool force_disable = false;
    // Namespaces kept out of the memory and disk tiers (e.g. "fx-graph" when
    // TORCHINDUCTOR_FX_GRAPH_CACHE=0); the remote tier still serves them.
    std::set<std::string> locally_disabled;
    // Larger values are refused with `Failure::too_large`.
    std::uint64_t max_value_size = 512ULL << 20;
    // Namespaces the remote tier serves (its per-namespace switches);
    // nullopt: every namespace.
    std::optional<std::set<std::string>> remote_namespaces;
    // The remote tier is read, never written to or deleted from.
    bool remote_read_only = false;
    // How long a get waits for a concurrent get of the same key to bring the
    // remote's answer (single flight) before it counts as a timeout.
    std::uint64_t remote_wait_ms = 2000;
};

enum class PutMode { overwrite, only_if_absent, only_if_present };
// Whether a put keeps the expiry time it is given, or takes that of the entry
// it replaces (none when there is none: SET's KEEPTTL).
enum class PutExpiry { as_given, keep_stored };
enum class PutOutcome { stored, not_stored };

// Counting rules, per namespace and tier in `Stats`:
// - a lookup counts one hit or miss in each tier it consults, in order, up to
//   the hit; a tier error counts an error and a miss;
// - a put counts `puts` and `bytes_in` (value bytes) in each tier written;
//   refilling a faster tier after a hit in a slower one is not counted;
// - `bytes_out` counts value bytes served by the tier that hit;
// - a remote tier answering `Failure::unavailable` (suspended, or no remote
//   form for the namespace) was not consulted: nothing is counted for it.
// Concurrent gets of one key that reach the remote tier send it one get
// (single flight); the first of them copies a hit into disk and memory.
class Store {
public:
    // Any tier may be null; a disabled tier (capacity 0) counts as absent.
    Store(Stats& stats, StorePolicy policy, std::unique_ptr<MemoryTier> memory,
          std::unique_ptr<DiskTier> disk, std::unique_ptr<Tier> remote);
    ~Store();
    Store(const Store&) = delete;
    Store& operator=(const Store&) = delete;

    // What `get` would answer, when that can be told without blocking: a
    // memory hit, or a miss the indexes prove (the memory tier misses, the
    // disk tier's index is complete and has no such entry, and no remote
    // tier serves `ns`). Counted as `get` counts. nullopt: call `get` (on a
    // worker thread). Meant for the I/O threads.
    // A hit stores its tier in `*hit_tier` when given.
    std::optional<std::optional<Entry>> get_quick(std::string_view ns, std::string_view key,
                                                  LatencyTier* hit_tier = nullptr);

    // What `put` would do, when it can be done without blocking: an
    // overwrite of a local namespace with `created_ms` set, the disk tier
    // asynchronous with room in its write queue now, and a value below the
    // compression threshold (the remote tier only queues). Counted as `put`
    // counts. nullopt: nothing was done; call `put` (on a worker thread).
    // Meant for the I/O threads.
    std::optional<tl::expected<PutOutcome, StoreError>>
    put_quick(std::string_view ns, std::string_view key, const Entry& entry, PutMode mode);
    // put_quick (an overwrite) of the longest prefix of `puts` that it takes,
    // each tier taking them all under one lock (a pipeline's SETs); how many
    // were stored. The rest: put_quick or `put`, in order.
    std::size_t put_quick_many(std::span<const QuickPut> puts);

    // The memory tier's share of a put, alone (a bundle's entries, served
    // at once; put_disk_behind follows). Counted as a write (see WriteCounts).
    tl::expected<void, StoreError> put_memory(std::string_view ns, std::string_view key,
                                              const Entry& entry);
    // The disk copy of an entry put_memory stored, if memory still holds that
    // very value (no write of the key since): true when written. On a worker.
    tl::expected<bool, StoreError> put_disk_behind(std::string_view ns, std::string_view key,
                                                   const Entry& entry);

    // Large values (SharedReads::k_min_value_size and more) that a remote get
    // returns are charged to `reads` until their last copy is gone, as the
    // disk tier's reads are (DiskOptions::read_budget). Redis's reply is read
    // before its size is known: it is charged whatever the budget holds, and
    // the reads after it wait. Set before the store serves.
    void set_read_budget(std::shared_ptr<ReadBudget> reads) { m_reads = std::move(reads); }

    // Memory, then disk, then remote. A disk hit is copied into memory, a
    // remote hit into disk and memory (counted as a remote `backfills`). A failing tier is treated
    // as a miss there; an error is returned only when every tier consulted failed.
    // A hit stores its tier in `*hit_tier` when given.
    tl::expected<std::optional<Entry>, StoreError> get(std::string_view ns, std::string_view key,
                                                       LatencyTier* hit_tier = nullptr);

    // Writes memory and disk (synchronously), then remote (unless read-only;
    // the Redis tier only queues the write). `only_if_absent`
    // stores only when neither memory nor disk holds a live entry, atomically
    // with respect to other puts of the same key; otherwise `not_stored`.
    // `only_if_present` stores only when some tier holds one, and
    // `keep_stored` takes its expiry time: for a local namespace both are
    // decided under the key's write lock, so that no put or remove of the
    // key falls between the look and the write.
    // A value over `max_value_size` fails with `too_large`. A disk failure
    // fails the put (the memory tier may keep the value); a remote failure is
    // counted and logged, and fails the put only if no local tier took it.
    // Under `force_disable` the value is dropped and `stored` returned. A zero
    // `entry.created_ms` is set to now.
    tl::expected<PutOutcome, StoreError> put(std::string_view ns, std::string_view key, Entry entry,
                                             PutMode mode = PutMode::overwrite,
                                             PutExpiry expiry = PutExpiry::as_given);

    // True when some tier holds a live entry (remote is asked last, by a get).
    tl::expected<bool, StoreError> exists(std::string_view ns, std::string_view key);

    // Removes the entry from every tier; true when any tier had it.
    tl::expected<bool, StoreError> remove(std::string_view ns, std::string_view key);

    // Removes every entry of `ns` from memory and disk; returns the larger of
    // the two tiers' counts (an entry usually lives in both).
    tl::expected<std::uint64_t, StoreError> clear(std::string_view ns);

    // A page of `ns`'s entries from the disk tier, or from memory without one.
    // The cursor is opaque and only valid for the same tier configuration.
    tl::expected<ListPage, StoreError> list(std::string_view ns, std::string_view cursor,
                                            std::size_t limit);

    // Export and import (docs/protocol.md, "Export and import";
    // store_export.cpp). `scan` pages through the disk tier's entries (an
    // empty page without one).
    tl::expected<ScanPage, StoreError> scan(std::string_view cursor, std::size_t limit,
                                            UnixMs since_ms,
                                            const std::vector<std::string>& namespaces);
    // The entry in the local tiers (disk, or memory without one), without
    // side effects: not counted, no refill, no LRU refresh, no remote.
    tl::expected<std::optional<Entry>, StoreError> dump(std::string_view ns, std::string_view key);
    // Stores `entry` in the local tiers (never the remote one) unless, without
    // `replace`, a live local entry is at least as recent (`created_ms`), or
    // the entry has expired, or the policy keeps `ns` out of the local tiers:
    // then `not_stored`. Atomic with respect to other puts of the key.
    tl::expected<PutOutcome, StoreError> restore(std::string_view ns, std::string_view key,
                                                 Entry entry, bool replace);

    // {"memory": {bytes, count, capacity} | null,
    //  "disk": {bytes, count, capacity, scan_complete} | null,
    //  "remote": {name} | null}
    nlohmann::json tier_summary() const;

    // Entries of every namespace (DBSIZE): the disk tier's when there is one,
    // its queued writes included, else the memory tier's.
    std::size_t entry_count() const;

    // The policy in force; `set_policy` replaces it for later calls (calls in
    // progress finish under the old one).
    std::shared_ptr<const StorePolicy> policy() const;
    void set_policy(StorePolicy policy);

    Stats& stats() { return m_stats; }
    MemoryTier* memory_tier() const { return m_memory.get(); }
    DiskTier* disk_tier() const { return m_disk.get(); }
    Tier* remote_tier() const { return m_remote.get(); }

private:
    static constexpr std::size_t k_stripe_count = 64;

    // `too_large` when the value is over the policy's max_value_size.
    static tl::expected<void, StoreError> check_value_size(const StorePolicy& policy,
                                                           const Entry& entry);

    // Writes of a stripe's keys (puts, removes, clears), counted as they
    // begin and end. A backfill (a lower tier's value copied up) lands only
    // where no write was under way when it read the value and none has begun
    // since: else it could bring back what a later put replaced or a delete
    // removed. A write holds its stripe's mutex from its first local tier to
    // its last (WriteScope), so that concurrent writes of a key leave memory
    // and disk in the same state, and a remote hit's copy to disk, checked
    // and queued under it, comes wholly before or after a write. An I/O
    // thread only tries the mutex (put_quick_many).
    struct WriteCounts {
        std::atomic<std::uint64_t> begun{0};
        std::atomic<std::uint64_t> ended{0};
        // Deletes of the stripe's keys from Redis, which a remove makes
        // after its local write (begun under the stripe's lock).
        std::atomic<std::uint64_t> remote_deletes_begun{0};
        std::atomic<std::uint64_t> remote_deletes_ended{0};
    };
    class WriteScope;
    // What a conditional put (only_if_present, keep_stored) looks at: the
    // expiry time (0: none) of the live entry of the local tiers, nullopt
    // when there is none; `exact` false: any value for a live disk entry
    // (its header is read, not its value). Counts nothing.
    tl::expected<std::optional<UnixMs>, StoreError> local_expiry(std::string_view ns,
                                                                 std::string_view key, bool exact);
    // The same of Redis's entry, asked directly (not through a single
    // flight, whose leader may backfill); unavailable counts as none.
    tl::expected<std::optional<UnixMs>, StoreError> remote_expiry(std::string_view ns,
                                                                  std::string_view key);
    static void add(std::atomic<std::uint64_t>& counter, std::uint64_t amount = 1) {
        counter.fetch_add(amount, std::memory_order_relaxed);
    }
    static bool is_local(const StorePolicy& policy, std::string_view ns) {
        // Usually empty: then no string is made for every request.
        return policy.locally_disabled.empty() ||
               !policy.locally_disabled.contains(std::string(ns));
    }
    static std::size_t stripe_of(std::string_view ns, std::string_view key);
    // The key of m_remote_flights for an entry.
    static std::string remote_flight_key(std::string_view ns, std::string_view key);
    void begin_write(std::size_t stripe);
    // begin_write unless the stripe's mutex is held (another write, or a
    // remote hit being copied to disk, which may wait for room in the write
    // queue): false.
    bool try_begin_write(std::size_t stripe);
    void end_write(std::size_t stripe);
    // The stripe's count of writes begun, when none is under way.
    std::optional<std::uint64_t> quiet_mark(std::size_t stripe) const;
    bool unchanged(std::size_t stripe, std::uint64_t mark) const;
    // Under the stripe's write lock: whether the write holding it is the
    // only one begun since `mark`.
    bool only_write_since(std::size_t stripe, std::uint64_t mark) const;
    // The stripe's count of deletes from Redis begun, when none is under
    // way; whether one is under way now.
    std::optional<std::uint64_t> quiet_remote_deletes(std::size_t stripe) const;
    bool remote_delete_under_way(std::size_t stripe) const;
    // Copies `entry`, read from a lower tier after `mark`, into memory.
    void backfill_memory(std::string_view ns, std::string_view key, const Entry& entry,
                         std::size_t stripe, std::optional<std::uint64_t> mark);
    void count_force_disabled_get(std::string_view ns, bool local, bool remote);
    void count_force_disabled_put(std::string_view ns, bool local, bool remote);
    // Writes memory and disk; the disk's error if it fails.
    // The remote tier's share of a put (counted, errors logged).
    tl::expected<void, StoreError> put_remote(std::string_view ns, std::string_view key,
                                              const Entry& entry);
    tl::expected<void, StoreError> put_local(std::string_view ns, std::string_view key,
                                             const Entry& entry);
    // The remote tier's answer for `key`, through the single flight; a hit is
    // copied into the local tiers when `local`. `found_locally` (optional)
    // names the local tier that answered after all (a concurrent get's
    // backfill landed after this caller's own lookups); untouched otherwise.
    tl::expected<std::optional<Entry>, StoreError> remote_get(const StorePolicy& policy,
                                                              std::string_view ns,
                                                              std::string_view key, bool local,
                                                              TierId* found_locally = nullptr);
    bool remote_serves(const StorePolicy& policy, std::string_view ns) const;

    Stats& m_stats;
    // The policy in force, read with one plain load per request (an atomic
    // shared_ptr's load takes a lock and a reference: read-modify-writes on
    // lines every I/O thread shares). Every policy ever set stays alive in
    // m_policies for the store's life, so a reader never holds a freed one;
    // policies are set at start and on a configuration reload, and are small.
    std::atomic<const StorePolicy*> m_policy;
    mutable std::mutex m_policies_mutex;
    std::vector<std::shared_ptr<const StorePolicy>> m_policies;
    const std::unique_ptr<MemoryTier> m_memory;
    const std::unique_ptr<DiskTier> m_disk;
    const std::unique_ptr<Tier> m_remote;
    // Enabled tiers, or null.
    MemoryTier* const m_memory_on;
    DiskTier* const m_disk_on;
    std::array<std::mutex, k_stripe_count> m_stripes;
    std::array<WriteCounts, k_stripe_count> m_writes;
    SingleFlight<tl::expected<std::optional<Entry>, StoreError>> m_remote_flights;
    std::shared_ptr<ReadBudget> m_reads; // null: remote values are not charged
    // A failing remote (error replies, timeouts) fails every request: one
    // line per 10 s for gets, one for puts.
    LogThrottle m_remote_get_log;
    LogThrottle m_remote_put_log;
};

// A write's share of the counts, for its duration.
class Store::WriteScope {
public:
    WriteScope(Store& store, std::size_t stripe)
        : m_store(store)
        , m_stripe(stripe) {
        m_store.begin_write(m_stripe);
    }
    ~WriteScope() { m_store.end_write(m_stripe); }
    WriteScope(const WriteScope&) = delete;
    WriteScope& operator=(const WriteScope&) = delete;

private:
    Store& m_store;
    std::size_t m_stripe;
};

} // namespace pt2cache::daemon::store
