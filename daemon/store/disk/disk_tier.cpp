// SPDX-License-Identifier: MIT
#include "daemon/store/disk/disk_tier.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <fcntl.h>
#include <random>
#include <sys/stat.h>
#include <unistd.h>
#include <utility>
#include <vector>

#include "daemon/store/disk/disk_entry.hpp"
#include "daemon/store/disk/disk_file.hpp"
#include "daemon/store/disk/posix_file.hpp"
#include "daemon/store/log.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace pt2cache::daemon::store {

namespace {

constexpr unsigned k_dir_mode = 0700;
constexpr unsigned k_file_mode = 0600;

StoreError io_error(std::string message) {
    return StoreError{Failure::io, std::move(message)};
}

StoreError bad_namespace(std::string_view ns) {
    return io_error(fmt::format("invalid namespace {:?}", ns));
}

} // namespace

DiskTier::DiskTier(std::filesystem::path root, DiskOptions options, Stats& stats)
    : m_layout(root)
    , m_options(options)
    , m_stats(stats) {
    // Random: the startup scan tells this process's temporary files from
    // an earlier daemon's of the same pid by their counter (DiskTier::scan).
    m_temp_counter_start = std::random_device()() * (std::uint64_t{1} << 32U);
    m_temp_counter.store(m_temp_counter_start, std::memory_order_relaxed);
    if (!enabled()) {
        m_scan_complete.store(true, std::memory_order_release);
        return;
    }
    if (const auto made = make_dir(m_layout.versioned(), k_dir_mode); !made) {
        // Created on the first put instead (which reports any lasting error).
        logger().debug("cannot create {} yet: {}", m_layout.versioned(), errno_text(made.error()));
    }
    open_small_store();
    m_scan_thread = std::thread([this] { scan(); });
    m_evict_thread = std::thread([this] { evict_loop(); });
    if (m_options.write_mode == DiskWriteMode::async) {
        m_writer = std::make_unique<DiskWriteQueue>(
            m_options.write_queue_bytes, m_options.writer_threads,
            [this](std::span<const PendingWrite* const> batch) { write_queued(batch); });
    }
}

DiskTier::~DiskTier() {
    // Queued writes go first: they need the index and may wake the evictor.
    if (m_writer) {
        m_final_flush.store(true, std::memory_order_relaxed); // its failures are losses too
        m_stats.daemon().writes_abandoned.fetch_add(m_writer->shutdown(),
                                                    std::memory_order_relaxed);
        m_writer.reset();
    }
    {
        std::lock_guard lock(m_mutex);
        m_stop = true;
        m_stop_requested.store(true, std::memory_order_relaxed);
    }
    m_wake.notify_all();
    if (m_scan_thread.joinable()) {
        m_scan_thread.join();
    }
    if (m_evict_thread.joinable()) {
        m_evict_thread.join();
    }
    flush_touches();
    if (const std::size_t left = retry_replaced(true); left > 0) {
        // They must not be served after a restart, and nothing can be
        // written (a full filesystem): the store is removed, which needs no
        // space and frees its own. Its other entries are lost with it,
        // never served stale.
        const std::string& path = m_small->path();
        if (::unlink(path.c_str()) == 0) {
            logger().error("{} replaced small entries could not be deleted from {}: removed it "
                           "(its entries are lost)",
                           left, path);
        } else {
            logger().critical("{} replaced small entries could not be deleted from {}, nor the "
                              "file removed ({}): delete it before the next start, which would "
                              "serve them",
                              left, path, errno_text(errno));
        }
        m_stats.daemon().writes_abandoned.fetch_add(left, std::memory_order_relaxed);
    }
}

std::uint64_t DiskTier::size_bytes() const {
    return m_index.file_bytes() + (m_small ? m_small->file_bytes() : 0);
}

void DiskTier::wait_for_scan() {
    std::unique_lock lock(m_mutex);
    m_wake.wait(lock, [this] { return m_stop || scan_complete(); });
}

void DiskTier::wait_for_writes() {
    if (m_writer) {
        m_writer->flush();
    }
}

void DiskTier::pause_writes(bool paused) {
    if (m_writer) {
        m_writer->set_paused(paused);
    }
}

std::size_t DiskTier::queued_writes() const {
    return m_writer ? m_writer->size() : 0;
}

std::uint64_t DiskTier::queued_bytes() const {
    return m_writer ? m_writer->bytes() : 0;
}

