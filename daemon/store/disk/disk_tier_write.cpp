// SPDX-License-Identifier: MIT
// The disk tier's writes: puts (synchronous, or queued for the writer
// threads), the writers' file and batch writes, and deletes.
#include <cerrno>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utility>
#include <vector>

#include "daemon/store/disk/disk_entry.hpp"
#include "daemon/store/disk/disk_file.hpp"
#include "daemon/store/disk/disk_tier.hpp"
#include "daemon/store/disk/posix_file.hpp"
#include "daemon/store/log.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace pt2cache::daemon::store {

tl::expected<void, StoreError> DiskTier::ensure_dirs(std::string_view ns, std::string_view hex) {
    std::vector<std::string> dirs;
    std::filesystem::path prefix;
    for (const auto& part : std::filesystem::path(m_layout.root())) {
        prefix /= part;
        dirs.push_back(prefix.string());
    }
    dirs.push_back(m_layout.versioned());
    dirs.push_back(m_layout.ns_dir(ns));
    dirs.push_back(m_layout.shard_dir(ns, hex));
    for (const std::string& dir : dirs) {
        if (const auto made = make_dir(dir, k_dir_mode); !made) {
            return tl::make_unexpected(
                io_error(fmt::format("cannot create {}: {}", dir, errno_text(made.error()))));
        }
    }
    return {};
}

tl::expected<void, StoreError> DiskTier::put(std::string_view ns, std::string_view key,
                                             const Entry& entry) {
    if (!is_valid_namespace(ns)) {
        return tl::make_unexpected(bad_namespace(ns));
    }
    if (key.size() > k_entry_max_key_size) {
        return tl::make_unexpected(
            StoreError{Failure::too_large, fmt::format("key of {} bytes is too long", key.size())});
    }
    if (!enabled()) {
        return {};
    }
    const Hash128 id = entry_hash(ns, key);
    if (m_writer) {
        m_writer->push(pending_write(ns, key, id, entry));
        return {};
    }
    PendingWrite write;
    write.ns = ns;
    write.key = key;
    write.id = id;
    write.encoded =
        encode_parts(ns, key, entry, m_options.compress_threshold, m_options.compress_level);
    write.encoded_ready = true;
    write.encoded_size = write.encoded.size();
    if (routes_small(write.encoded_size)) {
        const PendingWrite* const batch[] = {&write};
        return write_small(batch, false);
    }
    std::lock_guard lock(stripe(id));
    return write_entry(ns, id, id.hex(), write.encoded);
}

std::optional<tl::expected<void, StoreError>>
DiskTier::try_put(std::string_view ns, std::string_view key, const Entry& entry) {
    const QuickPut put{ns, key, entry};
    if (try_put_many(std::span(&put, 1)) == 0) {
        return std::nullopt;
    }
    return tl::expected<void, StoreError>();
}

std::size_t DiskTier::try_put_many(std::span<const QuickPut> puts) {
    if (!m_writer) {
        return 0;
    }
    std::vector<std::shared_ptr<const PendingWrite>> writes;
    writes.reserve(puts.size());
    for (const QuickPut& put : puts) {
        // Only what needs no compression and no waiting: anything else is put().
        if (!is_valid_namespace(put.ns) || put.key.size() > k_entry_max_key_size ||
            put.entry.value.size() >= m_options.compress_threshold) {
            break;
        }
        writes.push_back(pending_write(put.ns, put.key, entry_hash(put.ns, put.key), put.entry));
    }
    return m_writer->try_push_many(writes);
}

