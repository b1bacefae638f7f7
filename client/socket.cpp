// SPDX-License-Identifier: MIT
#include "client/socket.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <thread>
#include <unistd.h>

#include <fmt/format.h>

namespace pt2cache::client::socket {

namespace {

tl::unexpected<SocketError> failed(Failure failure, std::string message) {
    return tl::unexpected(SocketError{failure, std::move(message)});
}

std::string errno_text(int error) {
    return std::strerror(error);
}

// Waits until `fd` is ready for `events` (or has an error or hang-up, which
// the next call on it reports). False when the deadline passed first.
bool wait_for(int fd, short events, Deadline deadline) {
    for (;;) {
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) {
            return false;
        }
        pollfd entry{fd, events, 0};
        const int timeout_ms = static_cast<int>(std::min<std::int64_t>(left.count(), 1 << 30));
        const int rc = ::poll(&entry, 1, timeout_ms);
        if (rc > 0) {
            return true;
        }
        if (rc < 0 && errno != EINTR) {
            return true; // let the caller's next call report the problem
        }
    }
}

tl::expected<void, SocketError> check_peer(int fd, const std::string& path) {
    ucred peer{};
    socklen_t size = sizeof peer;
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &size) != 0) {
        return failed(Failure::unreachable,
                      fmt::format("cannot identify the owner of {}: {}", path, errno_text(errno)));
    }
    if (peer.uid != ::geteuid()) {
        return failed(Failure::unreachable,
                      fmt::format("refusing the daemon at {}: it runs as uid {}, not uid {}", path,
                                  peer.uid, ::geteuid()));
    }
    return {};
}

} // namespace

tl::expected<int, SocketError> connect_unix(const std::string& path, Deadline deadline) {
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    if (path.empty() || path.size() >= sizeof address.sun_path) {
        return failed(Failure::unreachable, fmt::format("invalid socket path \"{}\": 1 to {} bytes",
                                                        path, sizeof address.sun_path - 1));
    }
    std::memcpy(address.sun_path, path.data(), path.size());

    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return failed(Failure::unreachable,
                      fmt::format("cannot create a socket: {}", errno_text(errno)));
    }
    if (fd <= STDERR_FILENO) {
        // Never a standard stream's number: a process that closed its
        // stdout would print into the connection, and a value it printed
        // would run as the daemon's next request (overwriting another key).
        const int moved = ::fcntl(fd, F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
        const int error = errno;
        ::close(fd);
        if (moved < 0) {
            return failed(Failure::unreachable,
                          fmt::format("cannot create a socket: {}", errno_text(error)));
        }
        fd = moved;
    }
    auto give_up = [fd](Failure failure, std::string message) {
        ::close(fd);
        return failed(failure, std::move(message));
    };
    for (;;) {
        if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0) {
            break;
        }
        const int error = errno;
        if (error == EINTR) {
            continue;
        }
        if (error == EAGAIN) {
            // A Unix socket whose listen backlog is full: connect() cannot be
            // polled, so try again shortly.
            if (std::chrono::steady_clock::now() >= deadline) {
                return give_up(Failure::timeout,
                               fmt::format("timed out connecting to pt2cached at {}", path));
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
            continue;
        }
        if (error == EINPROGRESS) {
            if (!wait_for(fd, POLLOUT, deadline)) {
                return give_up(Failure::timeout,
                               fmt::format("timed out connecting to pt2cached at {}", path));
            }
            int status = 0;
            socklen_t size = sizeof status;
            if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &status, &size) != 0) {
                status = errno;
            }
            if (status == 0) {
                break;
            }
            return give_up(
                Failure::unreachable,
                fmt::format("cannot connect to pt2cached at {}: {}", path, errno_text(status)));
        }
        return give_up(Failure::unreachable, fmt::format("cannot connect to pt2cached at {}: {}",
                                                         path, errno_text(error)));
    }
    if (auto ok = check_peer(fd, path); !ok) {
        return give_up(ok.error().failure, std::move(ok.error().message));
    }
    return fd;
}

tl::expected<void, SocketError> send_all(int fd, std::span<const std::byte> head,
                                         std::span<const std::byte> tail, Deadline deadline) {
    iovec parts[2] = {
        {const_cast<std::byte*>(head.data()), head.size()},
        {const_cast<std::byte*>(tail.data()), tail.size()},
    };
    iovec* next = parts;
    std::size_t count = 2;
    auto skip_empty = [&] {
        while (count > 0 && next->iov_len == 0) {
            ++next;
            --count;
        }
    };
    skip_empty();
    while (count > 0) {
        msghdr message{};
        message.msg_iov = next;
        message.msg_iovlen = count;
        const ssize_t sent = ::sendmsg(fd, &message, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (sent < 0) {
            const int error = errno;
            if (error == EINTR) {
                continue;
            }
            if (error == EAGAIN || error == EWOULDBLOCK) {
                if (!wait_for(fd, POLLOUT, deadline)) {
                    return failed(Failure::timeout, "timed out sending to pt2cached");
                }
                continue;
            }
            return failed(Failure::unreachable,
                          fmt::format("lost the connection to pt2cached: {}", errno_text(error)));
        }
        auto done = static_cast<std::size_t>(sent);
        while (count > 0 && done >= next->iov_len) {
            done -= next->iov_len;
            ++next;
            --count;
        }
        if (count > 0) {
            next->iov_base = static_cast<std::byte*>(next->iov_base) + done;
            next->iov_len -= done;
        }
        skip_empty();
    }
    return {};
}

tl::expected<std::size_t, SocketError> receive_some(int fd, std::span<std::byte> out,
                                                    Deadline deadline) {
    for (;;) {
        const ssize_t got = ::recv(fd, out.data(), out.size(), MSG_DONTWAIT);
        if (got > 0) {
            return static_cast<std::size_t>(got);
        }
        if (got == 0) {
            return failed(Failure::unreachable, "pt2cached closed the connection");
        }
        const int error = errno;
        if (error == EINTR) {
            continue;
        }
        if (error == EAGAIN || error == EWOULDBLOCK) {
            if (!wait_for(fd, POLLIN, deadline)) {
                return failed(Failure::timeout, "timed out waiting for pt2cached to answer");
            }
            continue;
        }
        return failed(Failure::unreachable,
                      fmt::format("lost the connection to pt2cached: {}", errno_text(error)));
    }
}

bool peer_closed(int fd) {
    pollfd entry{fd, POLLIN, 0};
    int rc = 0;
    do {
        rc = ::poll(&entry, 1, 0);
    } while (rc < 0 && errno == EINTR);
    return rc != 0;
}

} // namespace pt2cache::client::socket
