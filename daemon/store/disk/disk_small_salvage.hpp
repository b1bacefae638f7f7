// SPDX-License-Identifier: MIT
// Reads what can still be read of a quarantined small-entry store
// (small.mdb.broken), so that the disk tier can put its entries back: the
// rules are in docs/architecture.md, "Salvage". Its own read-only LMDB
// environment, every call that reads the file's pages guarded
// (fault_guard.hpp). The walk goes forward from the first key. Where LMDB
// faults or reports the tree corrupt, it seeks past the damage: to the first
// key at or after the next of 4096 even steps of the namespace's id space
// (ids are uniform hashes), and on from there. After 64 faults or 100,000
// failed seeks, or damage it cannot seek past (before the first key, after
// a namespace's last step), it walks backward from the last key down to where
// it stopped. Damage costs about the entries of the damaged pages.
// Values are returned as found; verifying them is the caller's job.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "daemon/store/disk/disk_small_store.hpp"
#include "daemon/store/xxh3.hpp"

#include <tl/expected.hpp>

namespace pt2cache::daemon::store {

struct SalvagedRecord {
    std::string ns;
    Hash128 id;
    std::vector<std::byte> bytes; // the stored value, unverified
};

// Not thread-safe: one walk, on one thread.
class SmallSalvage {
public:
    // Opens `path` read-only. Refuses a file whose last committed transaction
    // is not `txnid`: its newest meta page is damaged (LMDB would read the
    // tree one commit older, with entries removed since), or it was written
    // after the store let it go. Values over `max_value` bytes are skipped.
    static tl::expected<std::unique_ptr<SmallSalvage>, std::string>
    open(const std::string& path, std::uint64_t txnid, std::size_t max_value);
    ~SmallSalvage();
    SmallSalvage(const SmallSalvage&) = delete;
    SmallSalvage& operator=(const SmallSalvage&) = delete;

    // The next records, up to about `max_bytes` of values; empty once the
    // walk is over.
    std::vector<SalvagedRecord> next(std::size_t max_bytes);

    // How many entries the tree's header says the store held.
    std::uint64_t entries() const { return m_entries; }
    // Why the walk could not read every record; empty when it could.
    const std::string& damage() const { return m_damage; }
    // How many times the forward walk met damage and sought past it.
    std::uint64_t skips() const { return m_skips; }

private:
    enum class Phase { forward, backward, done };

    SmallSalvage(std::string path, std::size_t max_value);
    tl::expected<void, std::string> open_env();
    // One guarded read transaction of the walk, appending to `out`.
    void walk(std::vector<SalvagedRecord>& out, std::size_t max_bytes);
    // The walk met damage (`why`): the forward walk seeks past it if it can,
    // else goes on backward; the backward walk ends.
    void damaged(std::string why, bool faulted);

    const std::string m_path;
    const std::size_t m_max_value;
    std::unique_ptr<SmallStore::Env> m_env; // null after a fault, until reopened
    Phase m_phase = Phase::forward;
    std::string m_forward_last; // the last key the forward walk returned
    std::string m_forward_seek; // where the forward walk goes on, past damage
    std::uint64_t m_skips = 0;
    std::uint64_t m_faults = 0;
    std::string m_backward_last; // the last key the backward walk returned
    std::uint64_t m_entries = 0;
    std::string m_damage;
};

} // namespace pt2cache::daemon::store
