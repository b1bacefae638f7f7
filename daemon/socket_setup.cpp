#include "daemon/socket_setup.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <fmt/format.h>
#include <systemd/sd-daemon.h>

namespace pt2cache::daemon {

namespace fs = std::filesystem;

namespace {

std::string errno_text() {
    return std::strerror(errno);
}

} // namespace

InstanceLock::InstanceLock(const fs::path& lock_path, const std::string& held, bool optional) {
    m_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY, 0600);
    if (m_fd < 0) {
        if (optional) {
            return;
        }
        throw Fatal(fmt::format("cannot open lock file {}: {}", lock_path.string(), errno_text()));
    }
    if (::flock(m_fd, LOCK_EX | LOCK_NB) != 0) {
        char pid[32] = {};
        const auto n = ::pread(m_fd, pid, sizeof pid - 1, 0);
        const std::string who = n > 0 ? fmt::format(" (pid {})", std::string(pid, n)) : "";
        ::close(m_fd);
        m_fd = -1;
        throw Fatal(held + who);
    }
    // The pid is for the message of a refused start: a full filesystem that
    // cannot take it leaves the lock held all the same.
    const auto pid = std::to_string(::getpid());
    if (::ftruncate(m_fd, 0) == 0) {
        (void)!::pwrite(m_fd, pid.data(), pid.size(), 0);
    }
}

InstanceLock::~InstanceLock() {
    if (m_fd >= 0) {
        ::close(m_fd);
    }
}

void prepare_socket_directory(const fs::path& directory) {
    struct stat st {};
    if (::lstat(directory.c_str(), &st) != 0) {
        if (errno != ENOENT) {
            throw Fatal(fmt::format("cannot inspect socket directory {}: {}", directory.string(),
                                    errno_text()));
        }
        std::error_code ec;
        fs::create_directories(directory.parent_path(), ec);
        if (::mkdir(directory.c_str(), 0700) != 0 && errno != EEXIST) {
            throw Fatal(fmt::format("cannot create socket directory {}: {}", directory.string(),
                                    errno_text()));
        }
        if (::lstat(directory.c_str(), &st) != 0) {
            throw Fatal(fmt::format("cannot inspect socket directory {}: {}", directory.string(),
                                    errno_text()));
        }
    }
    if (S_ISLNK(st.st_mode)) {
        throw Fatal(
            fmt::format("refusing socket directory {}: it is a symbolic link", directory.string()));
    }
    if (!S_ISDIR(st.st_mode)) {
        throw Fatal(
            fmt::format("refusing socket directory {}: it is not a directory", directory.string()));
    }
    if (st.st_uid != ::geteuid()) {
        throw Fatal(fmt::format("refusing socket directory {}: owned by uid {}, not by uid {}",
                                directory.string(), st.st_uid, ::geteuid()));
    }
    if ((st.st_mode & 077) != 0) {
        throw Fatal(fmt::format("refusing socket directory {}: mode {:04o} lets group or others "
                                "in (expected 0700; run chmod 700 {})",
                                directory.string(), st.st_mode & 07777, directory.string()));
    }
}

std::optional<int> inherited_listener() {
    const int count = ::sd_listen_fds(1);
    if (count <= 0) {
        return std::nullopt;
    }
    if (count != 1) {
        throw Fatal(fmt::format("systemd passed {} sockets; pt2cached expects exactly one", count));
    }
    const int fd = SD_LISTEN_FDS_START;
    if (::sd_is_socket_unix(fd, SOCK_STREAM, 1, nullptr, 0) <= 0) {
        throw Fatal("systemd passed a socket that is not a listening Unix stream socket");
    }
    return fd;
}

int bind_listener(const fs::path& path) {
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    if (path.native().size() >= sizeof address.sun_path) {
        throw Fatal(fmt::format("socket path {} is longer than the {} bytes a Unix socket allows",
                                path.string(), sizeof address.sun_path - 1));
    }
    std::memcpy(address.sun_path, path.c_str(), path.native().size());

    // The instance lock is held, so a socket file here is a crashed daemon's.
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0) {
        if (!S_ISSOCK(st.st_mode)) {
            throw Fatal(fmt::format("refusing to replace {}: it is not a socket", path.string()));
        }
        ::unlink(path.c_str());
    }

    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        throw Fatal(fmt::format("socket(): {}", errno_text()));
    }
    const mode_t old_mask = ::umask(077);
    const int bound = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
    const int saved = errno;
    ::umask(old_mask);
    if (bound != 0) {
        ::close(fd);
        errno = saved;
        throw Fatal(fmt::format("cannot bind {}: {}", path.string(), errno_text()));
    }
    ::chmod(path.c_str(), 0600);
    if (::listen(fd, SOMAXCONN) != 0) {
        ::close(fd);
        throw Fatal(fmt::format("cannot listen on {}: {}", path.string(), errno_text()));
    }
    return fd;
}

unsigned fit_connection_limit(unsigned wanted, std::string& warning) {
    // Descriptors the daemon needs besides its clients: the listener, disk
    // entries open at once (one per worker), Redis connections, logs.
    constexpr rlim_t k_reserve = 128;
    rlimit limit{};
    if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) {
        return wanted;
    }
    if (limit.rlim_cur < limit.rlim_max) {
        rlimit raised = limit;
        raised.rlim_cur = limit.rlim_max;
        if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) {
            limit = raised;
        }
    }
    if (limit.rlim_cur == RLIM_INFINITY || limit.rlim_cur >= wanted + k_reserve) {
        return wanted;
    }
    // What the daemon itself holds open (listener, locks, small.mdb, log,
    // eventfds, a file per writer): below twice that, disk writes would fail
    // for want of a descriptor while puts are acknowledged.
    constexpr rlim_t k_own = 16;
    if (limit.rlim_cur < 2 * k_own) {
        throw Fatal(fmt::format("the descriptor limit ({}, ulimit -n) is too low: pt2cached needs "
                                "at least {}",
                                limit.rlim_cur, 2 * k_own));
    }
    const auto fits = static_cast<unsigned>(
        limit.rlim_cur > 2 * k_reserve ? limit.rlim_cur - k_reserve : (limit.rlim_cur - k_own) / 2);
    warning = fmt::format("daemon.max_connections = {} does not fit the descriptor limit ({}): "
                          "serving at most {} connections",
                          wanted, limit.rlim_cur, fits);
    return fits;
}

} // namespace pt2cache::daemon
