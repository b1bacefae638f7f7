// SPDX-License-Identifier: MIT
// The parts of DiskTier that deal with the small-entry store (LMDB): routing,
// reads and writes, the startup load of its meta records, eviction,
// compaction and the migration of small files. The rules:
// docs/architecture.md, "Small entries in LMDB".
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <fcntl.h>
#include <filesystem>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/store/disk/disk_entry.hpp"
#include "daemon/store/disk/disk_file.hpp"
#include "daemon/store/disk/disk_small_salvage.hpp"
#include "daemon/store/disk/disk_tier.hpp"
#include "daemon/store/disk/posix_file.hpp"
#include "daemon/store/log.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace pt2cache::daemon::store {

namespace {

constexpr std::size_t k_touch_limit = 100'000; // noted accesses kept between flushes
constexpr std::size_t k_migrate_batch = 256;
constexpr std::size_t k_salvage_batch_bytes = std::size_t{4} << 20U;
// The access time salvaged entries get: the oldest, where the index puts them.
constexpr UnixMs k_salvaged_atime_ms = 1;
constexpr std::uint64_t k_min_map_size = 64ULL << 20;

// An estimate of what a small entry of `size` encoded bytes occupies in
// LMDB: its value node and its meta node in leaf pages about 70 % full, or
// whole overflow pages for a value too large for a leaf. Eviction only uses
// it to size its batches; the bound itself is measured (used_bytes()).
std::uint64_t small_charge(std::uint64_t size) {
    constexpr std::uint64_t k_node = 8 + 40 + 2;  // node header, key, page pointer
    constexpr std::uint64_t k_meta = k_node + 12; // the meta record
    constexpr std::uint64_t k_inline_max = 2000;  // larger values go to overflow pages
    if (size + k_node <= k_inline_max) {
        return (size + k_node + k_meta) * 10 / 7;
    }
    return (size + 16 + k_page - 1) / k_page * k_page + (k_node + 8 + k_meta) * 10 / 7;
}

} // namespace

void DiskTier::open_small_store() {
    const std::string path = m_layout.root() + "/small.mdb";
    struct stat info {};
    const bool present = ::lstat(path.c_str(), &info) == 0;
    if (m_options.small_entry_max == 0 && !present) {
        return;
    }
    if (present && !S_ISREG(info.st_mode)) {
        // A link or a directory: never followed, moved aside like a broken file.
        logger().error("small-entry store {} is not a regular file: moved to {}.broken", path,
                       path);
        std::error_code ec;
        std::filesystem::remove_all(path + ".broken", ec);
        ::rename(path.c_str(), (path + ".broken").c_str());
        m_stats.daemon().small_store_recoveries.fetch_add(1, std::memory_order_relaxed);
    }
    std::filesystem::path prefix;
    for (const auto& part : std::filesystem::path(m_layout.root())) {
        prefix /= part;
        if (const auto made = make_dir(prefix.string(), 0700); !made) {
            logger().error("small entries are stored as files: cannot create {}: {}",
                           prefix.string(), errno_text(made.error()));
            return;
        }
    }
    std::uint64_t map_size = m_options.small_map_size != 0
                                 ? m_options.small_map_size
                                 : std::max(2 * m_options.max_size, k_min_map_size);
    // Under an address space limit (ulimit -v), a quarter of it at most:
    // compaction maps a copy as large, and requests need memory too.
    if (rlimit limit{}; ::getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
        const std::uint64_t quarter = static_cast<std::uint64_t>(limit.rlim_cur) / 4;
        if (map_size > quarter) {
            logger().warn("small-entry store: a map of {} bytes is a quarter of the address "
                          "space limit ({} bytes): fewer small entries fit in it",
                          std::max(quarter, k_min_map_size), limit.rlim_cur);
            map_size = std::max(quarter, k_min_map_size);
        }
    }
    bool recovered = false;
    auto opened = SmallStore::open(path, map_size, recovered);
    if (recovered) {
        m_stats.daemon().small_store_recoveries.fetch_add(1, std::memory_order_relaxed);
    }
    if (!opened) {
        logger().error("small entries are stored as files: {}", opened.error());
        return;
    }
    m_small = std::move(*opened);
    m_small->set_on_quarantine([this](const QuarantinedStore& quarantined) {
        m_stats.daemon().small_store_recoveries.fetch_add(1, std::memory_order_relaxed);
        m_index.erase_all_small(quarantined.generation);
        {
            std::lock_guard lock(m_mutex);
            m_salvage_job = quarantined;
        }
        m_quarantines_handled.fetch_add(1, std::memory_order_release); // salvage_pending()
        m_wake.notify_all();
    });
}

