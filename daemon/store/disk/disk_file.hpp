// SPDX-License-Identifier: MIT
// File-level helpers of the disk tier: reading an entry file's header,
// removing a file only if it is still the one that was read, errors.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <sys/stat.h>
#include <utility>

#include "daemon/store/disk/disk_entry.hpp"
#include "daemon/store/tier.hpp"

#include <tl/expected.hpp>

namespace pt2cache::daemon::store {

struct EntryFileHeader {
    EntryHeader header;
    std::uint64_t size = 0; // of the file
    UnixMs mtime_ms = 0;
};

// The header, ns and key of the regular file open as `fd`, checked against
// the file's real size. Reads only the first bytes.
tl::expected<EntryFileHeader, std::string> read_entry_header(int fd);

// Unlinks `path` if it still names the file open as `fd` (a concurrent put
// may have renamed a fresh file over it). True when unlinked.
bool remove_if_same(const std::string& path, int fd);

UnixMs mtime_ms(const struct stat& info);

// The disk tier's failures, as StoreErrors.
inline StoreError io_error(std::string message) {
    return StoreError{Failure::io, std::move(message)};
}
StoreError bad_namespace(std::string_view ns);

// The cache directory's own directories and files: the user's alone.
inline constexpr unsigned k_dir_mode = 0700;
inline constexpr unsigned k_file_mode = 0600;

// A filesystem block, and LMDB's page in small.mdb: the unit space is charged in.
inline constexpr std::uint64_t k_page = 4096;

// The space an entry file of `size` bytes is charged: whole 4 KiB blocks, as
// `du` counts them on the usual file systems.
inline std::uint64_t file_charge(std::uint64_t size) {
    return (size + k_page - 1) / k_page * k_page;
}

} // namespace pt2cache::daemon::store
