// SPDX-License-Identifier: MIT
#include "daemon/store/disk/disk_small_salvage.hpp"

#include <cstring>
#include <lmdb.h>
#include <optional>
#include <string_view>
#include <utility>

#include "daemon/store/disk/disk_small_lmdb.hpp"
#include "daemon/store/disk/fault_guard.hpp"

#include <fmt/format.h>

namespace pt2cache::daemon::store {

using namespace small_lmdb;

namespace {

// No lock file: nothing else opens small.mdb.broken, and the file is only read.
constexpr unsigned k_salvage_flags = MDB_RDONLY | MDB_NOSUBDIR | MDB_NOLOCK | MDB_NOTLS;

// Seeking past damage: the id space of a namespace in this many steps.
constexpr std::uint64_t k_seek_step = std::uint64_t{1} << 52U; // 2^64 / 4096
constexpr std::uint64_t k_max_faults = 64;                     // each leaves an environment behind
constexpr std::uint64_t k_max_skips = 100'000;

std::string_view view_of(const MDB_val& value) {
    return {static_cast<const char*>(value.mv_data), value.mv_size};
}

// The next step of the id space after `from` (a key or a seek position):
// the next namespace when past the last step; nullopt when `from` names no
// id (nothing to step from).
std::optional<std::string> next_step(const std::string& from) {
    std::string_view ns;
    Hash128 id;
    if (!split_key(val_of(from), ns, id)) {
        return std::nullopt;
    }
    if (id.high >= UINT64_MAX - k_seek_step) {
        return std::string(ns) + '\x01'; // sorts after every key of `ns`
    }
    Hash128 next;
    next.high = (id.high / k_seek_step + 1) * k_seek_step;
    return make_key(ns, next);
}

} // namespace

SmallSalvage::SmallSalvage(std::string path, std::size_t max_value)
    : m_path(std::move(path))
    , m_max_value(max_value) {}

SmallSalvage::~SmallSalvage() = default;

tl::expected<std::unique_ptr<SmallSalvage>, std::string>
SmallSalvage::open(const std::string& path, std::uint64_t txnid, std::size_t max_value) {
    install_fault_handlers();
    std::unique_ptr<SmallSalvage> salvage(new SmallSalvage(path, max_value));
    if (auto opened = salvage->open_env(); !opened) {
        return tl::make_unexpected(std::move(opened.error()));
    }
    const std::uint64_t found_txnid = salvage->m_env->last_txnid.load();
    if (found_txnid != txnid) {
        return tl::make_unexpected(
            fmt::format("{} holds transaction {}, not {}, the last one the store committed", path,
                        found_txnid, txnid));
    }
    return salvage;
}

tl::expected<void, std::string> SmallSalvage::open_env() {
    auto env = std::make_unique<SmallStore::Env>();
    if (const int rc = mdb_env_create(&env->env); rc != 0) {
        env->env = nullptr;
        return tl::make_unexpected(fmt::format("mdb_env_create: {}", mdb_text(rc)));
    }
    mdb_env_set_assert(env->env, leave_on_assert);
    mdb_env_set_maxdbs(env->env, 4);
    int rc = 0;
    auto open_file = [&] { rc = mdb_env_open(env->env, m_path.c_str(), k_salvage_flags, 0600); };
    if (!run_guarded(open_file)) {
        keep_abandoned(env.release());
        return tl::make_unexpected(fmt::format("opening {}: LMDB faulted on its pages", m_path));
    }
    if (rc != 0) {
        return tl::make_unexpected(fmt::format("cannot open {}: {}", m_path, mdb_text(rc)));
    }
    Txn txn(env->env, true, rc);
    if (rc != 0) {
        return tl::make_unexpected(fmt::format("{}: mdb_txn_begin: {}", m_path, mdb_text(rc)));
    }
    MDB_stat stat{};
    auto open_entries = [&] {
        if (rc = mdb_dbi_open(txn.get(), "entries", 0, &env->entries); rc == 0) {
            rc = mdb_stat(txn.get(), env->entries, &stat);
        }
    };
    if (!run_guarded(open_entries)) {
        keep_abandoned(txn.get());
        txn.forget();
        keep_abandoned(env.release());
        return tl::make_unexpected(fmt::format("opening {}: LMDB faulted on its pages", m_path));
    }
    env->last_txnid.store(mdb_txn_id(txn.get()));
    if (rc == 0) {
        rc = txn.commit(); // a read transaction's commit keeps the database handle
    }
    if (rc != 0) {
        return tl::make_unexpected(
            fmt::format("{}: cannot open its entries: {}", m_path, mdb_text(rc)));
    }
    m_entries = stat.ms_entries;
    m_env = std::move(env);
    return {};
}

void SmallSalvage::damaged(std::string why, bool faulted) {
    m_faults += faulted ? 1 : 0;
    const bool first = m_damage.empty();
    if (first) {
        m_damage = why;
    }
    if (m_phase == Phase::forward && m_faults < k_max_faults && m_skips < k_max_skips) {
        // From the furthest point reached: the last seek, when it failed
        // before returning a key past it.
        const std::string& from = m_forward_seek > m_forward_last ? m_forward_seek : m_forward_last;
        if (auto next = next_step(from)) {
            ++m_skips;
            m_forward_seek = std::move(*next);
            return;
        }
    }
    if (!first) {
        m_damage += "; " + why;
    }
    m_phase = m_phase == Phase::forward ? Phase::backward : Phase::done;
}

std::vector<SalvagedRecord> SmallSalvage::next(std::size_t max_bytes) {
    std::vector<SalvagedRecord> out;
    while (out.empty() && m_phase != Phase::done) {
        walk(out, max_bytes);
    }
    return out;
}

void SmallSalvage::walk(std::vector<SalvagedRecord>& out, std::size_t max_bytes) {
    if (!m_env) {
        if (auto opened = open_env(); !opened) {
            m_phase = Phase::done;
            m_damage += "; " + opened.error();
            return;
        }
    }
    int rc = 0;
    Txn txn(m_env->env, true, rc);
    if (rc != 0) {
        damaged(fmt::format("mdb_txn_begin: {}", mdb_text(rc)), false);
        return;
    }
    const bool forward = m_phase == Phase::forward;
    std::string& last = forward ? m_forward_last : m_backward_last;
    std::size_t kept = out.size(); // records copied whole
    std::size_t bytes = 0;
    auto body = [&] {
        Cursor cursor(txn.get(), m_env->entries, rc);
        if (rc != 0) {
            return;
        }
        MDB_val key{};
        MDB_val value{};
        const auto get = [&](MDB_cursor_op op) {
            return mdb_cursor_get(cursor.get(), &key, &value, op);
        };
        // Positioned on the first key not returned yet.
        if (forward && !m_forward_seek.empty()) {
            key = val_of(m_forward_seek);
            rc = get(MDB_SET_RANGE);
        } else if (last.empty()) {
            rc = get(forward ? MDB_FIRST : MDB_LAST);
        } else {
            key = val_of(last);
            rc = get(MDB_SET_RANGE);
            if (forward && rc == 0 && view_of(key) == last) {
                rc = get(MDB_NEXT);
            } else if (!forward) {
                rc = rc == 0 ? get(MDB_PREV) : rc == MDB_NOTFOUND ? get(MDB_LAST) : rc;
            }
        }
        for (; rc == 0 && bytes < max_bytes; rc = get(forward ? MDB_NEXT : MDB_PREV)) {
            if (!forward && !m_forward_last.empty() && view_of(key) <= m_forward_last) {
                rc = MDB_NOTFOUND; // down to where the forward walk stopped
                break;
            }
            std::string_view ns;
            Hash128 id;
            if (split_key(key, ns, id) && value.mv_size <= m_max_value) {
                // Allocated before the copy, which may fault: `out` then
                // still owns the buffer, and the record is dropped.
                SalvagedRecord& record = out.emplace_back();
                record.ns = ns;
                record.id = id;
                record.bytes.resize(value.mv_size);
                std::memcpy(record.bytes.data(), value.mv_data, value.mv_size);
                kept = out.size();
                bytes += value.mv_size;
            }
            last = view_of(key);
            if (forward) {
                m_forward_seek.clear(); // past it
            }
        }
    };
    if (!run_guarded(body)) {
        abandon_open_cursors();
        keep_abandoned(txn.get());
        txn.forget();
        keep_abandoned(m_env.release());
        out.resize(kept);
        damaged(
            fmt::format("walking {}: LMDB faulted on its pages", forward ? "forward" : "backward"),
            true);
        return;
    }
    if (rc == MDB_NOTFOUND) {
        m_phase = Phase::done; // every record read, or the two walks met
    } else if (rc != 0) {
        damaged(fmt::format("walking {}: {}", forward ? "forward" : "backward", mdb_text(rc)),
                false);
    }
}

} // namespace pt2cache::daemon::store
