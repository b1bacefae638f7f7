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
    if (retry_replaced(true) > 0) {
        abandon_replaced();
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
    std::lock_guard lock(stripe(id));
    discard_corrupt_locked(ns, path, id, fd, reason);
}

void DiskTier::discard_corrupt_locked(std::string_view ns, const std::string& path,
                                      const Hash128& id, int fd, std::string_view reason) {
    m_stats.tier(ns, TierId::disk).corrupt.fetch_add(1, std::memory_order_relaxed);
    logger().warn("removing broken cache file {}: {}", path, reason);
    // The file found broken, not one renamed into its place since.
    struct stat now {};
    const bool removed = fd >= 0 ? remove_if_same(path, fd)
                                 : ::lstat(path.c_str(), &now) == 0 && S_ISLNK(now.st_mode) &&
                                       ::unlink(path.c_str()) == 0;
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
        const auto queued = m_writer->find(id);
        if (m_deleting.hides(ns, id)) {
            return std::nullopt; // the disk may hold older values than the write dropped
        }
        if (queued) {
            if (queued->ns != ns || queued->key != key || queued->entry.expired(now_ms())) {
                return std::nullopt;
            }
            return queued->entry;
        }
    }
    if (replaced_pending(id)) {
        return std::nullopt; // what is stored was replaced by a failed put or delete
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
        // Under the key's lock: a newer file renamed into place and recorded
        // between this unlink and the erase would be forgotten by the index,
        // left beside the key's next values, and served again once they are
        // gone.
        std::lock_guard lock(stripe(id));
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

    auto hold = hold_for_reply(touch && large, std::max(header->header.value_size, header->size));
    if (!hold) {
        return tl::make_unexpected(std::move(hold.error()));
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
    // Charged before it is shared: a read that shares it shares the charge.
    decoded->entry.value = hold->attach(decoded->entry.value);
    if (large) {
        // Keyed by the checksum decode() verified: that of these very bytes.
        m_shared_reads.remember(id, file.size(),
                                trailer_checksum(file.bytes().last<k_entry_trailer_size>()),
                                decoded->entry.value);
    }
    touch_file();
    return std::move(decoded->entry);
}

tl::expected<ReadHold, StoreError> DiskTier::hold_for_reply(bool large_for_reply,
                                                            std::uint64_t bytes) {
    ReadBudget* const budget = m_options.read_budget.get();
    if (!large_for_reply || budget == nullptr) {
        return ReadHold();
    }
    if (auto hold = budget->try_hold(bytes)) {
        return std::move(*hold);
    }
    return tl::make_unexpected(StoreError{
        Failure::busy, fmt::format("no room in daemon.max_reply_bytes ({} of {} bytes held by "
                                   "large values being read or sent) for a {} byte value",
                                   budget->in_use(), budget->limit(), bytes)});
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
        const auto queued = m_writer->find(id);
        if (m_deleting.hides(ns, id)) {
            return false;
        }
        if (queued) {
            return queued->ns == ns && queued->key == key && !queued->entry.expired(now_ms());
        }
    }
    if (replaced_pending(id)) {
        return false; // a copy a failed put or delete replaced
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

} // namespace pt2cache::daemon::store