bool DiskTier::routes_small(std::uint64_t size) const {
    return m_small && m_options.small_entry_max > 0 && size <= m_options.small_entry_max;
}

std::vector<std::unique_lock<std::mutex>> DiskTier::lock_stripes(std::span<const Hash128> ids) {
    std::vector<std::size_t> indexes;
    indexes.reserve(ids.size());
    for (const Hash128& id : ids) {
        indexes.push_back(id.low % m_stripes.size());
    }
    std::sort(indexes.begin(), indexes.end());
    indexes.erase(std::unique(indexes.begin(), indexes.end()), indexes.end());
    std::vector<std::unique_lock<std::mutex>> locks;
    locks.reserve(indexes.size());
    for (const std::size_t index : indexes) {
        locks.emplace_back(m_stripes[index]);
    }
    return locks;
}

tl::expected<void, StoreError> DiskTier::write_small(std::span<const PendingWrite* const> batch,
                                                     bool report) {
    std::vector<Hash128> ids;
    ids.reserve(batch.size());
    for (const PendingWrite* write : batch) {
        ids.push_back(write->id);
    }
    const auto locks = lock_stripes(ids);
    std::vector<SmallWrite> writes;
    std::vector<const PendingWrite*> included;
    writes.reserve(batch.size());
    for (const PendingWrite* write : batch) {
        // One entry, one store: the file copy goes first. If it cannot go,
        // the new bytes are not written (the file would outlive them). Once
        // the scan is complete the index knows every file (the daemon owns
        // the directory, and this entry's stripe is held): no unlink when it
        // records none, unless the key is marked replaced (forget_replaced:
        // the index forgot a file that could not be deleted; a review: it
        // was left, and served once this small copy had expired).
        const bool may_have_file =
            !scan_complete() || m_index.where(write->id) == false || replaced_pending(write->id);
        const std::string path =
            may_have_file ? m_layout.entry_path(write->ns, write->id.hex()) : std::string();
        if (may_have_file && ::unlink(path.c_str()) != 0 && errno != ENOENT && errno != ENOTDIR) {
            auto error = io_error(fmt::format("cannot remove {}: {}", path, errno_text(errno)));
            // Not written, and the file it replaces never served again (the
            // put may have been acknowledged from the write queue).
            forget_replaced(write->ns, write->id);
            if (!report) {
                return tl::make_unexpected(std::move(error));
            }
            log_write_error(write->ns, write->key, error);
            continue;
        }
        const EncodedEntry& encoded = write->encode();
        writes.push_back(SmallWrite{write->ns,
                                    write->id,
                                    {std::span<const std::byte>(encoded.head), encoded.payload,
                                     std::span<const std::byte>(encoded.trailer)}});
        included.push_back(write);
    }
    if (writes.empty()) {
        return {};
    }
    const auto started = std::chrono::steady_clock::now();
    auto written = m_small->write(writes, now_ms());
    const std::chrono::nanoseconds took = std::chrono::steady_clock::now() - started;
    m_stats.daemon().small_store_writes.record(static_cast<std::uint64_t>(took.count()));
    if (!written) {
        // The values these puts replace must not come back in their place
        // (they may have been acknowledged from memory): files are gone
        // already, small copies go now or are marked until they can
        // (forget_replaced), and the index forgets both.
        // Asked of small.mdb, not of the index: an entry the evictor has
        // popped, or the startup scan not indexed yet, is there too.
        for (const PendingWrite* write : included) {
            if (m_small->contains(write->ns, write->id)) {
                forget_replaced(write->ns, write->id);
            } else {
                m_index.erase(write->id);
            }
        }
        if (written.error().no_space) {
            note_space_short();
        }
        if (written.error().map_full) {
            m_small_map_full.store(true, std::memory_order_relaxed);
            { std::lock_guard lock(m_mutex); }
            m_wake.notify_all();
        }
        auto error = io_error(std::move(written.error().message));
        if (!report) {
            return tl::make_unexpected(std::move(error));
        }
        for (const PendingWrite* write : included) {
            log_write_error(write->ns, write->key, error);
        }
        return {};
    }
    for (const PendingWrite* write : included) {
        clear_replaced(write->id); // what small.mdb holds now is the new value
    }
    for (const PendingWrite* write : included) {
        m_index.record(write->ns, write->id, small_charge(write->encoded_size), true);
    }
    wake_evictor_if_needed();
    return {};
}

