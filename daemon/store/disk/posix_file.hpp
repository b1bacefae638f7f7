// SPDX-License-Identifier: MIT
// Thin, exception-free POSIX file helpers for the disk tier. Errors are errno
// values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <tl/expected.hpp>

namespace pt2cache::daemon::store {

// An owned file descriptor, closed on destruction.
class UniqueFd {
public:
    UniqueFd() = default;
    explicit UniqueFd(int fd)
        : m_fd(fd) {}
    ~UniqueFd();
    UniqueFd(UniqueFd&& other) noexcept;
    UniqueFd& operator=(UniqueFd&& other) noexcept;
    UniqueFd(const UniqueFd&) = delete;
    UniqueFd& operator=(const UniqueFd&) = delete;

    int get() const { return m_fd; }
    // Closes now; returns 0 or the errno of close(2) (which can report
    // delayed write errors).
    int close();
    explicit operator bool() const { return m_fd >= 0; }

private:
    int m_fd = -1;
};

// open(2) with O_CLOEXEC added, retried on EINTR.
tl::expected<UniqueFd, int> open_fd(const std::string& path, int flags, unsigned mode = 0);

// Reads into `out` from `offset` until `out` is full or end of file; returns
// the number of bytes read.
tl::expected<std::size_t, int> read_at(int fd, std::uint64_t offset, std::span<std::byte> out);

// Writes every byte of every part, in order.
tl::expected<void, int> write_all(int fd, std::span<const std::span<const std::byte>> parts);

struct DirEntry {
    std::string name;
    bool is_dir = false;     // a directory (not followed through symlinks)
    bool is_regular = false; // a regular file (not followed through symlinks)
};

// The entries of directory `path`, without "." and "..", in no order.
tl::expected<std::vector<DirEntry>, int> list_dir(const std::string& path);

// mkdir(2) that treats an existing directory as success.
tl::expected<void, int> make_dir(const std::string& path, unsigned mode);

// "message (errno name)" for logs and StoreError messages.
std::string errno_text(int error);

} // namespace pt2cache::daemon::store
