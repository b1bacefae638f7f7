// SPDX-License-Identifier: MIT
// SmallStore's reads and writes; opening, recovery and compaction are in
// disk_small_store_env.cpp.
#include "daemon/store/disk_small_store.hpp"

#include <algorithm>
#include <cstring>
#include <lmdb.h>

#include "daemon/store/disk_small_lmdb.hpp"

#include <fmt/format.h>

namespace pt2cache::daemon::store {

using namespace small_lmdb;

tl::expected<void, std::string>
SmallStore::load_meta(const std::function<void(SmallRecord&&)>& fn) {
    std::shared_lock lock(m_env_mutex);
    if (!m_env) {
        return tl::make_unexpected("the small-entry store is closed");
    }
    int rc = 0;
    Txn txn(m_env->env, true, rc);
    if (rc != 0) {
        return tl::make_unexpected(fmt::format("mdb_txn_begin: {}", mdb_text(rc)));
    }
    Cursor cursor(txn.get(), m_env->meta, rc);
    if (rc != 0) {
        return tl::make_unexpected(fmt::format("mdb_cursor_open: {}", mdb_text(rc)));
    }
    MDB_val key{};
    MDB_val value{};
    for (rc = mdb_cursor_get(cursor.get(), &key, &value, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cursor.get(), &key, &value, MDB_NEXT)) {
        SmallRecord record;
        std::string_view ns;
        if (!split_key(key, ns, record.id) || !parse_meta(value, record.size, record.atime_ms)) {
            return tl::make_unexpected("a malformed meta record");
        }
        record.ns = ns;
        fn(std::move(record));
    }
    if (rc != MDB_NOTFOUND) {
        return tl::make_unexpected(fmt::format("walking meta: {}", mdb_text(rc)));
    }
    return {};
}

tl::expected<std::optional<std::vector<std::byte>>, std::string>
SmallStore::read(std::string_view ns, const Hash128& id) {
    std::shared_lock lock(m_env_mutex);
    if (!m_env) {
        return tl::make_unexpected("the small-entry store is closed");
    }
    int rc = 0;
    Txn txn(m_env->env, true, rc);
    if (rc != 0) {
        return tl::make_unexpected(fmt::format("mdb_txn_begin: {}", mdb_text(rc)));
    }
    const std::string key_text = make_key(ns, id);
    MDB_val key = val_of(key_text);
    MDB_val value{};
    rc = mdb_get(txn.get(), m_env->entries, &key, &value);
    if (rc == MDB_NOTFOUND) {
        return std::nullopt;
    }
    if (rc != 0) {
        return tl::make_unexpected(fmt::format("mdb_get: {}", mdb_text(rc)));
    }
    const auto* data = static_cast<const std::byte*>(value.mv_data);
    return std::vector<std::byte>(data, data + value.mv_size);
}

bool SmallStore::contains(std::string_view ns, const Hash128& id) {
    std::shared_lock lock(m_env_mutex);
    if (!m_env) {
        return false;
    }
    int rc = 0;
    Txn txn(m_env->env, true, rc);
    if (rc != 0) {
        return false;
    }
    const std::string key_text = make_key(ns, id);
    MDB_val key = val_of(key_text);
    MDB_val value{};
    return mdb_get(txn.get(), m_env->meta, &key, &value) == 0;
}

tl::expected<void, SmallError> SmallStore::write(std::span<const SmallWrite> writes, UnixMs now) {
    std::lock_guard write_lock(m_write_mutex);
    std::shared_lock lock(m_env_mutex);
    if (!m_env) {
        return tl::make_unexpected(SmallError{false, "the small-entry store is closed"});
    }
    std::uint64_t incoming = 0;
    for (const SmallWrite& write : writes) {
        incoming += write.size() + 64;
    }
    if (m_used_bytes.load() + incoming * 2 > m_map_size.load() / 10 * 9) {
        return tl::make_unexpected(
            SmallError{true, fmt::format("writing {}: the map ({} bytes) is 90 % full", m_path,
                                         m_map_size.load())});
    }
    int rc = 0;
    Txn txn(m_env->env, false, rc);
    if (rc != 0) {
        return tl::make_unexpected(
            SmallError{false, fmt::format("mdb_txn_begin: {}", mdb_text(rc))});
    }
    for (const SmallWrite& write : writes) {
        const std::string key_text = make_key(write.ns, write.id);
        MDB_val key = val_of(key_text);
        MDB_val value{write.size(), nullptr};
        rc = mdb_put(txn.get(), m_env->entries, &key, &value, MDB_RESERVE);
        if (rc == 0) {
            auto* out = static_cast<std::byte*>(value.mv_data);
            for (const auto& part : write.parts) {
                out = std::copy(part.begin(), part.end(), out);
            }
            auto meta = meta_value(static_cast<std::uint32_t>(write.size()),
                                   write.atime_ms != 0 ? write.atime_ms : now);
            MDB_val meta_val{meta.size(), meta.data()};
            rc = mdb_put(txn.get(), m_env->meta, &key, &meta_val, 0);
        }
        if (rc != 0) {
            break;
        }
    }
    if (rc == 0) {
        rc = txn.commit();
    }
    if (rc != 0) {
        return tl::make_unexpected(
            SmallError{rc == MDB_MAP_FULL, fmt::format("writing {}: {}", m_path, mdb_text(rc))});
    }
    refresh_usage_locked();
    return {};
}

tl::expected<std::size_t, std::string> SmallStore::erase(std::span<const SmallKeyRef> keys) {
    std::lock_guard write_lock(m_write_mutex);
    int rc = 0;
    auto erased = erase_once(keys, rc);
    // A delete copies every page it touches before freeing the old ones.
    for (int attempt = 0; attempt < 4 && rc == MDB_MAP_FULL; ++attempt) {
        grow_map();
        erased = erase_once(keys, rc);
    }
    return erased;
}

tl::expected<std::size_t, std::string> SmallStore::erase_once(std::span<const SmallKeyRef> keys,
                                                              int& rc) {
    std::shared_lock lock(m_env_mutex);
    if (!m_env) {
        return tl::make_unexpected("the small-entry store is closed");
    }
    Txn txn(m_env->env, false, rc);
    if (rc != 0) {
        return tl::make_unexpected(fmt::format("mdb_txn_begin: {}", mdb_text(rc)));
    }
    std::size_t erased = 0;
    for (const SmallKeyRef& ref : keys) {
        const std::string key_text = make_key(ref.ns, ref.id);
        MDB_val key = val_of(key_text);
        rc = mdb_del(txn.get(), m_env->entries, &key, nullptr);
        if (rc == 0) {
            ++erased;
        }
        if (rc == 0 || rc == MDB_NOTFOUND) {
            rc = mdb_del(txn.get(), m_env->meta, &key, nullptr);
        }
        if (rc != 0 && rc != MDB_NOTFOUND) {
            return tl::make_unexpected(fmt::format("mdb_del: {}", mdb_text(rc)));
        }
    }
    rc = txn.commit();
    if (rc != 0) {
        return tl::make_unexpected(fmt::format("commit: {}", mdb_text(rc)));
    }
    refresh_usage_locked();
    return erased;
}

bool SmallStore::erase_if_same(std::string_view ns, const Hash128& id,
                               std::span<const std::byte> bytes) {
    std::lock_guard write_lock(m_write_mutex);
    std::shared_lock lock(m_env_mutex);
    if (!m_env) {
        return false;
    }
    int rc = 0;
    Txn txn(m_env->env, false, rc);
    if (rc != 0) {
        return false;
    }
    const std::string key_text = make_key(ns, id);
    MDB_val key = val_of(key_text);
    MDB_val value{};
    if (mdb_get(txn.get(), m_env->entries, &key, &value) != 0 || value.mv_size != bytes.size() ||
        std::memcmp(value.mv_data, bytes.data(), bytes.size()) != 0) {
        return false;
    }
    mdb_del(txn.get(), m_env->entries, &key, nullptr);
    mdb_del(txn.get(), m_env->meta, &key, nullptr);
    if (txn.commit() != 0) {
        return false;
    }
    refresh_usage_locked();
    return true;
}

void SmallStore::touch(std::span<const SmallKeyRef> keys, UnixMs now) {
    std::lock_guard write_lock(m_write_mutex);
    std::shared_lock lock(m_env_mutex);
    if (!m_env || keys.empty()) {
        return;
    }
    int rc = 0;
    Txn txn(m_env->env, false, rc);
    if (rc != 0) {
        return;
    }
    for (const SmallKeyRef& ref : keys) {
        const std::string key_text = make_key(ref.ns, ref.id);
        MDB_val key = val_of(key_text);
        MDB_val value{};
        std::uint32_t size = 0;
        UnixMs atime = 0;
        if (mdb_get(txn.get(), m_env->meta, &key, &value) != 0 || !parse_meta(value, size, atime)) {
            continue;
        }
        auto meta = meta_value(size, std::max(atime, now));
        MDB_val meta_val{meta.size(), meta.data()};
        if (mdb_put(txn.get(), m_env->meta, &key, &meta_val, 0) != 0) {
            return; // aborted: access times only cost LRU accuracy
        }
    }
    txn.commit();
}

std::vector<Hash128> SmallStore::ids_after(std::string_view ns, const std::optional<Hash128>& after,
                                           std::size_t limit) {
    std::vector<Hash128> ids;
    std::shared_lock lock(m_env_mutex);
    if (!m_env) {
        return ids;
    }
    int rc = 0;
    Txn txn(m_env->env, true, rc);
    if (rc != 0) {
        return ids;
    }
    Cursor cursor(txn.get(), m_env->entries, rc);
    if (rc != 0) {
        return ids;
    }
    std::string start = after ? make_key(ns, *after) : std::string(ns) + '\0';
    MDB_val key = val_of(start);
    MDB_val value{};
    for (rc = mdb_cursor_get(cursor.get(), &key, &value, MDB_SET_RANGE);
         rc == 0 && ids.size() < limit; rc = mdb_cursor_get(cursor.get(), &key, &value, MDB_NEXT)) {
        std::string_view key_ns;
        Hash128 id;
        if (!split_key(key, key_ns, id) || key_ns != ns) {
            break; // keys sort by namespace first: past `ns`
        }
        if (after && id == *after) {
            continue;
        }
        ids.push_back(id);
    }
    return ids;
}

std::vector<std::string> SmallStore::namespaces() {
    std::vector<std::string> names;
    std::shared_lock lock(m_env_mutex);
    if (!m_env) {
        return names;
    }
    int rc = 0;
    Txn txn(m_env->env, true, rc);
    if (rc != 0) {
        return names;
    }
    Cursor cursor(txn.get(), m_env->entries, rc);
    if (rc != 0) {
        return names;
    }
    MDB_val key{};
    MDB_val value{};
    std::string next;
    for (rc = mdb_cursor_get(cursor.get(), &key, &value, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cursor.get(), &key, &value, MDB_SET_RANGE)) {
        std::string_view ns;
        Hash128 id;
        if (!split_key(key, ns, id)) {
            break;
        }
        names.emplace_back(ns);
        next = std::string(ns) + '\x01';
        key = val_of(next);
    }
    return names;
}

tl::expected<std::uint64_t, std::string> SmallStore::clear(std::string_view ns) {
    std::lock_guard write_lock(m_write_mutex);
    std::shared_lock lock(m_env_mutex);
    if (!m_env) {
        return 0;
    }
    int rc = 0;
    Txn txn(m_env->env, false, rc);
    if (rc != 0) {
        return tl::make_unexpected(fmt::format("mdb_txn_begin: {}", mdb_text(rc)));
    }
    const std::string prefix = std::string(ns) + '\0';
    std::uint64_t removed = 0;
    for (const MDB_dbi dbi : {m_env->entries, m_env->meta}) {
        Cursor cursor(txn.get(), dbi, rc);
        if (rc != 0) {
            return tl::make_unexpected(fmt::format("mdb_cursor_open: {}", mdb_text(rc)));
        }
        MDB_val key{};
        MDB_val value{};
        for (;;) {
            key = val_of(prefix);
            if (mdb_cursor_get(cursor.get(), &key, &value, MDB_SET_RANGE) != 0) {
                break;
            }
            if (key.mv_size < prefix.size() ||
                std::memcmp(key.mv_data, prefix.data(), prefix.size()) != 0) {
                break;
            }
            if (mdb_cursor_del(cursor.get(), 0) != 0) {
                break;
            }
            removed += dbi == m_env->entries ? 1 : 0;
        }
    }
    rc = txn.commit();
    if (rc != 0) {
        return tl::make_unexpected(fmt::format("commit: {}", mdb_text(rc)));
    }
    refresh_usage_locked();
    return removed;
}

} // namespace pt2cache::daemon::store
