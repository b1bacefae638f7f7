// SPDX-License-Identifier: MIT
#include "daemon/store/disk/posix_file.hpp"

#include <cerrno>
#include <dirent.h>
#include <fcntl.h>
#include <memory>
#include <string_view>
#include <sys/stat.h>
#include <sys/uio.h>
#include <system_error>
#include <unistd.h>
#include <utility>

namespace pt2cache::daemon::store {

namespace {

struct DirCloser {
    void operator()(DIR* dir) const { ::closedir(dir); }
};

} // namespace

UniqueFd::~UniqueFd() {
    if (m_fd >= 0) {
        ::close(m_fd);
    }
}

int UniqueFd::close() {
    if (m_fd < 0) {
        return 0;
    }
    const int result = ::close(std::exchange(m_fd, -1));
    // After EINTR the descriptor is gone on Linux; do not retry.
    return result == 0 || errno == EINTR ? 0 : errno;
}

UniqueFd::UniqueFd(UniqueFd&& other) noexcept
    : m_fd(std::exchange(other.m_fd, -1)) {}

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
    if (this != &other) {
        if (m_fd >= 0) {
            ::close(m_fd);
        }
        m_fd = std::exchange(other.m_fd, -1);
    }
    return *this;
}

tl::expected<UniqueFd, int> open_fd(const std::string& path, int flags, unsigned mode) {
    for (;;) {
        const int fd = ::open(path.c_str(), flags | O_CLOEXEC, static_cast<mode_t>(mode));
        if (fd >= 0) {
            return UniqueFd(fd);
        }
        if (errno != EINTR) {
            return tl::make_unexpected(errno);
        }
    }
}

tl::expected<std::size_t, int> read_at(int fd, std::uint64_t offset, std::span<std::byte> out) {
    std::size_t done = 0;
    while (done < out.size()) {
        const ssize_t got =
            ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
        if (got < 0) {
            if (errno == EINTR) {
                continue;
            }
            return tl::make_unexpected(errno);
        }
        if (got == 0) {
            break;
        }
        done += static_cast<std::size_t>(got);
    }
    return done;
}

tl::expected<void, int> write_all(int fd, std::span<const std::span<const std::byte>> parts) {
    for (std::span<const std::byte> part : parts) {
        while (!part.empty()) {
            const ssize_t put = ::write(fd, part.data(), part.size());
            if (put < 0) {
                if (errno == EINTR) {
                    continue;
                }
                return tl::make_unexpected(errno);
            }
            part = part.subspan(static_cast<std::size_t>(put));
        }
    }
    return {};
}

tl::expected<std::vector<DirEntry>, int> list_dir(const std::string& path) {
    const auto fd = open_fd(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
    if (!fd) {
        return tl::make_unexpected(fd.error());
    }
    // fdopendir takes over the descriptor; duplicate it so UniqueFd and DIR
    // each close their own.
    const int dup_fd = ::fcntl(fd->get(), F_DUPFD_CLOEXEC, 0);
    if (dup_fd < 0) {
        return tl::make_unexpected(errno);
    }
    std::unique_ptr<DIR, DirCloser> dir(::fdopendir(dup_fd));
    if (!dir) {
        const int error = errno;
        ::close(dup_fd);
        return tl::make_unexpected(error);
    }
    std::vector<DirEntry> entries;
    for (;;) {
        errno = 0;
        const dirent* item = ::readdir(dir.get());
        if (item == nullptr) {
            if (errno != 0) {
                return tl::make_unexpected(errno);
            }
            break;
        }
        const std::string_view name(item->d_name);
        if (name == "." || name == "..") {
            continue;
        }
        DirEntry entry{std::string(name), item->d_type == DT_DIR, item->d_type == DT_REG};
        if (item->d_type == DT_UNKNOWN) {
            struct stat info {};
            if (::fstatat(fd->get(), item->d_name, &info, AT_SYMLINK_NOFOLLOW) == 0) {
                entry.is_dir = S_ISDIR(info.st_mode);
                entry.is_regular = S_ISREG(info.st_mode);
            }
        }
        entries.push_back(std::move(entry));
    }
    return entries;
}

tl::expected<void, int> make_dir(const std::string& path, unsigned mode) {
    if (::mkdir(path.c_str(), static_cast<mode_t>(mode)) == 0 || errno == EEXIST) {
        return {};
    }
    return tl::make_unexpected(errno);
}

std::string errno_text(int error) {
    return std::generic_category().message(error);
}

} // namespace pt2cache::daemon::store