std::shared_ptr<PendingWrite> DiskTier::pending_write(std::string_view ns, std::string_view key,
                                                      const Hash128& id, const Entry& entry) const {
    auto write = std::make_shared<PendingWrite>();
    write->ns = ns;
    write->key = key;
    write->id = id;
    write->entry = entry;
    const std::uint64_t value_size = entry.value.size();
    if (value_size != 0 && value_size >= m_options.compress_threshold) {
        write->encoded = encode_parts(ns, key, write->entry, m_options.compress_threshold,
                                      m_options.compress_level);
        write->encoded_ready = true;
        write->encoded_size = write->encoded.size();
    } else {
        // Stored as is: the writer encodes it (PendingWrite::encode).
        write->encoded_size = encoded_entry_size(ns.size(), key.size(), value_size);
    }
    write->held_bytes = key.size() + value_size + k_entry_header_size + ns.size() + key.size() +
                        write->encoded.compressed_payload.size();
    write->small = routes_small(write->encoded_size);
    return write;
}

tl::expected<void, StoreError> DiskTier::write_entry(std::string_view ns, const Hash128& id,
                                                     const std::string& hex,
                                                     const EncodedEntry& encoded) {
    // One entry, one store: the small copy goes first (a crash in between
    // loses the entry, never serves the old bytes).
    if (auto removed = remove_small_copy(ns, id); !removed) {
        // The new value is not written while the old copy stays (the copy
        // would outlive it): a miss now, the copy deleted when LMDB can.
        forget_replaced(ns, id);
        return removed;
    }
    const std::string final_path = m_layout.entry_path(ns, hex);
    if (file_charge(encoded.size()) > m_options.max_size / 10 * 9) {
        // It would evict every other entry and still not fit under the
        // eviction target: not stored, and no older value left in its place.
        forget_replaced(ns, id);
        return tl::make_unexpected(StoreError{
            Failure::too_large, fmt::format("an entry of {} bytes does not fit disk.max_size ({})",
                                            encoded.size(), m_options.max_size)});
    }
    const std::string temp_path =
        fmt::format("{}/{}", m_layout.shard_dir(ns, hex),
                    temp_name(hex, static_cast<long>(::getpid()),
                              m_temp_counter.fetch_add(1, std::memory_order_relaxed)));
    constexpr int k_create = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW;
    auto fd = open_fd(temp_path, k_create, k_file_mode);
    if (!fd && fd.error() == ENOENT) {
        if (auto made = ensure_dirs(ns, hex); !made) {
            return tl::make_unexpected(std::move(made.error()));
        }
        fd = open_fd(temp_path, k_create, k_file_mode);
    }
    if (!fd) {
        if (fd.error() == ENOSPC || fd.error() == EDQUOT) {
            note_space_short(); // no inode, or no block for the directory
        }
        return tl::make_unexpected(
            io_error(fmt::format("cannot create {}: {}", temp_path, errno_text(fd.error()))));
    }
    // No fsync: a file torn by a crash fails its checksum and is a miss.
    const std::array<std::span<const std::byte>, 3> parts = {
        std::span<const std::byte>(encoded.head), encoded.payload,
        std::span<const std::byte>(encoded.trailer)};
    int error = 0;
    if (const auto written = write_all(fd->get(), parts); !written) {
        error = written.error();
    }
    if (const int closed = fd->close(); error == 0) {
        error = closed;
    }
    if (error == 0 && ::rename(temp_path.c_str(), final_path.c_str()) != 0) {
        error = errno;
    }
    if (error != 0) {
        ::unlink(temp_path.c_str());
        if (error == ENOSPC || error == EDQUOT) {
            note_space_short();
        }
        // The value this put replaces must not come back in its place (the
        // put may have been acknowledged from memory): the key is a miss,
        // also when the older file cannot be removed now (forget_replaced).
        forget_replaced(ns, id);
        return tl::make_unexpected(
            io_error(fmt::format("cannot write {}: {}", final_path, errno_text(error))));
    }
    m_index.record(ns, id, file_charge(encoded.size()));
    clear_replaced(id); // its small copy went first (remove_small_copy)
    wake_evictor_if_needed();
    return {};
}