std::chrono::steady_clock::duration DiskTier::oldest_queued_age() const {
    return m_writer ? m_writer->oldest_age() : std::chrono::steady_clock::duration::zero();
}

void DiskTier::discard_corrupt(std::string_view ns, const std::string& path, const Hash128& id,
                               int fd, std::string_view reason) {
    m_stats.tier(ns, TierId::disk).corrupt.fetch_add(1, std::memory_order_relaxed);
    logger().warn("removing broken cache file {}: {}", path, reason);
    const bool removed = fd >= 0 ? remove_if_same(path, fd) : ::unlink(path.c_str()) == 0;
    if (removed) {
        m_index.erase(id);
    }
}

std::size_t DiskTier::entry_count() const {
    if (!m_writer) {
        return m_index.count();
    }
    // A write moves from the queue to the index (recorded, then leaves the
    // queue): the ids still pending are taken first, then counted with the
    // index under its lock, so that an entry is counted once.
    const std::vector<Hash128> pending = m_writer->pending_ids();
    return m_index.count_with(pending);
}

bool DiskTier::known_absent(std::string_view ns, std::string_view key) const {
    if (!scan_complete() || !is_valid_namespace(ns) || key.size() > k_entry_max_key_size) {
        return false;
    }
    const Hash128 id = entry_hash(ns, key);
    // The queue first: a queued write is recorded in the index before it
    // leaves the queue, so an entry moving from one to the other is seen.
    if (m_writer && m_writer->size() != 0 && m_writer->find(id)) {
        return false;
    }
    return !m_index.contains(id);
}

tl::expected<std::optional<Entry>, StoreError> DiskTier::get(std::string_view ns,
                                                             std::string_view key) {
    return load(ns, key, true);
}

tl::expected<std::optional<Entry>, StoreError> DiskTier::peek(std::string_view ns,
                                                              std::string_view key) {
    return load(ns, key, false);
}

tl::expected<std::optional<Entry>, StoreError> DiskTier::load(std::string_view ns,
                                                              std::string_view key, bool touch) {
    if (!is_valid_namespace(ns)) {
        return tl::make_unexpected(bad_namespace(ns));
    }
    if (!enabled() || key.size() > k_entry_max_key_size) {
        return std::nullopt;
    }
    const Hash128 id = entry_hash(ns, key);
    if (m_writer) {
        if (const auto queued = m_writer->find(id)) {
            if (queued->ns != ns || queued->key != key || queued->entry.expired(now_ms())) {
                return std::nullopt;
            }
            return queued->entry;
        }
    }
    if (replaced_pending(id)) {
        return std::nullopt; // what small.mdb holds was replaced by a failed put
    }
    // The store the index names first, then the other: an entry that moves
    // between stores is removed from one before it is written to the other,
    // so whatever is found is current.
    const std::optional<bool> small_first = m_index.where(id);
    if (m_small && small_first.value_or(true)) {
        auto found = load_small(ns, key, id, touch);
        if (!found || *found) {
            return found;
        }
    }
    auto from_file = load_file(ns, key, id, touch);
    if (m_small && !small_first.value_or(true) && from_file && !*from_file) {
        return load_small(ns, key, id, touch);
    }
    return from_file;
}

