// SPDX-License-Identifier: MIT
// The parts of DiskTier that walk directories (and the small-entry store
// beside them): the startup scan, LIST, SCAN and CLEAR.
#include <algorithm>
#include <cerrno>
#include <csignal>
#include <fcntl.h>
#include <optional>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

#include "daemon/store/disk/disk_entry.hpp"
#include "daemon/store/disk/disk_file.hpp"
#include "daemon/store/disk/disk_tier.hpp"
#include "daemon/store/disk/posix_file.hpp"
#include "daemon/store/log.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace pt2cache::daemon::store {

namespace {

bool is_shard_name(std::string_view name) {
    const auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); };
    return name.size() == 2 && hex(name[0]) && hex(name[1]);
}

// Shard directories of `ns_dir`, sorted; none when it does not exist.
std::vector<std::string> sorted_shards(const std::string& ns_dir) {
    std::vector<std::string> shards;
    if (auto entries = list_dir(ns_dir)) {
        for (auto& entry : *entries) {
            if (entry.is_dir && is_shard_name(entry.name)) {
                shards.push_back(std::move(entry.name));
            }
        }
    }
    std::sort(shards.begin(), shards.end());
    return shards;
}

// The entry file names in `shard_dir` that sort after `after`, sorted.
std::vector<std::string> entry_names_after(const std::string& shard_dir, const std::string& shard,
                                           std::string_view after) {
    std::vector<std::string> names;
    if (auto files = list_dir(shard_dir)) {
        for (auto& file : *files) {
            if (file.name > after && file.name.starts_with(shard) && parse_entry_name(file.name)) {
                names.push_back(std::move(file.name));
            }
        }
    }
    std::sort(names.begin(), names.end());
    return names;
}

// The header of the entry file at `path` when it is a regular file holding
// a live entry of `ns`; broken, foreign and expired files are nullopt.
std::optional<EntryFileHeader> live_header(const std::string& path, std::string_view ns,
                                           UnixMs now) {
    auto fd = open_fd(path, O_RDONLY | O_NOFOLLOW);
    struct stat info {};
    if (!fd || ::fstat(fd->get(), &info) != 0 || !S_ISREG(info.st_mode)) {
        return std::nullopt;
    }
    auto header = read_entry_header(fd->get());
    if (!header || header->header.ns != ns || header->header.expired(now)) {
        return std::nullopt;
    }
    return std::move(*header);
}

// The header of the small entry `hex` of `ns` when it is live; its `mtime_ms`
// is its creation time.
std::optional<EntryFileHeader> live_small_header(SmallStore& small, std::string_view ns,
                                                 std::string_view hex, UnixMs now) {
    const auto id = parse_entry_name(hex);
    if (!id) {
        return std::nullopt;
    }
    const auto bytes = small.read(ns, *id);
    if (!bytes || !*bytes) {
        return std::nullopt;
    }
    auto header = decode_header(**bytes);
    if (!header || header->file_size() != (*bytes)->size() || header->ns != ns ||
        header->expired(now)) {
        return std::nullopt;
    }
    EntryFileHeader out;
    out.size = (*bytes)->size();
    out.mtime_ms = header->created_ms;
    out.header = std::move(*header);
    return out;
}

// The entry names of one namespace after `after`, from the file tree and the
// small-entry store, in one ascending order. A name in both is given once,
// as small.
class MergedNames {
public:
    MergedNames(const DiskLayout& layout, SmallStore* small, std::string_view ns,
                std::string_view after)
        : m_layout(layout)
        , m_small(small)
        , m_ns(ns)
        , m_after(after)
        , m_ns_dir(layout.ns_dir(ns))
        , m_shards(sorted_shards(m_ns_dir)) {
        const std::string_view first_shard =
            after.substr(0, std::min<std::size_t>(2, after.size()));
        while (m_shard_pos < m_shards.size() && m_shards[m_shard_pos] < first_shard) {
            ++m_shard_pos;
        }
        m_small_after = parse_entry_name(after);
    }