tl::expected<void, StoreError> DiskTier::remove_small_copy(std::string_view ns, const Hash128& id) {
    if (!m_small || !m_small->contains(ns, id)) {
        return {};
    }
    const SmallKeyRef keys[] = {{ns, id}};
    if (auto erased = m_small->erase(keys); !erased) {
        return tl::make_unexpected(io_error(std::move(erased.error())));
    }
    m_index.erase(id);
    return {};
}

tl::expected<std::optional<Entry>, StoreError>
DiskTier::load_small(std::string_view ns, std::string_view key, const Hash128& id, bool touch) {
    const std::uint64_t quarantines = m_small->quarantines();
    const std::uint64_t generation = m_small->generation();
    auto bytes = m_small->read(ns, id);
    if (!bytes && m_small->quarantines() != quarantines) {
        // LMDB faulted on a corrupt store, or reported it corrupt, and it was
        // replaced by an empty one: the entry went with it, a corrupt entry
        // like any other.
        m_stats.tier(ns, TierId::disk).corrupt.fetch_add(1, std::memory_order_relaxed);
        return std::nullopt;
    }
    if (!bytes) {
        return tl::make_unexpected(io_error(std::move(bytes.error())));
    }
    if (!*bytes) {
        return std::nullopt;
    }
    const Blob stored = Blob::adopt(std::move(**bytes));
    const auto discard = [&](std::string_view reason) {
        // Not deleted in place: LMDB wrote those bytes, so the page that holds
        // them was damaged after, perhaps in its offsets and sizes too, which
        // LMDB would follow into its own buffers on a write. The whole store
        // is set aside (on_quarantine forgets its entries).
        m_stats.tier(ns, TierId::disk).corrupt.fetch_add(1, std::memory_order_relaxed);
        m_small->set_aside(generation,
                           fmt::format("small entry {}/{} is broken: {}", ns, id.hex(), reason));
    };
    const auto touch_entry = [&] {
        if (touch) {
            m_index.touch(ns, id, small_charge(stored.size()), true);
            note_touch(ns, id);
        }
    };
    // A large value stored compressed (a few KiB here) that a reply still
    // holds is shared, as an entry file's is (see load_file). Only a large
    // one's header is decoded twice.
    // A declared size comes only from a whole header, so a trailer is there.
    static_assert(k_entry_header_size > k_entry_trailer_size);
    const bool large = declared_value_size(stored.bytes()) >= SharedReads::k_min_value_size;
    const auto checksum = large ? trailer_checksum(stored.bytes().last<k_entry_trailer_size>()) : 0;
    if (large) {
        const auto header = decode_header(stored.bytes());
        if (header && header->ns == ns && header->key == key && !header->expired(now_ms())) {
            if (auto held = m_shared_reads.find(id, stored.size(), checksum)) {
                touch_entry();
                return Entry{std::move(*held), header->created_ms, header->expires_ms};
            }
        }
    }
    auto hold = hold_for_reply(touch && large, declared_value_size(stored.bytes()));
    if (!hold) {
        return tl::make_unexpected(std::move(hold.error()));
    }
    auto decoded = decode(stored);
    if (!decoded) {
        discard(decoded.error());
        return std::nullopt;
    }
    if (decoded->ns != ns || decoded->key != key) {
        // Stored under (ns, id) but for another key: swapped or damaged.
        discard("it holds another key's entry");
        return std::nullopt;
    }
    if (decoded->entry.expired(now_ms())) {
        // Under the key's lock, as load_file's removal of an expired file.
        std::lock_guard lock(stripe(id));
        if (m_small->erase_if_same(ns, id, stored.bytes())) {
            m_index.erase(id);
        }
        return std::nullopt;
    }
    // Charged before it is shared: a read that shares it shares the charge.
    decoded->entry.value = hold->attach(decoded->entry.value);
    if (large) {
        // decode() verified that checksum over these bytes.
        m_shared_reads.remember(id, stored.size(), checksum, decoded->entry.value);
    }
    touch_entry();
    return std::move(decoded->entry);
}

