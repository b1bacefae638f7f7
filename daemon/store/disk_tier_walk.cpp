// SPDX-License-Identifier: MIT
// The parts of DiskTier that walk directories: the startup scan, LIST, SCAN
// and CLEAR.
#include <algorithm>
#include <cerrno>
#include <csignal>
#include <fcntl.h>
#include <optional>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

#include "daemon/store/disk_entry.hpp"
#include "daemon/store/disk_file.hpp"
#include "daemon/store/disk_tier.hpp"
#include "daemon/store/log.hpp"
#include "daemon/store/posix_file.hpp"

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

// A temporary file is left over unless its writer may still be running.
bool is_leftover_temp(long pid) {
    if (pid <= 0) {
        return true;
    }
    if (pid == static_cast<long>(::getpid())) {
        return false;
    }
    return ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

} // namespace

void DiskTier::scan() {
    std::vector<DiskIndex::ScannedFile> scanned;
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
                if (is_temp_name(file.name, pid)) {
                    if (is_leftover_temp(pid) && ::unlink(path.c_str()) == 0) {
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
                scanned.push_back({ns_entry.name, *id, size, mtime_ms(info)});
            }
        }
    }
    const std::size_t found = scanned.size();
    m_index.merge_scan(std::move(scanned));
    {
        std::lock_guard lock(m_mutex);
        m_scan_complete.store(true, std::memory_order_release);
    }
    m_wake.notify_all();
    logger().info("disk cache scan of {}: {} files, {} bytes, {} leftover temporary files "
                  "removed",
                  m_layout.root(), found, bytes, temps_removed);
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
    const std::string ns_dir = m_layout.ns_dir(ns);
    const std::string_view first_shard = cursor.substr(0, std::min<std::size_t>(2, cursor.size()));
    std::string last_examined;
    const UnixMs now = now_ms();
    for (const std::string& shard : sorted_shards(ns_dir)) {
        if (shard < first_shard) {
            continue;
        }
        const std::string shard_dir = fmt::format("{}/{}", ns_dir, shard);
        for (const std::string& name : entry_names_after(shard_dir, shard, cursor)) {
            if (page.entries.size() == limit) {
                // Another candidate exists: the listing goes on.
                page.next_cursor = last_examined;
                return page;
            }
            last_examined = name;
            const auto header = live_header(fmt::format("{}/{}", shard_dir, name), ns, now);
            if (!header) {
                continue;
            }
            page.entries.push_back(
                {header->header.key, header->header.value_size, header->mtime_ms});
        }
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
        const std::string_view first_shard =
            after.substr(0, std::min<std::size_t>(2, after.size()));
        const std::string ns_dir = m_layout.ns_dir(ns);
        for (const std::string& shard : sorted_shards(ns_dir)) {
            if (shard < first_shard) {
                continue;
            }
            const std::string shard_dir = fmt::format("{}/{}", ns_dir, shard);
            for (const std::string& name : entry_names_after(shard_dir, shard, after)) {
                if (page.entries.size() == limit || examined == k_scan_files_per_page) {
                    // Another candidate exists: the scan goes on.
                    page.next_cursor = last_examined;
                    return page;
                }
                ++examined;
                last_examined = fmt::format("{}/{}", ns, name);
                const auto header = live_header(fmt::format("{}/{}", shard_dir, name), ns, now);
                if (!header || header->header.created_ms < since_ms) {
                    continue;
                }
                page.entries.push_back({ns, header->header.key, header->header.value_size,
                                        header->header.created_ms, header->header.expires_ms});
            }
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
            if (::unlink(path.c_str()) == 0) {
                ++removed;
                m_index.erase(*id);
            } else if (errno != ENOENT) {
                return tl::make_unexpected(StoreError{
                    Failure::io, fmt::format("cannot remove {}: {}", path, errno_text(errno))});
            }
        }
    }
    return removed;
}

} // namespace pt2cache::daemon::store