    // The next name and whether it is a small entry.
    std::optional<std::pair<std::string, bool>> next() {
        fill_files();
        fill_small();
        const bool have_file = m_file_pos < m_files.size();
        const bool have_small = m_small_pos < m_smalls.size();
        if (!have_file && !have_small) {
            return std::nullopt;
        }
        if (have_small && (!have_file || m_smalls[m_small_pos] <= m_files[m_file_pos])) {
            if (have_file && m_smalls[m_small_pos] == m_files[m_file_pos]) {
                ++m_file_pos;
            }
            return std::pair{m_smalls[m_small_pos++], true};
        }
        return std::pair{m_files[m_file_pos++], false};
    }

    std::string shard_dir_of(std::string_view name) const {
        return fmt::format("{}/{}", m_ns_dir, name.substr(0, 2));
    }

private:
    void fill_files() {
        while (m_file_pos == m_files.size() && m_shard_pos < m_shards.size()) {
            const std::string& shard = m_shards[m_shard_pos++];
            m_files = entry_names_after(fmt::format("{}/{}", m_ns_dir, shard), shard, m_after);
            m_file_pos = 0;
        }
    }
    void fill_small() {
        if (m_small == nullptr || m_small_pos < m_smalls.size() || m_small_done) {
            return;
        }
        const auto ids = m_small->ids_after(m_ns, m_small_after, 512);
        m_small_done = ids.size() < 512;
        m_smalls.clear();
        m_small_pos = 0;
        for (const Hash128& id : ids) {
            m_smalls.push_back(id.hex());
        }
        if (!ids.empty()) {
            m_small_after = ids.back();
        }
    }

    const DiskLayout& m_layout;
    SmallStore* m_small;
    std::string m_ns;
    std::string m_after;
    std::string m_ns_dir;
    std::vector<std::string> m_shards;
    std::size_t m_shard_pos = 0;
    std::vector<std::string> m_files;
    std::size_t m_file_pos = 0;
    std::vector<std::string> m_smalls;
    std::size_t m_small_pos = 0;
    std::optional<Hash128> m_small_after;
    bool m_small_done = false;
};

// A temporary file of another pid is left over unless that process runs.
bool is_leftover_temp(long pid) {
    if (pid <= 0) {
        return true;
    }
    return ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

} // namespace

void DiskTier::scan() {
    std::vector<DiskIndex::ScannedFile> scanned;
    scan_small(scanned);
    const std::size_t small_found = scanned.size();
    // Files small enough for the small-entry store: moved there afterwards.
    std::vector<std::pair<std::string, Hash128>> to_migrate;
    const bool migrating = m_small && m_options.small_entry_max > 0;
    std::uint64_t temps_removed = 0;
    std::uint64_t bytes = 0;
    auto namespaces = list_dir(m_layout.versioned());
    if (!namespaces && namespaces.error() != ENOENT) {
        logger().warn("cannot scan {}: {}", m_layout.versioned(), errno_text(namespaces.error()));
    }
    for (const DirEntry& ns_entry : namespaces.value_or(std::vector<DirEntry>{})) {
        if (!ns_entry.is_dir || !is_valid_namespace(ns_entry.name)) {
            continue;
        }
        const std::string ns_dir = m_layout.ns_dir(ns_entry.name);
        for (const std::string& shard : sorted_shards(ns_dir)) {
            const std::string shard_dir = fmt::format("{}/{}", ns_dir, shard);
            auto files = list_dir(shard_dir);
            if (!files) {
                continue;
            }
            for (const DirEntry& file : *files) {
                if (m_stop_requested.load(std::memory_order_relaxed)) {
                    return;
                }
                const std::string path = fmt::format("{}/{}", shard_dir, file.name);
                long pid = 0;
                std::uint64_t counter = 0;
                if (is_temp_name(file.name, pid, &counter)) {
                    // One of this pid's is ours only if its counter is in
                    // the range this process has used: else an earlier
                    // daemon of the same pid (pid 1 in a container) left it.
                    const bool ours =
                        pid == static_cast<long>(::getpid()) && counter >= m_temp_counter_start &&
                        counter < m_temp_counter.load(std::memory_order_relaxed) + 1024;
                    const bool leftover =
                        pid == static_cast<long>(::getpid()) ? !ours : is_leftover_temp(pid);
                    if (leftover && ::unlink(path.c_str()) == 0) {
                        ++temps_removed;
                    }
                    continue;
                }
                const auto id = parse_entry_name(file.name);
                if (!id || !file.name.starts_with(shard)) {
                    continue;
                }
                struct stat info {};
                if (::lstat(path.c_str(), &info) != 0 || S_ISDIR(info.st_mode)) {
                    continue;
                }
                if (!S_ISREG(info.st_mode)) {
                    // A link or device where an entry belongs is never served,
                    // and once the index is authoritative no get would ever
                    // look at it: remove it now (the link, not its target).
                    if (::unlink(path.c_str()) == 0) {
                        m_stats.tier(ns_entry.name, TierId::disk)
                            .corrupt.fetch_add(1, std::memory_order_relaxed);
                        logger().warn("removing broken cache file {}: {}", path,
                                      S_ISLNK(info.st_mode) ? "a symbolic link"
                                                            : "not a regular file");
                    }
                    continue;
                }
                const auto size = static_cast<std::uint64_t>(info.st_size);
                bytes += size;
                scanned.push_back({ns_entry.name, *id, file_charge(size), mtime_ms(info)});
                if (migrating && size <= m_options.small_entry_max) {
                    to_migrate.emplace_back(ns_entry.name, *id);
                }
            }
        }
    }
    const std::size_t found = scanned.size() - small_found;
    m_index.merge_scan(std::move(scanned));
    {
        std::lock_guard lock(m_mutex);
        m_scan_complete.store(true, std::memory_order_release);
    }
    m_wake.notify_all();
    logger().info("disk cache scan of {}: {} files, {} bytes, {} leftover temporary files "
                  "removed; {} small entries",
                  m_layout.root(), found, bytes, temps_removed, small_found);
    compact_if_needed(true);
    migrate(to_migrate);
    {
        std::lock_guard lock(m_mutex);
        m_migration_done.store(true);
    }
    m_wake.notify_all();
}

