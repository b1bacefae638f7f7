// SPDX-License-Identifier: MIT
// The LMDB details shared by disk_small_store.cpp and disk_small_store_env.cpp:
// key and meta encodings (docs/architecture.md, "Small entries in LMDB"),
// transaction and cursor guards, the environment. Internal to SmallStore.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <lmdb.h>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "daemon/store/disk/disk_small_store.hpp"

#include <fmt/format.h>

namespace pt2cache::daemon::store::small_lmdb {

inline constexpr std::uint32_t k_format_version = 1;
inline constexpr unsigned k_max_readers = 512;
inline constexpr std::size_t k_id_size = 16;
inline constexpr std::size_t k_meta_size = 12; // size:u32, atime_ms:i64
inline constexpr unsigned k_env_flags = MDB_NOSUBDIR | MDB_NOTLS | MDB_NOMETASYNC;
// SmallStore::in_txn's code for a memory fault (outside LMDB's codes and errno's).
inline constexpr int k_fault = -29999;

// <ns> 0x00 <id: high then low, big-endian>
inline std::string make_key(std::string_view ns, const Hash128& id) {
    std::string key(ns);
    key.push_back('\0');
    for (const std::uint64_t half : {id.high, id.low}) {
        for (int shift = 56; shift >= 0; shift -= 8) {
            key.push_back(static_cast<char>((half >> shift) & 0xFFU));
        }
    }
    return key;
}

// Splits a key made by `make_key`; false for anything else.
inline bool split_key(const MDB_val& key, std::string_view& ns, Hash128& id) {
    const auto* bytes = static_cast<const unsigned char*>(key.mv_data);
    if (key.mv_size < k_id_size + 2 || bytes[key.mv_size - k_id_size - 1] != 0) {
        return false;
    }
    ns = std::string_view(static_cast<const char*>(key.mv_data), key.mv_size - k_id_size - 1);
    const unsigned char* raw = bytes + ns.size() + 1;
    id = Hash128{};
    for (std::size_t i = 0; i < 8; ++i) {
        id.high = (id.high << 8U) | raw[i];
        id.low = (id.low << 8U) | raw[8 + i];
    }
    return true;
}

inline MDB_val val_of(std::string_view text) {
    return MDB_val{text.size(), const_cast<char*>(text.data())};
}

inline std::array<unsigned char, k_meta_size> meta_value(std::uint32_t size, UnixMs atime) {
    std::array<unsigned char, k_meta_size> out{};
    for (std::size_t i = 0; i < 4; ++i) {
        out[i] = static_cast<unsigned char>((size >> (8 * i)) & 0xFFU);
    }
    const auto time = static_cast<std::uint64_t>(atime);
    for (std::size_t i = 0; i < 8; ++i) {
        out[4 + i] = static_cast<unsigned char>((time >> (8 * i)) & 0xFFU);
    }
    return out;
}

inline bool parse_meta(const MDB_val& value, std::uint32_t& size, UnixMs& atime) {
    if (value.mv_size != k_meta_size) {
        return false;
    }
    const auto* bytes = static_cast<const unsigned char*>(value.mv_data);
    size = 0;
    std::uint64_t time = 0;
    for (std::size_t i = 0; i < 4; ++i) {
        size |= static_cast<std::uint32_t>(bytes[i]) << (8 * i);
    }
    for (std::size_t i = 0; i < 8; ++i) {
        time |= static_cast<std::uint64_t>(bytes[4 + i]) << (8 * i);
    }
    atime = static_cast<UnixMs>(time);
    return true;
}

inline std::string mdb_text(int rc) {
    return fmt::format("{} ({})", mdb_strerror(rc), rc);
}

// LMDB's answers that mean "this file is no store of ours".
inline bool is_refusal(int rc) {
    return rc == MDB_INVALID || rc == MDB_VERSION_MISMATCH || rc == MDB_CORRUPTED ||
           rc == MDB_PAGE_NOTFOUND || rc == MDB_INCOMPATIBLE || rc == MDB_BAD_DBI || rc == EINVAL;
}

// LMDB's answers that mean the tree it was walking is inconsistent: a page
// of the wrong kind where a leaf should be, a page number past the end.
inline bool is_corruption(int rc) {
    return rc == MDB_CORRUPTED || rc == MDB_PAGE_NOTFOUND;
}

// mdb_env_set_assert's callback: a failed LMDB assertion (a corrupt tree can
// fail them) leaves the guarded call (fault_guard.hpp) instead of aborting.
void leave_on_assert(MDB_env* env, const char* message);

// A transaction aborted unless committed.
class Txn {
public:
    Txn(MDB_env* env, bool read_only, int& rc) {
        rc = mdb_txn_begin(env, nullptr, read_only ? MDB_RDONLY : 0U, &m_txn);
        if (rc != 0) {
            m_txn = nullptr;
        }
    }
    ~Txn() {
        if (m_txn != nullptr) {
            mdb_txn_abort(m_txn);
        }
    }
    Txn(const Txn&) = delete;
    Txn& operator=(const Txn&) = delete;
    MDB_txn* get() const { return m_txn; }
    int commit() {
        const int rc = mdb_txn_commit(m_txn);
        m_txn = nullptr;
        return rc;
    }
    void abort() {
        if (m_txn != nullptr) {
            mdb_txn_abort(std::exchange(m_txn, nullptr));
        }
    }
    // Leaves the transaction as it is, never to be used again (a fault
    // interrupted LMDB inside it: aborting could free what it half built).
    void forget() { m_txn = nullptr; }

private:
    MDB_txn* m_txn = nullptr;
};

// What a fault interrupted (fault_guard.hpp): an environment, a transaction,
// cursors. Never used or freed again, but kept reachable (LeakSanitizer
// would report them as leaks otherwise). Thread-safe.
void keep_abandoned(const void* what);

// The cursors this thread has open, so that those a fault skipped the
// closing of can be kept (abandon_open_cursors).
inline thread_local std::vector<MDB_cursor*> t_open_cursors;

inline void abandon_open_cursors() {
    for (MDB_cursor* cursor : t_open_cursors) {
        keep_abandoned(cursor);
    }
    t_open_cursors.clear();
}

class Cursor {
public:
    Cursor(MDB_txn* txn, MDB_dbi dbi, int& rc) {
        // Reads the database's record first (on a stack cursor): opening a
        // cursor reads it too, after allocating the cursor, and a fault
        // there would leave an allocation no one knows of.
        MDB_stat stat{};
        if (rc = mdb_stat(txn, dbi, &stat); rc != 0) {
            return;
        }
        rc = mdb_cursor_open(txn, dbi, &m_cursor);
        if (rc != 0) {
            m_cursor = nullptr;
            return;
        }
        t_open_cursors.push_back(m_cursor);
    }
    ~Cursor() {
        if (m_cursor != nullptr) {
            std::erase(t_open_cursors, m_cursor);
            mdb_cursor_close(m_cursor);
        }
    }
    Cursor(const Cursor&) = delete;
    Cursor& operator=(const Cursor&) = delete;
    MDB_cursor* get() const { return m_cursor; }

private:
    MDB_cursor* m_cursor = nullptr;
};

} // namespace pt2cache::daemon::store::small_lmdb

namespace pt2cache::daemon::store {

struct SmallStore::Env {
    MDB_env* env = nullptr;
    MDB_dbi entries = 0;
    MDB_dbi meta = 0;
    MDB_dbi info = 0;
    std::size_t page_size = 4096;
    // The last committed transaction, as of the last commit or open: what a
    // salvage of the file expects to find (disk_small_salvage.hpp).
    std::atomic<std::uint64_t> last_txnid{0};

    ~Env() {
        if (env != nullptr) {
            mdb_env_close(env);
        }
    }
};

} // namespace pt2cache::daemon::store
