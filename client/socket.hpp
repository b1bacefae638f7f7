// SPDX-License-Identifier: MIT
//
// The few POSIX socket calls the client needs, with deadlines: connect to a
// Unix socket, and send or receive some bytes on a non-blocking one. Nothing
// here knows the protocol. Internal to libpt2cache; not installed.
#pragma once

#include <chrono>
#include <cstddef>
#include <span>
#include <string>

#include <tl/expected.hpp>

namespace pt2cache::client::socket {

using Deadline = std::chrono::steady_clock::time_point;

enum class Failure {
    unreachable, // refused, absent, reset, closed by the peer
    timeout,     // the deadline passed
};

struct SocketError {
    Failure failure;
    std::string message;
};

// Connects a non-blocking, close-on-exec stream socket to the Unix socket at
// `path`, and checks that the peer runs as this process's effective uid (a
// cache served by another user could inject code into compiled artifacts).
tl::expected<int, SocketError> connect_unix(const std::string& path, Deadline deadline);

// Sends all of `head` then all of `tail` with as few system calls as the
// kernel allows, without copying them and without raising SIGPIPE.
tl::expected<void, SocketError> send_all(int fd, std::span<const std::byte> head,
                                         std::span<const std::byte> tail, Deadline deadline);

// Receives at least one and at most `out.size()` bytes. End of stream is a
// Failure::unreachable.
tl::expected<std::size_t, SocketError> receive_some(int fd, std::span<std::byte> out,
                                                    Deadline deadline);

// True when `fd`, on which no bytes are expected, is readable or hung up now:
// the peer closed it (or sent what it should not have). Does not block.
bool peer_closed(int fd);

} // namespace pt2cache::client::socket