tl::expected<ListPage, StoreError> DiskTier::list(std::string_view ns, std::string_view cursor,
                                                  std::size_t limit) {
    if (!is_valid_namespace(ns)) {
        return tl::make_unexpected(
            StoreError{Failure::io, fmt::format("invalid namespace {:?}", ns)});
    }
    if (!cursor.empty() && !parse_entry_name(cursor)) {
        return tl::make_unexpected(StoreError{Failure::io, "invalid LIST cursor"});
    }
    limit = std::max<std::size_t>(limit, 1);
    ListPage page;
    if (!enabled()) {
        return page;
    }
    // Read your writes: the entries queued before this call are listed.
    wait_for_writes();
    std::string last_examined;
    const UnixMs now = now_ms();
    MergedNames names(m_layout, m_small.get(), ns, cursor);
    while (auto name = names.next()) {
        if (page.entries.size() == limit) {
            // Another candidate exists: the listing goes on.
            page.next_cursor = last_examined;
            return page;
        }
        last_examined = name->first;
        if (hidden_name(ns, name->first)) {
            continue; // a value replaced or deleted, still on disk
        }
        const auto header =
            name->second
                ? live_small_header(*m_small, ns, name->first, now)
                : live_header(fmt::format("{}/{}", names.shard_dir_of(name->first), name->first),
                              ns, now);
        if (!header) {
            continue;
        }
        page.entries.push_back({header->header.key, header->header.value_size, header->mtime_ms});
    }
    return page;
}