tl::expected<std::optional<Entry>, StoreError>
DiskTier::load_file(std::string_view ns, std::string_view key, const Hash128& id, bool touch) {
    const std::string hex = id.hex();
    const std::string path = m_layout.entry_path(ns, hex);
    auto fd = open_fd(path, O_RDONLY | O_NOFOLLOW);
    if (!fd) {
        if (fd.error() == ENOENT || fd.error() == ENOTDIR) {
            return std::nullopt;
        }
        if (fd.error() == ELOOP) {
            discard_corrupt(ns, path, id, -1, "a symbolic link");
            return std::nullopt;
        }
        return tl::make_unexpected(
            io_error(fmt::format("cannot open {}: {}", path, errno_text(fd.error()))));
    }
    struct stat info {};
    if (::fstat(fd->get(), &info) != 0 || !S_ISREG(info.st_mode)) {
        return std::nullopt;
    }
    auto header = read_entry_header(fd->get());
    if (!header) {
        discard_corrupt(ns, path, id, fd->get(), header.error());
        return std::nullopt;
    }
    if (header->header.ns != ns || header->header.key != key) {
        // Another key with the same hash, or a stray entry: not ours.
        return std::nullopt;
    }
    if (header->header.expired(now_ms())) {
        if (remove_if_same(path, fd->get())) {
            m_index.erase(id);
        }
        return std::nullopt;
    }

    const auto touch_file = [&] {
        if (touch) {
            // Refresh the mtime so the LRU order survives a restart. Failure
            // only costs LRU accuracy.
            ::futimens(fd->get(), nullptr);
            m_index.touch(ns, id, file_charge(header->size), false);
        }
    };
    const bool large = header->header.value_size >= SharedReads::k_min_value_size;
    if (large) {
        // A value some reply still holds, read from a file of the same bytes.
        std::array<std::byte, k_entry_trailer_size> trailer{};
        const auto got = read_at(fd->get(), header->size - trailer.size(), trailer);
        if (got && *got == trailer.size()) {
            if (auto held = m_shared_reads.find(id, header->size, trailer_checksum(trailer))) {
                touch_file();
                return Entry{std::move(*held), header->header.created_ms,
                             header->header.expires_ms};
            }
        }
    }

    BlobBuilder bytes(static_cast<std::size_t>(header->size));
    const auto got = read_at(fd->get(), 0, bytes.bytes());
    if (!got) {
        return tl::make_unexpected(
            io_error(fmt::format("cannot read {}: {}", path, errno_text(got.error()))));
    }
    if (*got != bytes.bytes().size()) {
        discard_corrupt(ns, path, id, fd->get(), "shorter than its size");
        return std::nullopt;
    }
    const Blob file = std::move(bytes).finish(*got);
    auto decoded = decode(file);
    if (!decoded) {
        discard_corrupt(ns, path, id, fd->get(), decoded.error());
        return std::nullopt;
    }
    if (large) {
        // Keyed by the checksum decode() verified: that of these very bytes.
        m_shared_reads.remember(id, file.size(),
                                trailer_checksum(file.bytes().last<k_entry_trailer_size>()),
                                decoded->entry.value);
    }
    touch_file();
    return std::move(decoded->entry);
}

tl::expected<bool, StoreError> DiskTier::exists(std::string_view ns, std::string_view key) {
    if (!is_valid_namespace(ns)) {
        return tl::make_unexpected(bad_namespace(ns));
    }
    if (!enabled() || key.size() > k_entry_max_key_size) {
        return false;
    }
    const Hash128 id = entry_hash(ns, key);
    if (m_writer) {
        if (const auto queued = m_writer->find(id)) {
            return queued->ns == ns && queued->key == key && !queued->entry.expired(now_ms());
        }
    }
    if (m_small) {
        if (exists_small(ns, key, id)) {
            return true;
        }
    }
    const std::string path = m_layout.entry_path(ns, id.hex());
    auto fd = open_fd(path, O_RDONLY | O_NOFOLLOW);
    if (!fd) {
        if (fd.error() == ENOENT || fd.error() == ENOTDIR || fd.error() == ELOOP) {
            return false;
        }
        return tl::make_unexpected(
            io_error(fmt::format("cannot open {}: {}", path, errno_text(fd.error()))));
    }
    struct stat info {};
    if (::fstat(fd->get(), &info) != 0 || !S_ISREG(info.st_mode)) {
        return false;
    }
    const auto header = read_entry_header(fd->get());
    return header && header->header.ns == ns && header->header.key == key &&
           !header->header.expired(now_ms());
}

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
        if (::unlink(final_path.c_str()) == 0 || errno == ENOENT) {
            m_index.erase(id);
        }
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
        // put may have been acknowledged from memory): the key is a miss.
        if (::unlink(final_path.c_str()) == 0 || errno == ENOENT) {
            m_index.erase(id);
        }
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
    // A queued write is dropped, one in flight finished: the unlink is final.
    const bool cancelled = m_writer && m_writer->cancel(id);
    std::lock_guard lock(stripe(id));
    bool removed = false;
    if (m_small && m_small->contains(ns, id)) {
        const SmallKeyRef keys[] = {{ns, id}};
        auto erased = m_small->erase(keys);
        if (!erased) {
            return tl::make_unexpected(io_error(std::move(erased.error())));
        }
        removed = *erased > 0;
    }
    const std::string path = m_layout.entry_path(ns, id.hex());
    if (::unlink(path.c_str()) != 0) {
        if (errno != ENOENT && errno != ENOTDIR) {
            return tl::make_unexpected(
                io_error(fmt::format("cannot remove {}: {}", path, errno_text(errno))));
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