bool DiskTier::exists_small(std::string_view ns, std::string_view key, const Hash128& id) {
    if (replaced_pending(id)) {
        return false;
    }
    const auto bytes = m_small->read(ns, id);
    if (!bytes || !*bytes) {
        return false;
    }
    const auto header = decode_header(**bytes);
    return header && header->file_size() == (*bytes)->size() && header->ns == ns &&
           header->key == key && !header->expired(now_ms());
}

void DiskTier::note_touch(std::string_view ns, const Hash128& id) {
    std::lock_guard lock(m_touch_mutex);
    if (m_touched.size() < k_touch_limit) {
        m_touched.emplace_back(std::string(ns), id);
    }
}

void DiskTier::flush_touches() {
    std::vector<std::pair<std::string, Hash128>> touched;
    {
        std::lock_guard lock(m_touch_mutex);
        touched.swap(m_touched);
    }
    if (!m_small || touched.empty()) {
        return;
    }
    std::vector<SmallKeyRef> keys;
    keys.reserve(touched.size());
    for (const auto& [ns, id] : touched) {
        keys.push_back({ns, id});
    }
    m_small->touch(keys, now_ms());
}

void DiskTier::scan_small(std::vector<DiskIndex::ScannedFile>& scanned) {
    if (!m_small) {
        return;
    }
    const std::size_t before = scanned.size();
    scanned.reserve(before + m_small->size());
    const std::uint64_t generation = m_small->generation();
    auto loaded = m_small->load_meta([&](SmallRecord&& record) {
        if (is_valid_namespace(record.ns)) {
            scanned.push_back({std::move(record.ns), record.id, small_charge(record.size),
                               record.atime_ms, true});
        }
    });
    if (!loaded) {
        // Set aside (logged and counted by on_quarantine), unless a fault or a
        // corrupt tree quarantined it already: none of its records is indexed.
        m_small->set_aside(generation, loaded.error());
        scanned.resize(before);
    }
}

void DiskTier::migrate(const std::vector<std::pair<std::string, Hash128>>& files) {
    std::uint64_t moved = 0;
    for (std::size_t start = 0; start < files.size() && m_small; start += k_migrate_batch) {
        if (m_stop_requested.load(std::memory_order_relaxed)) {
            return;
        }
        const std::size_t end = std::min(files.size(), start + k_migrate_batch);
        std::vector<Hash128> ids;
        for (std::size_t i = start; i < end; ++i) {
            ids.push_back(files[i].second);
        }
        const auto locks = lock_stripes(ids);
        struct Item {
            std::string path;
            UniqueFd fd;
            std::vector<std::byte> bytes;
            std::size_t file = 0;
        };
        std::vector<Item> items;
        for (std::size_t i = start; i < end; ++i) {
            const auto& [ns, id] = files[i];
            Item item{m_layout.entry_path(ns, id.hex()), {}, {}, i};
            const std::optional<bool> where = m_index.where(id);
            if (where == true) {
                // The entry was written to the store since: the file is the
                // identical leftover of an interrupted migration, or gone.
                ::unlink(item.path.c_str());
                continue;
            }
            if (!where) {
                continue; // removed or evicted since the scan
            }
            auto fd = open_fd(item.path, O_RDONLY | O_NOFOLLOW);
            struct stat info {};
            if (!fd || ::fstat(fd->get(), &info) != 0 || !S_ISREG(info.st_mode) ||
                static_cast<std::uint64_t>(info.st_size) > m_options.small_entry_max) {
                continue;
            }
            item.bytes.resize(static_cast<std::size_t>(info.st_size));
            const auto got = read_at(fd->get(), 0, item.bytes);
            if (!got || *got != item.bytes.size()) {
                continue;
            }
            const auto decoded = decode(std::span<const std::byte>(item.bytes));
            if (!decoded) {
                discard_corrupt_locked(ns, item.path, id, fd->get(), decoded.error());
                continue;
            }
            if (decoded->ns != ns || entry_hash(decoded->ns, decoded->key) != id ||
                decoded->entry.expired(now_ms())) {
                continue; // not ours, or for the evictor
            }
            item.fd = std::move(*fd);
            items.push_back(std::move(item));
        }
        std::vector<SmallWrite> writes;
        for (const Item& item : items) {
            const auto& [ns, id] = files[item.file];
            struct stat info {};
            ::fstat(item.fd.get(), &info);
            writes.push_back(SmallWrite{
                ns, id, {std::span<const std::byte>(item.bytes), {}, {}}, mtime_ms(info)});
        }
        if (writes.empty()) {
            continue;
        }
        if (auto written = m_small->write(writes, now_ms()); !written) {
            logger().warn("migration of small files into {} stopped: {}", m_small->path(),
                          written.error().message);
            return;
        }
        // Committed: now the files may go.
        for (const Item& item : items) {
            const auto& [ns, id] = files[item.file];
            remove_if_same(item.path, item.fd.get());
            m_index.relocate(id, small_charge(item.bytes.size()), true);
            ++moved;
        }
    }
    if (moved > 0) {
        logger().info("moved {} small entry files into {}", moved, m_small->path());
    }
}

