// SPDX-License-Identifier: MIT
// SmallStore's reads and writes; opening, recovery and compaction are in
// disk_small_store_env.cpp.
#include "daemon/store/disk/disk_small_store.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <lmdb.h>
#include <optional>

#include "daemon/store/disk/disk_small_lmdb.hpp"
#include "daemon/store/disk/fault_guard.hpp"

#include <fmt/format.h>

namespace pt2cache::daemon::store {

using namespace small_lmdb;

namespace {

// A body's answer that aborts its transaction without being an error.
constexpr int k_abort = MDB_NOTFOUND;

// Deletes (ns, id) from both databases; MDB_NOTFOUND when it was absent.
int delete_both(SmallStore::Env& env, MDB_txn* txn, MDB_val& key) {
    const int rc = mdb_del(txn, env.entries, &key, nullptr);
    if (rc != 0 && rc != MDB_NOTFOUND) {
        return rc;
    }
    const int meta = mdb_del(txn, env.meta, &key, nullptr);
    return meta != 0 && meta != MDB_NOTFOUND ? meta : rc;
}

} // namespace

tl::expected<void, std::string> SmallStore::in_txn(bool read_only, const TxnBody& body,
                                                   int* rc_out) {
    int rc = 0;
    const auto fail = [&](std::string_view what) {
        if (rc_out != nullptr) {
            *rc_out = rc;
        }
        return tl::make_unexpected(fmt::format("{} {}: {}", m_path, what, mdb_text(rc)));
    };
    std::shared_lock lock(m_env_mutex);
    if (!m_env) {
        lock.unlock();
        reopen_if_closed();
        lock.lock();
        if (!m_env) {
            return tl::make_unexpected(fmt::format("{} is closed", m_path));
        }
    }
    const std::uint64_t generation = m_generation; // the environment quarantine() may replace
    // Begun inside the guard: it reads the meta pages, past the end of a
    // file truncated under the daemon (SIGBUS).
    std::optional<Txn> txn;
    const char* failed = nullptr;
    auto run = [&] {
        txn.emplace(m_env->env, read_only, rc);
        if (rc != 0) {
            failed = "mdb_txn_begin";
        } else if (rc = body(*m_env, txn->get()); rc != 0) {
            failed = "transaction";
        } else if (!read_only) {
            if (rc = txn->commit(); rc != 0) {
                failed = "commit";
            } else {
                refresh_usage_locked();
            }
        }
    };
    if (!run_guarded(run)) {
        abandon_open_cursors();
        if (txn) { // else the fault came before it was made
            keep_abandoned(txn->get());
            txn->forget();
        }
        lock.unlock();
        quarantine(generation, true, "LMDB faulted on its pages");
        rc = k_fault;
        if (rc_out != nullptr) {
            *rc_out = rc;
        }
        return tl::make_unexpected(
            fmt::format("{}: LMDB faulted on its pages: the file is corrupt", m_path));
    }
    if (failed != nullptr && is_corruption(rc)) {
        // LMDB found its tree inconsistent without faulting: quarantined as
        // after a fault. Kept, the store could never be compacted again (its
        // file would stay above max_size), and a write touching the bad page
        // could copy its sizes into LMDB's own buffers, where no guard helps.
        txn.reset();
        lock.unlock();
        quarantine(generation, false, mdb_text(rc));
    }
    if (failed != nullptr) {
        return fail(failed);
    }
    if (rc_out != nullptr) {
        *rc_out = 0;
    }
    return {};
}

std::size_t SmallStore::size() {
    std::size_t entries = 0;
    (void)in_txn(true, [&](Env& env, MDB_txn* txn) {
        MDB_stat stat{};
        const int rc = mdb_stat(txn, env.meta, &stat);
        entries = rc == 0 ? stat.ms_entries : 0;
        return rc;
    });
    return entries;
}

tl::expected<void, std::string>
SmallStore::load_meta(const std::function<void(SmallRecord&&)>& fn) {
    return in_txn(true, [&](Env& env, MDB_txn* txn) {
        int rc = 0;
        Cursor cursor(txn, env.meta, rc);
        MDB_val key{};
        MDB_val value{};
        for (rc = rc != 0 ? rc : mdb_cursor_get(cursor.get(), &key, &value, MDB_FIRST); rc == 0;
             rc = mdb_cursor_get(cursor.get(), &key, &value, MDB_NEXT)) {
            SmallRecord record;
            std::string_view ns;
            if (!split_key(key, ns, record.id) ||
                !parse_meta(value, record.size, record.atime_ms)) {
                return MDB_CORRUPTED; // a malformed meta record
            }
            record.ns = ns;
            fn(std::move(record));
        }
        return rc == MDB_NOTFOUND ? 0 : rc;
    });
}

tl::expected<std::optional<std::vector<std::byte>>, std::string>
SmallStore::read(std::string_view ns, const Hash128& id) {
    std::optional<std::vector<std::byte>> out;
    const std::string key_text = make_key(ns, id);
    auto done = in_txn(true, [&](Env& env, MDB_txn* txn) {
        MDB_val key = val_of(key_text);
        MDB_val value{};
        const int rc = mdb_get(txn, env.entries, &key, &value);
        if (rc == 0 && value.mv_size > k_small_value_limit) {
            // No entry this large is ever written here: a damaged node,
            // whose size must not size a buffer (4 GiB per read).
            return MDB_CORRUPTED;
        }
        if (rc == 0) {
            // Allocated before the copy, which may fault: `out`, outside the
            // guard, then still owns (and frees) the buffer.
            auto& bytes = out.emplace(value.mv_size);
            std::memcpy(bytes.data(), value.mv_data, value.mv_size);
        }
        return rc == MDB_NOTFOUND ? 0 : rc;
    });
    if (!done) {
        return tl::make_unexpected(std::move(done.error()));
    }
    return out;
}

bool SmallStore::contains(std::string_view ns, const Hash128& id) {
    const std::string key_text = make_key(ns, id);
    int rc = 0;
    const auto found = in_txn(
        true,
        [&](Env& env, MDB_txn* txn) {
            MDB_val key = val_of(key_text);
            MDB_val value{};
            return mdb_get(txn, env.meta, &key, &value);
        },
        &rc);
    // Any answer but "not found" (no reader slot, a closed store) is "may
    // be there": callers then delete it, or keep it marked, rather than
    // skip a copy that is there.
    return found.has_value() || rc != MDB_NOTFOUND;
}

tl::expected<void, SmallError> SmallStore::write(std::span<const SmallWrite> writes, UnixMs now) {
    std::lock_guard write_lock(m_write_mutex);
    std::uint64_t incoming = 0;
    for (const SmallWrite& write : writes) {
        incoming += write.size() + 64;
    }
    if (m_used_bytes.load() + incoming * 2 > m_map_size.load() / 10 * 9) {
        return tl::make_unexpected(
            SmallError{true, fmt::format("writing {}: the map ({} bytes) is 90 % full", m_path,
                                         m_map_size.load())});
    }
    // In key order, through one cursor per database: LMDB then finds each
    // key on the leaf page the cursor is on (a comparison with that page's
    // first and last keys) instead of searching from the root, and touches
    // each page in turn. Stable, so that of two writes of one key the later
    // one is stored.
    std::vector<std::string> keys;
    keys.reserve(writes.size());
    for (const SmallWrite& write : writes) {
        keys.push_back(make_key(write.ns, write.id));
    }
    std::vector<std::uint32_t> order(writes.size());
    for (std::uint32_t i = 0; i < order.size(); ++i) {
        order[i] = i;
    }
    std::stable_sort(order.begin(), order.end(),
                     [&](std::uint32_t a, std::uint32_t b) { return keys[a] < keys[b]; });
    int rc = 0;
    auto done = in_txn(
        false,
        [&](Env& env, MDB_txn* txn) {
            int opened = 0;
            Cursor entries(txn, env.entries, opened);
            if (opened != 0) {
                return opened;
            }
            Cursor metas(txn, env.meta, opened);
            if (opened != 0) {
                return opened;
            }
            for (const std::uint32_t i : order) {
                const SmallWrite& write = writes[i];
                MDB_val key = val_of(keys[i]);
                MDB_val value{write.size(), nullptr};
                if (const int put = mdb_cursor_put(entries.get(), &key, &value, MDB_RESERVE);
                    put != 0) {
                    return put;
                }
                auto* out = static_cast<std::byte*>(value.mv_data);
                for (const auto& part : write.parts) {
                    out = std::copy(part.begin(), part.end(), out);
                }
                auto meta = meta_value(static_cast<std::uint32_t>(write.size()),
                                       write.atime_ms != 0 ? write.atime_ms : now);
                MDB_val meta_val{meta.size(), meta.data()};
                if (const int put = mdb_cursor_put(metas.get(), &key, &meta_val, 0); put != 0) {
                    return put;
                }
            }
            return 0;
        },
        &rc);
    if (!done) {
        return tl::make_unexpected(
            SmallError{rc == MDB_MAP_FULL, std::move(done.error()), rc == ENOSPC || rc == EDQUOT});
    }
    return {};
}

tl::expected<std::size_t, std::string> SmallStore::erase(std::span<const SmallKeyRef> keys) {
    std::lock_guard write_lock(m_write_mutex);
    std::size_t erased = 0;
    const auto body = [&](Env& env, MDB_txn* txn) {
        erased = 0;
        for (const SmallKeyRef& ref : keys) {
            const std::string key_text = make_key(ref.ns, ref.id);
            MDB_val key = val_of(key_text);
            const int rc = delete_both(env, txn, key);
            if (rc != 0 && rc != MDB_NOTFOUND) {
                return rc;
            }
            erased += rc == 0 ? 1 : 0;
        }
        return 0;
    };
    int rc = 0;
    auto done = in_txn(false, body, &rc);
    // A delete copies every page it touches before freeing the old ones.
    for (int attempt = 0; attempt < 4 && rc == MDB_MAP_FULL; ++attempt) {
        grow_map();
        done = in_txn(false, body, &rc);
    }
    if (!done) {
        return tl::make_unexpected(std::move(done.error()));
    }
    return erased;
}

bool SmallStore::erase_if_same(std::string_view ns, const Hash128& id,
                               std::span<const std::byte> bytes) {
    std::lock_guard write_lock(m_write_mutex);
    const std::string key_text = make_key(ns, id);
    return in_txn(false,
                  [&](Env& env, MDB_txn* txn) {
                      MDB_val key = val_of(key_text);
                      MDB_val value{};
                      if (mdb_get(txn, env.entries, &key, &value) != 0 ||
                          value.mv_size != bytes.size() ||
                          std::memcmp(value.mv_data, bytes.data(), bytes.size()) != 0) {
                          return k_abort;
                      }
                      return delete_both(env, txn, key);
                  })
        .has_value();
}

void SmallStore::touch(std::span<const SmallKeyRef> keys, UnixMs now) {
    if (keys.empty()) {
        return;
    }
    std::lock_guard write_lock(m_write_mutex);
    // A failure only costs LRU accuracy.
    (void)in_txn(false, [&](Env& env, MDB_txn* txn) {
        for (const SmallKeyRef& ref : keys) {
            const std::string key_text = make_key(ref.ns, ref.id);
            MDB_val key = val_of(key_text);
            MDB_val value{};
            std::uint32_t size = 0;
            UnixMs atime = 0;
            if (mdb_get(txn, env.meta, &key, &value) != 0 || !parse_meta(value, size, atime)) {
                continue;
            }
            auto meta = meta_value(size, std::max(atime, now));
            MDB_val meta_val{meta.size(), meta.data()};
            if (const int rc = mdb_put(txn, env.meta, &key, &meta_val, 0); rc != 0) {
                return rc;
            }
        }
        return 0;
    });
}

std::vector<Hash128> SmallStore::ids_after(std::string_view ns, const std::optional<Hash128>& after,
                                           std::size_t limit) {
    std::vector<Hash128> ids;
    const std::string start = after ? make_key(ns, *after) : std::string(ns) + '\0';
    (void)in_txn(true, [&](Env& env, MDB_txn* txn) {
        int rc = 0;
        Cursor cursor(txn, env.entries, rc);
        MDB_val key = val_of(start);
        MDB_val value{};
        for (rc = rc != 0 ? rc : mdb_cursor_get(cursor.get(), &key, &value, MDB_SET_RANGE);
             rc == 0 && ids.size() < limit;
             rc = mdb_cursor_get(cursor.get(), &key, &value, MDB_NEXT)) {
            std::string_view key_ns;
            Hash128 id;
            if (!split_key(key, key_ns, id) || key_ns != ns) {
                break; // keys sort by namespace first: past `ns`
            }
            if (!after || id != *after) {
                ids.push_back(id);
            }
        }
        return 0;
    });
    return ids;
}

std::vector<std::string> SmallStore::namespaces() {
    std::vector<std::string> names;
    (void)in_txn(true, [&](Env& env, MDB_txn* txn) {
        int rc = 0;
        Cursor cursor(txn, env.entries, rc);
        MDB_val key{};
        MDB_val value{};
        std::string next;
        for (rc = rc != 0 ? rc : mdb_cursor_get(cursor.get(), &key, &value, MDB_FIRST); rc == 0;
             rc = mdb_cursor_get(cursor.get(), &key, &value, MDB_SET_RANGE)) {
            std::string_view ns;
            Hash128 id;
            if (!split_key(key, ns, id)) {
                break;
            }
            names.emplace_back(ns);
            next = std::string(ns) + '\x01'; // sorts after every key of `ns`
            key = val_of(next);
        }
        return 0;
    });
    return names;
}

tl::expected<std::uint64_t, std::string> SmallStore::clear(std::string_view ns) {
    std::lock_guard write_lock(m_write_mutex);
    const std::string prefix = std::string(ns) + '\0';
    std::uint64_t removed = 0;
    auto done = in_txn(false, [&](Env& env, MDB_txn* txn) {
        for (const MDB_dbi dbi : {env.entries, env.meta}) {
            int rc = 0;
            Cursor cursor(txn, dbi, rc);
            if (rc != 0) {
                return rc;
            }
            MDB_val key{};
            MDB_val value{};
            for (;;) {
                key = val_of(prefix);
                if (mdb_cursor_get(cursor.get(), &key, &value, MDB_SET_RANGE) != 0 ||
                    key.mv_size < prefix.size() ||
                    std::memcmp(key.mv_data, prefix.data(), prefix.size()) != 0) {
                    break;
                }
                if (rc = mdb_cursor_del(cursor.get(), 0); rc != 0) {
                    return rc;
                }
                removed += dbi == env.entries ? 1 : 0;
            }
        }
        return 0;
    });
    if (!done) {
        return tl::make_unexpected(std::move(done.error()));
    }
    return removed;
}

} // namespace pt2cache::daemon::store
