// SPDX-License-Identifier: MIT
#include "daemon/store/remote/redis_context.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "daemon/store/remote/host_resolver.hpp"
#include "daemon/store/remote/tls_transport.hpp"

#include <climits>
#include <fmt/format.h>
#include <hiredis/hiredis.h>

namespace pt2cache::daemon::store {

namespace {

// Arguments up to this size are copied into the command header; larger ones
// (values) are written from where they lie.
constexpr std::size_t k_inline_arg = 4096;
constexpr std::size_t k_read_chunk = 256 << 10;
// How often a wait looks at the abort flag.
constexpr Milliseconds k_abort_poll{50};

timeval to_timeval(Milliseconds ms) {
    timeval tv{};
    tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
    tv.tv_usec = static_cast<suseconds_t>(ms.count() % 1000 * 1000);
    return tv;
}

Milliseconds transfer_allowance(std::uint64_t bytes) {
    return Milliseconds(bytes / k_min_bytes_per_second * 1000 +
                        bytes % k_min_bytes_per_second * 1000 / k_min_bytes_per_second);
}

bool aborted(const std::atomic<bool>* abort) {
    return abort != nullptr && abort->load(std::memory_order_relaxed);
}

// The reader's value as a reply; string bytes move into a Blob, uncopied.
RedisReplyPtr to_reply(proto::RedisValue&& value) {
    auto reply = std::make_unique<RedisReply>();
    reply->type = value.type;
    reply->integer = value.integer;
    if (!value.data.empty()) {
        reply->data = Blob::adopt(std::move(value.data));
    }
    reply->elements.reserve(value.elements.size());
    for (auto& element : value.elements) {
        reply->elements.push_back(to_reply(std::move(element)));
    }
    return reply;
}

proto::RedisReplyLimits reply_limits(const RedisEndpoint& endpoint) {
    proto::RedisReplyLimits limits;
    limits.max_bulk = endpoint.max_value_size;
    return limits;
}

} // namespace

std::string RedisEndpoint::describe() const {
    if (!unix_socket.empty()) {
        return "unix://" + unix_socket;
    }
    const std::string_view scheme = tls ? "rediss" : "redis";
    return db == 0 ? fmt::format("{}://{}:{}", scheme, host, port)
                   : fmt::format("{}://{}:{}/{}", scheme, host, port, db);
}

void RedisConnection::ContextDeleter::operator()(redisContext* context) const {
    redisFree(context);
}

SteadyClock::time_point RedisConnection::Budget::deadline() const {
    return base + transfer_allowance(transferred);
}

RedisConnection::RedisConnection(std::unique_ptr<redisContext, ContextDeleter> context,
                                 const RedisEndpoint& endpoint)
    : m_context(std::move(context))
    , m_reader(reply_limits(endpoint))
    , m_limits(reply_limits(endpoint))
    , m_buffer(k_read_chunk)
    , m_op_timeout(endpoint.op_timeout)
    , m_fd(m_context->fd) {}

RedisConnection::~RedisConnection() = default;
RedisConnection::RedisConnection(RedisConnection&&) noexcept = default;
RedisConnection& RedisConnection::operator=(RedisConnection&&) noexcept = default;

tl::expected<RedisConnection, RedisError> RedisConnection::open(const RedisEndpoint& endpoint) {
    return open(endpoint, SteadyClock::now() + endpoint.op_timeout);
}

tl::expected<RedisConnection, RedisError> RedisConnection::open(const RedisEndpoint& endpoint,
                                                                SteadyClock::time_point deadline,
                                                                const std::atomic<bool>* abort) {
    const auto started = SteadyClock::now();
    const timeval connect_tv = to_timeval(endpoint.connect_timeout);
    // hiredis would resolve a name with a getaddrinfo that nothing bounds:
    // it gets a numeric address instead (host_resolver.hpp). TLS still
    // checks the certificate against the name.
    std::string address = endpoint.host;
    if (endpoint.unix_socket.empty() && !address.empty()) {
        auto resolved = HostResolver::shared().resolve(
            endpoint.host, std::min(deadline, started + endpoint.connect_timeout), abort);
        if (aborted(abort)) {
            return tl::make_unexpected(RedisError{RedisErrorKind::aborted, "aborted"});
        }
        if (!resolved) {
            return tl::make_unexpected(RedisError{
                RedisErrorKind::connect,
                fmt::format("cannot connect to {}: {}", endpoint.describe(), resolved.error())});
        }
        address = std::move(*resolved);
    }
    redisContext* raw = endpoint.unix_socket.empty()
                            ? redisConnectWithTimeout(address.c_str(), endpoint.port, connect_tv)
                            : redisConnectUnixWithTimeout(endpoint.unix_socket.c_str(), connect_tv);
    if (raw == nullptr) {
        return tl::make_unexpected(RedisError{RedisErrorKind::connect, "out of memory"});
    }
    std::unique_ptr<redisContext, ContextDeleter> context(raw);
    if (raw->err != 0) {
        return tl::make_unexpected(
            RedisError{RedisErrorKind::connect,
                       fmt::format("cannot connect to {}: {}", endpoint.describe(), raw->errstr)});
    }
    // The socket timeouts are a backstop only: every wait below is a poll()
    // bounded by the operation's deadline, on a non-blocking socket.
    redisSetTimeout(raw, to_timeval(endpoint.op_timeout));
    if (endpoint.unix_socket.empty()) {
        redisEnableKeepAlive(raw);
    }
    const int flags = ::fcntl(raw->fd, F_GETFL);
    if (flags < 0 || ::fcntl(raw->fd, F_SETFL, flags | O_NONBLOCK) < 0) {
        return tl::make_unexpected(RedisError{
            RedisErrorKind::connect, fmt::format("fcntl(O_NONBLOCK): {}", std::strerror(errno))});
    }
    RedisConnection connection(std::move(context), endpoint);
    connection.m_connect_time =
        std::chrono::duration_cast<Milliseconds>(SteadyClock::now() - started);
    if (endpoint.tls) {
        // The handshake shares the setup's deadline.
        auto secured = connection.start_tls(endpoint, deadline + connection.m_connect_time, abort);
        if (!secured) {
            auto error = std::move(secured.error());
            if (error.kind != RedisErrorKind::aborted) {
                error.message = fmt::format("{}: {}", endpoint.describe(), error.message);
            }
            return tl::make_unexpected(std::move(error));
        }
    }

    // Each answers +OK or an error; any other reply is a peer out of step.
    const std::vector<RedisReply::Type> status{RedisReply::Type::status};
    std::vector<RedisCommand> setup;
    const std::string db = std::to_string(endpoint.db);
    if (!endpoint.password.empty()) {
        setup.push_back(endpoint.username.empty()
                            ? RedisCommand{{"AUTH", endpoint.password}, status}
                            : RedisCommand{{"AUTH", endpoint.username, endpoint.password}, status});
    }
    if (endpoint.db != 0) {
        setup.push_back(RedisCommand{{"SELECT", db}, status});
    }
    // For operators (CLIENT LIST); an ACL user may not be allowed to: ignored.
    setup.push_back(RedisCommand{{"CLIENT", "SETNAME", "pt2cached"}, status});
    auto replies = connection.exchange(setup, deadline + connection.m_connect_time, abort);
    if (!replies) {
        auto error = std::move(replies.error());
        if (error.kind != RedisErrorKind::aborted) {
            error.message = fmt::format("{}: {}", endpoint.describe(), error.message);
        }
        return tl::make_unexpected(std::move(error));
    }
    for (std::size_t i = 0; i + 1 < setup.size(); ++i) {
        const auto& reply = *(*replies)[i];
        if (reply.type == RedisReply::Type::error) {
            return tl::make_unexpected(RedisError{
                RedisErrorKind::connect, fmt::format("{}: {} refused: {}", endpoint.describe(),
                                                     setup[i].args[0], reply.text())});
        }
    }
    return connection;
}

tl::expected<void, RedisError> RedisConnection::start_tls(const RedisEndpoint& endpoint,
                                                          SteadyClock::time_point deadline,
                                                          const std::atomic<bool>* abort) {
    auto session = TlsSession::make(*endpoint.tls, m_fd, endpoint.host);
    if (!session) {
        return tl::make_unexpected(fail(RedisErrorKind::connect, std::move(session.error())));
    }
    m_tls = std::move(*session);
    m_budget = std::chrono::ceil<Milliseconds>(deadline - SteadyClock::now());
    for (;;) {
        auto step = m_tls->handshake();
        switch (step.status) {
        case TlsIo::Status::done:
            return {};
        case TlsIo::Status::want_read:
        case TlsIo::Status::want_write: {
            const short events = step.status == TlsIo::Status::want_read ? POLLIN : POLLOUT;
            if (auto ready = wait(events, deadline, abort); !ready) {
                auto error = std::move(ready.error());
                error.message = "TLS handshake: " + error.message;
                return tl::make_unexpected(std::move(error));
            }
            break;
        }
        case TlsIo::Status::closed:
        case TlsIo::Status::failed:
            return tl::make_unexpected(fail(RedisErrorKind::connect, std::move(step.error)));
        }
    }
}

RedisError RedisConnection::fail(RedisErrorKind kind, std::string message) {
    m_usable = false;
    return RedisError{kind, std::move(message)};
}

tl::expected<void, RedisError> RedisConnection::wait(short events, SteadyClock::time_point deadline,
                                                     const std::atomic<bool>* abort) {
    for (;;) {
        if (aborted(abort)) {
            return tl::make_unexpected(fail(RedisErrorKind::aborted, "aborted"));
        }
        const auto now = SteadyClock::now();
        if (now >= deadline) {
            return tl::make_unexpected(fail(
                RedisErrorKind::timeout, fmt::format("no answer within {} ms", m_budget.count())));
        }
        auto slice = std::chrono::ceil<Milliseconds>(deadline - now);
        if (abort != nullptr) {
            slice = std::min(slice, k_abort_poll);
        }
        pollfd pfd{m_fd, events, 0};
        const int ready =
            ::poll(&pfd, 1, static_cast<int>(std::max<Milliseconds::rep>(1, slice.count())));
        if (ready > 0) {
            return {}; // readiness or an error: the next read or write tells which
        }
        if (ready < 0 && errno != EINTR) {
            return tl::make_unexpected(
                fail(RedisErrorKind::io, fmt::format("poll: {}", std::strerror(errno))));
        }
    }
}

tl::expected<void, RedisError> RedisConnection::write_all(std::span<const RedisCommand> commands,
                                                          Budget& budget,
                                                          const std::atomic<bool>* abort) {
    // Headers and small arguments go into `head`; segments without data
    // point into it (by offset, as `head` may still grow).
    struct Segment {
        const char* data; // null: `head` from `offset`
        std::size_t offset;
        std::size_t size;
    };
    std::string head;
    std::vector<Segment> segments;
    const auto add_text = [&](std::string_view text) {
        if (!segments.empty() && segments.back().data == nullptr) {
            segments.back().size += text.size();
        } else {
            segments.push_back({nullptr, head.size(), text.size()});
        }
        head += text;
    };
    for (const auto& command : commands) {
        add_text(fmt::format("*{}\r\n", command.args.size()));
        for (const auto arg : command.args) {
            add_text(fmt::format("${}\r\n", arg.size()));
            if (arg.size() <= k_inline_arg) {
                add_text(arg);
            } else {
                segments.push_back({arg.data(), 0, arg.size()});
            }
            add_text("\r\n");
        }
    }

    std::vector<iovec> iov;
    iov.reserve(segments.size());
    for (const auto& segment : segments) {
        const char* data = segment.data != nullptr ? segment.data : head.data() + segment.offset;
        iov.push_back({const_cast<char*>(data), segment.size});
    }
    std::size_t index = 0;
    while (index < iov.size()) {
        auto sent = send_some(std::span(iov).subspan(index), budget, abort);
        if (!sent) {
            return tl::make_unexpected(std::move(sent.error()));
        }
        // Time for large transfers, as their bytes leave.
        budget.transferred += *sent;
        auto left = *sent;
        while (left > 0) {
            if (left >= iov[index].iov_len) {
                left -= iov[index].iov_len;
                ++index;
            } else {
                iov[index].iov_base = static_cast<char*>(iov[index].iov_base) + left;
                iov[index].iov_len -= left;
                left = 0;
            }
        }
    }
    return {};
}

tl::expected<std::size_t, RedisError> RedisConnection::send_some(std::span<iovec> iov,
                                                                 const Budget& budget,
                                                                 const std::atomic<bool>* abort) {
    for (;;) {
        short events = POLLOUT;
        if (m_tls) {
            // One segment at a time (a TLS record each, up to 16 KiB).
            auto io = m_tls->write(std::as_bytes(
                std::span(static_cast<const char*>(iov.front().iov_base), iov.front().iov_len)));
            if (io.status == TlsIo::Status::done) {
                return io.bytes;
            }
            if (io.status == TlsIo::Status::closed) {
                return tl::make_unexpected(fail(RedisErrorKind::io, "Redis closed the connection"));
            }
            if (io.status == TlsIo::Status::failed) {
                return tl::make_unexpected(fail(RedisErrorKind::io, std::move(io.error)));
            }
            events = io.status == TlsIo::Status::want_read ? POLLIN : POLLOUT;
        } else {
            msghdr message{};
            message.msg_iov = iov.data();
            message.msg_iovlen = std::min<std::size_t>(iov.size(), IOV_MAX);
            // MSG_NOSIGNAL: a closed peer is an error here, never a SIGPIPE.
            const ssize_t sent = ::sendmsg(m_fd, &message, MSG_NOSIGNAL);
            if (sent >= 0) {
                return static_cast<std::size_t>(sent);
            }
            if (errno == EINTR) {
                continue;
            }
            if (errno != EAGAIN && errno != EWOULDBLOCK) {
                return tl::make_unexpected(
                    fail(RedisErrorKind::io, fmt::format("write: {}", std::strerror(errno))));
            }
        }
        if (auto ready = wait(events, budget.deadline(), abort); !ready) {
            return tl::make_unexpected(std::move(ready.error()));
        }
    }
}

tl::expected<RedisReplyPtr, RedisError>
RedisConnection::read_reply(const RedisCommand& command, Budget& budget,
                            const std::atomic<bool>* abort) {
    for (;;) {
        if (auto value = m_reader.next()) {
            auto reply = to_reply(std::move(*value));
            const auto& accepts = command.accepts;
            if (reply->type != RedisReply::Type::error && !accepts.empty() &&
                std::find(accepts.begin(), accepts.end(), reply->type) == accepts.end()) {
                return tl::make_unexpected(
                    fail(RedisErrorKind::protocol,
                         fmt::format("{}: unexpected {} reply",
                                     command.args.empty() ? "" : command.args[0],
                                     proto::redis_type_name(reply->type))));
            }
            return reply;
        }
        if (auto read = read_some(budget, abort); !read) {
            return tl::make_unexpected(std::move(read.error()));
        }
    }
}

ssize_t RedisConnection::receive(std::span<std::byte> room, short& events) {
    events = POLLIN;
    if (!m_tls) {
        if (room.empty()) {
            return ::read(m_fd, m_buffer.data(), m_buffer.size());
        }
        std::array<iovec, 2> iov = {
            iovec{room.data(), room.size()},
            iovec{m_buffer.data(), m_buffer.size()},
        };
        return ::readv(m_fd, iov.data(), 2);
    }
    // Bytes OpenSSL holds already decrypted come first: the socket is polled
    // only after SSL_read asked for more (it may also ask to write first).
    auto io = m_tls->read(room.empty() ? std::as_writable_bytes(std::span(m_buffer)) : room);
    switch (io.status) {
    case TlsIo::Status::done:
        return static_cast<ssize_t>(io.bytes);
    case TlsIo::Status::want_read:
    case TlsIo::Status::want_write:
        events = io.status == TlsIo::Status::want_read ? POLLIN : POLLOUT;
        errno = EAGAIN;
        return -1;
    case TlsIo::Status::closed:
        return 0;
    case TlsIo::Status::failed:
        break;
    }
    m_tls_error = std::move(io.error);
    errno = EPROTO;
    return -1;
}

tl::expected<void, RedisError> RedisConnection::read_some(Budget& budget,
                                                          const std::atomic<bool>* abort) {
    for (;;) {
        // Inside a bulk value: its bytes go straight into its buffer (grown
        // by the reader in bounded steps), what follows into m_buffer.
        const auto room = m_reader.bulk_room(k_read_chunk);
        short events = POLLIN;
        const ssize_t got = receive(room, events);
        if (got > 0) {
            auto left = static_cast<std::size_t>(got);
            budget.transferred += left;
            if (!room.empty()) {
                const auto direct = std::min(left, room.size());
                m_reader.commit(direct);
                left -= direct;
            }
            if (left > 0 && !m_reader.feed(std::as_bytes(std::span(m_buffer.data(), left)))) {
                return tl::make_unexpected(fail(RedisErrorKind::protocol, *m_reader.error()));
            }
            return {};
        }
        if (!room.empty()) {
            const int saved = errno;
            m_reader.commit(0); // gives the room back
            errno = saved;
        }
        if (auto again = after_short_read(got, events, budget, abort); !again) {
            return again;
        }
    }
}

tl::expected<void, RedisError> RedisConnection::after_short_read(ssize_t got, short events,
                                                                 const Budget& budget,
                                                                 const std::atomic<bool>* abort) {
    if (got == 0) {
        if (!m_reader.idle()) {
            return tl::make_unexpected(
                fail(RedisErrorKind::protocol, "Redis closed the connection mid-reply"));
        }
        return tl::make_unexpected(fail(RedisErrorKind::io, "Redis closed the connection"));
    }
    if (errno == EINTR) {
        return {};
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
        return tl::make_unexpected(
            fail(RedisErrorKind::io, !m_tls_error.empty()
                                         ? std::move(m_tls_error)
                                         : fmt::format("read: {}", std::strerror(errno))));
    }
    return wait(events, budget.deadline(), abort);
}

tl::expected<std::vector<RedisReplyPtr>, RedisError>
RedisConnection::exchange(std::span<const RedisCommand> commands, SteadyClock::time_point deadline,
                          const std::atomic<bool>* abort) {
    if (!m_usable) {
        return tl::make_unexpected(RedisError{RedisErrorKind::io, "connection already failed"});
    }
    if (auto quiet = check_quiet(); !quiet) {
        return tl::make_unexpected(std::move(quiet.error()));
    }
    m_budget = std::chrono::ceil<Milliseconds>(deadline - SteadyClock::now());
    Budget budget{deadline};
    m_reader.set_limits(limits_for(commands));
    if (auto written = write_all(commands, budget, abort); !written) {
        return tl::make_unexpected(std::move(written.error()));
    }
    std::vector<RedisReplyPtr> replies;
    replies.reserve(commands.size());
    for (const auto& command : commands) {
        auto reply = read_reply(command, budget, abort);
        if (!reply) {
            return tl::make_unexpected(std::move(reply.error()));
        }
        replies.push_back(std::move(*reply));
    }
    // RESP2 has no unsolicited replies: more bytes are a peer out of step.
    if (!m_reader.idle()) {
        return tl::make_unexpected(
            fail(RedisErrorKind::protocol, "unexpected bytes after the last reply"));
    }
    return replies;
}

proto::RedisReplyLimits RedisConnection::limits_for(std::span<const RedisCommand> commands) const {
    // The reader is idle between exchanges, and the replies of one write may
    // arrive together: each limit is the largest any of these commands
    // allows.
    proto::RedisReplyLimits limits = m_limits;
    limits.max_bulk = 0;
    limits.max_reply_extra = 0;
    for (const auto& command : commands) {
        limits.max_elements = std::max(limits.max_elements, command.max_elements);
        const std::uint64_t bulk = command.max_bulk != 0 ? command.max_bulk : m_limits.max_bulk;
        const std::uint64_t whole = command.max_reply_bytes != 0
                                        ? command.max_reply_bytes
                                        : m_limits.max_bulk + m_limits.max_reply_extra;
        limits.max_bulk = std::max(limits.max_bulk, bulk);
        limits.max_reply_extra = std::max(limits.max_reply_extra, whole - std::min(whole, bulk));
    }
    return limits;
}

tl::expected<void, RedisError> RedisConnection::check_quiet() {
    // RESP2 has no unsolicited replies: a byte waiting before a request is
    // sent is a reply to nothing (a peer out of step, which would answer this
    // request with another's value), and an end of stream a peer gone.
    short events = POLLIN;
    const ssize_t got = receive({}, events);
    if (got > 0) {
        return tl::make_unexpected(
            fail(RedisErrorKind::protocol, "unexpected bytes from Redis before a request"));
    }
    if (got == 0) {
        return tl::make_unexpected(fail(RedisErrorKind::io, "Redis closed the connection"));
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
        return {};
    }
    return tl::make_unexpected(fail(
        RedisErrorKind::io, !m_tls_error.empty() ? std::move(m_tls_error)
                                                 : fmt::format("read: {}", std::strerror(errno))));
}

tl::expected<RedisReplyPtr, RedisError> RedisConnection::command(const RedisCommand& command,
                                                                 const std::atomic<bool>* abort) {
    auto replies = exchange(std::span(&command, 1), SteadyClock::now() + m_op_timeout, abort);
    if (!replies) {
        return tl::make_unexpected(std::move(replies.error()));
    }
    return std::move(replies->front());
}

} // namespace pt2cache::daemon::store
