// SPDX-License-Identifier: MIT
#include "daemon/store/disk/disk_file.hpp"

#include <algorithm>
#include <cerrno>
#include <unistd.h>
#include <vector>

#include "daemon/store/disk/posix_file.hpp"

#include <fmt/format.h>

namespace pt2cache::daemon::store {

namespace {

// The first read of an entry file; enough for the header of any usual key.
constexpr std::size_t k_header_probe = 4096;

tl::expected<EntryHeader, std::string> header_from_prefix(int fd, std::uint64_t file_size,
                                                          std::size_t want) {
    std::vector<std::byte> prefix(
        static_cast<std::size_t>(std::min<std::uint64_t>(want, file_size)));
    const auto got = read_at(fd, 0, prefix);
    if (!got) {
        return tl::make_unexpected(fmt::format("read: {}", errno_text(got.error())));
    }
    prefix.resize(*got);
    return decode_header(prefix);
}

} // namespace

UnixMs mtime_ms(const struct stat& info) {
    return static_cast<UnixMs>(info.st_mtim.tv_sec) * 1000 + info.st_mtim.tv_nsec / 1'000'000;
}

tl::expected<EntryFileHeader, std::string> read_entry_header(int fd) {
    struct stat info {};
    if (::fstat(fd, &info) != 0) {
        return tl::make_unexpected(fmt::format("fstat: {}", errno_text(errno)));
    }
    EntryFileHeader out;
    out.size = static_cast<std::uint64_t>(info.st_size);
    out.mtime_ms = mtime_ms(info);
    auto header = header_from_prefix(fd, out.size, k_header_probe);
    if (!header && out.size > k_header_probe) {
        // Only a key longer than the probe needs the second read.
        header = header_from_prefix(fd, out.size, k_entry_max_head_size);
    }
    if (!header) {
        return tl::make_unexpected(std::move(header.error()));
    }
    if (header->file_size() != out.size) {
        return tl::make_unexpected(
            fmt::format("bad length: the header describes {} bytes, the file has {}",
                        header->file_size(), out.size));
    }
    out.header = std::move(*header);
    return out;
}

StoreError bad_namespace(std::string_view ns) {
    return io_error(fmt::format("invalid namespace {:?}", ns));
}

bool remove_if_same(const std::string& path, int fd) {
    struct stat opened {};
    struct stat current {};
    if (::fstat(fd, &opened) != 0 || ::lstat(path.c_str(), &current) != 0) {
        return false;
    }
    if (opened.st_dev != current.st_dev || opened.st_ino != current.st_ino) {
        return false;
    }
    return ::unlink(path.c_str()) == 0;
}

} // namespace pt2cache::daemon::store