void DiskTier::salvage_small(const QuarantinedStore& quarantined) {
    const auto started = std::chrono::steady_clock::now();
    auto opened = SmallSalvage::open(quarantined.path, quarantined.txnid,
                                     static_cast<std::size_t>(m_options.small_entry_max));
    if (!opened) {
        m_index.end_salvage(quarantined.generation);
        logger().error("cannot salvage the entries of {}: {}", quarantined.path, opened.error());
        return;
    }
    SmallSalvage& salvage = **opened;
    std::uint64_t restored = 0;
    std::uint64_t broken = 0;
    std::string stopped;
    while (stopped.empty() && !m_stop_requested.load(std::memory_order_relaxed)) {
        if (m_small->generation() != quarantined.generation) {
            stopped = "the store was replaced again"; // its own salvage follows
            break;
        }
        const std::vector<SalvagedRecord> records = salvage.next(k_salvage_batch_bytes);
        if (records.empty()) {
            break;
        }
        // Verified as a read verifies them: checksum, lengths, and the
        // namespace and key that the record's key names.
        const UnixMs now = now_ms();
        std::vector<const SalvagedRecord*> good;
        for (const SalvagedRecord& record : records) {
            const auto decoded = decode(std::span<const std::byte>(record.bytes));
            if (!decoded || decoded->ns != record.ns || !is_valid_namespace(decoded->ns) ||
                entry_hash(decoded->ns, decoded->key) != record.id) {
                ++broken;
                continue;
            }
            if (!decoded->entry.expired(now) && routes_small(record.bytes.size())) {
                good.push_back(&record);
            }
        }
        std::vector<Hash128> ids;
        for (const SalvagedRecord* record : good) {
            ids.push_back(record->id);
        }
        const auto locks = lock_stripes(ids);
        std::lock_guard salvage_lock(m_salvage_mutex);
        std::vector<SmallWrite> writes;
        std::vector<const SalvagedRecord*> written;
        for (const SalvagedRecord* record : good) {
            // Put, erased, evicted or cleared since the quarantine: the index
            // knows better.
            // Not a value a failed put replaced: that one must stay gone.
            if (m_index.salvage_wanted(quarantined.generation, record->ns, record->id) &&
                !replaced_pending(record->id)) {
                writes.push_back(SmallWrite{record->ns,
                                            record->id,
                                            {std::span<const std::byte>(record->bytes), {}, {}},
                                            k_salvaged_atime_ms});
                written.push_back(record);
            }
        }
        if (writes.empty()) {
            continue;
        }
        if (auto done = m_small->write(writes, now); !done) {
            stopped = std::move(done.error().message);
            break;
        }
        for (const SalvagedRecord* record : written) {
            m_index.record_salvaged(quarantined.generation, record->ns, record->id,
                                    small_charge(record->bytes.size()));
        }
        restored += written.size();
    }
    m_index.end_salvage(quarantined.generation);
    m_stats.daemon().small_store_salvaged.fetch_add(restored, std::memory_order_relaxed);
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - started);
    logger().warn("salvaged {} of the {} entries of {} in {} ms ({} failed verification){}{}",
                  restored, salvage.entries(), quarantined.path, took.count(), broken,
                  salvage.damage().empty() ? ""
                                           : fmt::format("; damage ({} seeks past it): {}",
                                                         salvage.skips(), salvage.damage()),
                  stopped.empty() ? "" : "; stopped: " + stopped);
    wake_evictor_if_needed();
}

void DiskTier::wait_for_migration() {
    std::unique_lock lock(m_mutex);
    m_wake.wait(lock, [this] { return m_stop || m_migration_done.load(); });
}

} // namespace pt2cache::daemon::store