tl::expected<ScanPage, StoreError>
DiskTier::scan_entries(std::string_view cursor, std::size_t limit, UnixMs since_ms,
                       const std::vector<std::string>& namespaces) {
    std::string_view cursor_ns;
    std::string_view cursor_name;
    if (!cursor.empty()) {
        const auto slash = cursor.find('/');
        cursor_ns = cursor.substr(0, slash);
        cursor_name = slash == std::string_view::npos ? "" : cursor.substr(slash + 1);
        if (!is_valid_namespace(cursor_ns) || !parse_entry_name(cursor_name)) {
            return tl::make_unexpected(StoreError{Failure::io, "invalid SCAN cursor"});
        }
    }
    limit = std::max<std::size_t>(limit, 1);
    ScanPage page;
    if (!enabled()) {
        return page;
    }
    // Read your writes: the entries queued before this call are listed (and
    // the namespace directories their writes create are there).
    wait_for_writes();
    std::vector<std::string> names_of_ns = namespaces;
    if (names_of_ns.empty()) {
        if (auto entries = list_dir(m_layout.versioned())) {
            for (auto& entry : *entries) {
                if (entry.is_dir && is_valid_namespace(entry.name)) {
                    names_of_ns.push_back(std::move(entry.name));
                }
            }
        }
        if (m_small) {
            for (std::string& ns : m_small->namespaces()) {
                names_of_ns.push_back(std::move(ns));
            }
        }
    }
    std::sort(names_of_ns.begin(), names_of_ns.end());
    names_of_ns.erase(std::unique(names_of_ns.begin(), names_of_ns.end()), names_of_ns.end());
    const UnixMs now = now_ms();
    std::size_t examined = 0;
    std::string last_examined;
    for (const std::string& ns : names_of_ns) {
        if (!is_valid_namespace(ns) || ns < cursor_ns) {
            continue;
        }
        const std::string_view after = ns == cursor_ns ? cursor_name : std::string_view();
        MergedNames names(m_layout, m_small.get(), ns, after);
        while (auto name = names.next()) {
            if (page.entries.size() == limit || examined == k_scan_files_per_page) {
                // Another candidate exists: the scan goes on.
                page.next_cursor = last_examined;
                return page;
            }
            ++examined;
            last_examined = fmt::format("{}/{}", ns, name->first);
            if (hidden_name(ns, name->first)) {
                continue; // never exported: a value replaced or deleted
            }
            const auto header =
                name->second ? live_small_header(*m_small, ns, name->first, now)
                             : live_header(fmt::format("{}/{}", names.shard_dir_of(name->first),
                                                       name->first),
                                           ns, now);
            if (!header || header->header.created_ms < since_ms) {
                continue;
            }
            page.entries.push_back({ns, header->header.key, header->header.value_size,
                                    header->header.created_ms, header->header.expires_ms});
        }
    }
    return page;
}

tl::expected<std::uint64_t, StoreError> DiskTier::clear(std::string_view ns) {
    if (!is_valid_namespace(ns)) {
        return tl::make_unexpected(
            StoreError{Failure::io, fmt::format("invalid namespace {:?}", ns)});
    }
    if (!enabled()) {
        return 0;
    }
    const std::string ns_dir = m_layout.ns_dir(ns);
    // Lookups in `ns` miss until its copies on disk are gone: they may be
    // older than the queued writes dropped here.
    const auto clearing = m_deleting.ns(ns);
    std::uint64_t removed = cancel_queued(ns);
    for (const std::string& shard : sorted_shards(ns_dir)) {
        const std::string shard_dir = fmt::format("{}/{}", ns_dir, shard);
        auto files = list_dir(shard_dir);
        if (!files) {
            continue;
        }
        for (const DirEntry& file : *files) {
            // Temporary files belong to writers in progress; leave them.
            const auto id = parse_entry_name(file.name);
            if (!id) {
                continue;
            }
            const std::string path = fmt::format("{}/{}", shard_dir, file.name);
            // Under the key's lock, so that a file a writer renames into
            // place meanwhile is either removed or keeps its index record.
            std::lock_guard lock(stripe(*id));
            if (::unlink(path.c_str()) == 0) {
                ++removed;
                m_index.erase(*id);
            } else if (errno != ENOENT) {
                return tl::make_unexpected(StoreError{
                    Failure::io, fmt::format("cannot remove {}: {}", path, errno_text(errno))});
            }
        }
    }
    if (m_small) {
        std::lock_guard salvage_lock(m_salvage_mutex);
        auto cleared = m_small->clear(ns);
        if (!cleared) {
            return tl::make_unexpected(StoreError{Failure::io, std::move(cleared.error())});
        }
        removed += *cleared;
        m_index.erase_small_of(ns);
    }
    return removed;
}

} // namespace pt2cache::daemon::store