void DiskTier::write_queued(std::span<const PendingWrite* const> batch) {
    if (batch.empty()) {
        return;
    }
    if (batch.front()->small) {
        write_small(batch, true); // logs and counts its own failures
        return;
    }
    for (const PendingWrite* write : batch) {
        std::lock_guard lock(stripe(write->id));
        const auto written = write_entry(write->ns, write->id, write->id.hex(), write->encode());
        if (!written) {
            log_write_error(write->ns, write->key, written.error());
        }
    }
}

void DiskTier::log_write_error(std::string_view ns, std::string_view key, const StoreError& error) {
    m_stats.tier(ns, TierId::disk).errors.fetch_add(1, std::memory_order_relaxed);
    if (m_final_flush.load(std::memory_order_relaxed)) {
        m_stats.daemon().writes_abandoned.fetch_add(1, std::memory_order_relaxed);
    }
    // At most one line a second: a full disk fails every write.
    const UnixMs now = now_ms();
    UnixMs last = m_write_error_logged_ms.load(std::memory_order_relaxed);
    if (now - last < 1000 || !m_write_error_logged_ms.compare_exchange_strong(last, now)) {
        m_write_errors_unlogged.fetch_add(1, std::memory_order_relaxed);
        return;
    }
    const std::uint64_t unlogged = m_write_errors_unlogged.exchange(0, std::memory_order_relaxed);
    logger().warn("queued disk put {}/{:?} failed: {}{}", ns, key, error.message,
                  unlogged == 0 ? std::string()
                                : fmt::format(" ({} more failed writes not logged)", unlogged));
}

std::uint64_t DiskTier::cancel_queued(std::string_view ns) {
    if (!m_writer) {
        return 0;
    }
    std::uint64_t without_file = 0;
    for (const Hash128& id : m_writer->cancel_namespace(ns)) {
        struct stat info {};
        if (::lstat(m_layout.entry_path(ns, id.hex()).c_str(), &info) != 0 && errno == ENOENT &&
            !(m_small && m_small->contains(ns, id))) {
            ++without_file;
        }
    }
    return without_file;
}

tl::expected<bool, StoreError> DiskTier::remove(std::string_view ns, std::string_view key) {
    if (!is_valid_namespace(ns)) {
        return tl::make_unexpected(bad_namespace(ns));
    }
    if (!enabled() || key.size() > k_entry_max_key_size) {
        return false;
    }
    const Hash128 id = entry_hash(ns, key);
    // Lookups miss until the copies on disk are gone: they may be older than
    // the queued write dropped here.
    const auto deleting = m_deleting.key(id);
    // A queued write is dropped, one in flight finished: the unlink is final.
    const bool cancelled = m_writer && m_writer->cancel(id);
    std::lock_guard lock(stripe(id));
    bool removed = false;
    if (m_small && m_small->contains(ns, id)) {
        const SmallKeyRef keys[] = {{ns, id}};
        auto erased = m_small->erase(keys);
        if (!erased) {
            // The newer queued write is gone: the copy it replaced must
            // never be served again (a full filesystem fails LMDB's deletes).
            forget_replaced(ns, id);
            return tl::make_unexpected(io_error(std::move(erased.error())));
        }
        removed = *erased > 0;
    }
    const std::string path = m_layout.entry_path(ns, id.hex());
    if (::unlink(path.c_str()) != 0) {
        if (errno != ENOENT && errno != ENOTDIR) {
            auto error = io_error(fmt::format("cannot remove {}: {}", path, errno_text(errno)));
            // The file may be older than the queued write dropped above: it
            // must never be served again (a review: EROFS or EACCES left it
            // readable after an acknowledged SET of a newer value).
            forget_replaced(ns, id);
            return tl::make_unexpected(std::move(error));
        }
    } else {
        removed = true;
    }
    // Also when nothing was there: a salvage of a quarantined small-entry
    // store must not bring the entry back (DiskIndex::erase_all_small).
    m_index.erase(id);
    return removed || cancelled;
}

} // namespace pt2cache::daemon::store
