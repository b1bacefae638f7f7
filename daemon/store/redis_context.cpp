// SPDX-License-Identifier: MIT
#include "daemon/store/redis_context.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fcntl.h>
#include <optional>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <climits>
#include <fmt/format.h>
#include <hiredis/hiredis.h>

namespace pt2cache::daemon::store {

namespace {

// Arguments up to this size are copied into the command header; larger ones
// (values) are written from where they lie.
constexpr std::size_t k_inline_arg = 4096;
// Bulk replies at least this large are read straight into their own buffer
// instead of through hiredis's parser (which would grow its buffer and then
// copy the value once more).
constexpr std::size_t k_direct_bulk = 64 << 10;
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
    return Milliseconds(bytes * 1000 / k_min_bytes_per_second);
}

bool aborted(const std::atomic<bool>* abort) {
    return abort != nullptr && abort->load(std::memory_order_relaxed);
}

// hiredis builds replies through these callbacks, so that strings land in a
// Blob at once. They run inside C code: no exception may leave them (a null
// result is hiredis's out-of-memory error).
void* attach(const redisReadTask* task, std::unique_ptr<RedisReply> reply) {
    RedisReply* raw = reply.get();
    if (task->parent != nullptr) {
        auto* parent = static_cast<RedisReply*>(task->parent->obj);
        parent->elements[static_cast<std::size_t>(task->idx)] = std::move(reply);
    } else {
        reply.release();
    }
    return raw;
}

void* create_string(const redisReadTask* task, char* text, std::size_t length) noexcept {
    try {
        auto reply = std::make_unique<RedisReply>();
        reply->type = task->type == REDIS_REPLY_ERROR    ? RedisReply::Type::error
                      : task->type == REDIS_REPLY_STATUS ? RedisReply::Type::status
                                                         : RedisReply::Type::string;
        reply->data = Blob::copy_of(std::string_view(text, length));
        return attach(task, std::move(reply));
    } catch (...) {
        return nullptr;
    }
}

void* create_array(const redisReadTask* task, int elements) noexcept {
    try {
        auto reply = std::make_unique<RedisReply>();
        reply->type = RedisReply::Type::array;
        reply->elements.resize(static_cast<std::size_t>(std::max(elements, 0)));
        return attach(task, std::move(reply));
    } catch (...) {
        return nullptr;
    }
}

void* create_integer(const redisReadTask* task, long long value) noexcept {
    try {
        auto reply = std::make_unique<RedisReply>();
        reply->type = RedisReply::Type::integer;
        reply->integer = value;
        return attach(task, std::move(reply));
    } catch (...) {
        return nullptr;
    }
}

void* create_nil(const redisReadTask* task) noexcept {
    try {
        return attach(task, std::make_unique<RedisReply>());
    } catch (...) {
        return nullptr;
    }
}

void free_object(void* reply) noexcept {
    delete static_cast<RedisReply*>(reply);
}

redisReplyObjectFunctions k_reply_functions = {create_string, create_array, create_integer,
                                               create_nil, free_object};

// The length of a bulk reply whose header `$<n>\r\n` starts `bytes`, and the
// header's size; nullopt when `bytes` holds no complete bulk header.
std::optional<std::pair<std::int64_t, std::size_t>> bulk_header(std::string_view bytes) {
    if (bytes.empty() || bytes[0] != '$') {
        return std::nullopt;
    }
    const auto end = bytes.substr(0, 32).find("\r\n");
    if (end == std::string_view::npos) {
        return std::nullopt;
    }
    std::int64_t length = 0;
    const auto [ptr, ec] = std::from_chars(bytes.data() + 1, bytes.data() + end, length);
    if (ec != std::errc() || ptr != bytes.data() + end) {
        return std::nullopt;
    }
    return std::pair{length, end + 2};
}

} // namespace

std::string RedisEndpoint::describe() const {
    if (!unix_socket.empty()) {
        return "unix://" + unix_socket;
    }
    return db == 0 ? fmt::format("redis://{}:{}", host, port)
                   : fmt::format("redis://{}:{}/{}", host, port, db);
}

void RedisConnection::ContextDeleter::operator()(redisContext* context) const {
    redisFree(context);
}

void RedisConnection::ReaderDeleter::operator()(redisReader* reader) const {
    redisReaderFree(reader);
}

RedisConnection::RedisConnection(std::unique_ptr<redisContext, ContextDeleter> context,
                                 Milliseconds timeout)
    : m_context(std::move(context))
    , m_reader(redisReaderCreateWithFunctions(&k_reply_functions))
    , m_buffer(k_read_chunk)
    , m_op_timeout(timeout)
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
    redisContext* raw =
        endpoint.unix_socket.empty()
            ? redisConnectWithTimeout(endpoint.host.c_str(), endpoint.port, connect_tv)
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
    RedisConnection connection(std::move(context), endpoint.op_timeout);
    if (connection.m_reader == nullptr) {
        return tl::make_unexpected(RedisError{RedisErrorKind::connect, "out of memory"});
    }
    connection.m_connect_time =
        std::chrono::duration_cast<Milliseconds>(SteadyClock::now() - started);

    std::vector<RedisCommand> setup;
    const std::string db = std::to_string(endpoint.db);
    if (!endpoint.password.empty()) {
        setup.push_back(endpoint.username.empty()
                            ? RedisCommand{{"AUTH", endpoint.password}}
                            : RedisCommand{{"AUTH", endpoint.username, endpoint.password}});
    }
    if (endpoint.db != 0) {
        setup.push_back(RedisCommand{{"SELECT", db}});
    }
    // For operators (CLIENT LIST); an ACL user may not be allowed to: ignored.
    setup.push_back(RedisCommand{{"CLIENT", "SETNAME", "pt2cached"}});
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
                                                          SteadyClock::time_point& deadline,
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
    std::uint64_t total = 0;
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
            total += arg.size();
        }
    }
    deadline += transfer_allowance(total);

    std::vector<iovec> iov;
    iov.reserve(segments.size());
    for (const auto& segment : segments) {
        const char* data = segment.data != nullptr ? segment.data : head.data() + segment.offset;
        iov.push_back({const_cast<char*>(data), segment.size});
    }
    std::size_t index = 0;
    while (index < iov.size()) {
        msghdr message{};
        message.msg_iov = &iov[index];
        message.msg_iovlen = std::min<std::size_t>(iov.size() - index, IOV_MAX);
        // MSG_NOSIGNAL: a closed peer is an error here, never a SIGPIPE.
        const ssize_t sent = ::sendmsg(m_fd, &message, MSG_NOSIGNAL);
        if (sent < 0) {
            if (errno == EINTR) {
                continue;
            }
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                if (auto ready = wait(POLLOUT, deadline, abort); !ready) {
                    return ready;
                }
                continue;
            }
            return tl::make_unexpected(
                fail(RedisErrorKind::io, fmt::format("write: {}", std::strerror(errno))));
        }
        auto left = static_cast<std::size_t>(sent);
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

tl::expected<RedisReplyPtr, RedisError>
RedisConnection::read_reply(SteadyClock::time_point& deadline, const std::atomic<bool>* abort) {
    bool extended = false;
    for (;;) {
        void* parsed = nullptr;
        if (redisReaderGetReply(m_reader.get(), &parsed) != REDIS_OK) {
            return tl::make_unexpected(fail(RedisErrorKind::protocol, m_reader->errstr));
        }
        if (parsed != nullptr) {
            return RedisReplyPtr(static_cast<RedisReply*>(parsed));
        }
        const std::string_view pending(m_reader->buf + m_reader->pos,
                                       m_reader->len - m_reader->pos);
        if (!extended) {
            // A large bulk reply gets time for its transfer once its length is known.
            if (const auto header = bulk_header(pending); header && header->first > 0) {
                deadline += transfer_allowance(static_cast<std::uint64_t>(header->first));
                extended = true;
            }
        }
        const ssize_t got = ::read(m_fd, m_buffer.data(), m_buffer.size());
        if (got > 0) {
            const std::string_view chunk(m_buffer.data(), static_cast<std::size_t>(got));
            const auto header =
                pending.empty() ? bulk_header(chunk) : decltype(bulk_header(chunk)){};
            if (header && header->first >= static_cast<std::int64_t>(k_direct_bulk)) {
                return read_bulk(static_cast<std::size_t>(header->first),
                                 chunk.substr(header->second), deadline, abort);
            }
            if (redisReaderFeed(m_reader.get(), chunk.data(), chunk.size()) != REDIS_OK) {
                return tl::make_unexpected(fail(RedisErrorKind::protocol, m_reader->errstr));
            }
            continue;
        }
        if (auto again = after_short_read(got, deadline, abort); !again) {
            return tl::make_unexpected(std::move(again.error()));
        }
    }
}

tl::expected<void, RedisError> RedisConnection::after_short_read(ssize_t got,
                                                                 SteadyClock::time_point deadline,
                                                                 const std::atomic<bool>* abort) {
    if (got == 0) {
        return tl::make_unexpected(fail(RedisErrorKind::io, "Redis closed the connection"));
    }
    if (errno == EINTR) {
        return {};
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
        return tl::make_unexpected(
            fail(RedisErrorKind::io, fmt::format("read: {}", std::strerror(errno))));
    }
    return wait(POLLIN, deadline, abort);
}

tl::expected<RedisReplyPtr, RedisError>
RedisConnection::read_bulk(std::size_t length, std::string_view first,
                           SteadyClock::time_point& deadline, const std::atomic<bool>* abort) {
    deadline += transfer_allowance(length);
    std::vector<std::byte> value(length);
    std::size_t filled = std::min(first.size(), length);
    std::memcpy(value.data(), first.data(), filled);
    // What follows the value: its "\r\n", then possibly the next replies.
    std::string tail(first.substr(filled));
    while (filled < length || tail.size() < 2) {
        char* into =
            filled < length ? reinterpret_cast<char*>(value.data()) + filled : m_buffer.data();
        const std::size_t room = filled < length ? length - filled : m_buffer.size();
        const ssize_t got = ::read(m_fd, into, room);
        if (got > 0) {
            if (filled < length) {
                filled += static_cast<std::size_t>(got);
            } else {
                tail.append(m_buffer.data(), static_cast<std::size_t>(got));
            }
            continue;
        }
        if (auto again = after_short_read(got, deadline, abort); !again) {
            return tl::make_unexpected(std::move(again.error()));
        }
    }
    if (!tail.starts_with("\r\n")) {
        return tl::make_unexpected(
            fail(RedisErrorKind::protocol, "bulk reply not terminated by CRLF"));
    }
    if (tail.size() > 2 &&
        redisReaderFeed(m_reader.get(), tail.data() + 2, tail.size() - 2) != REDIS_OK) {
        return tl::make_unexpected(fail(RedisErrorKind::protocol, m_reader->errstr));
    }
    auto reply = std::make_unique<RedisReply>();
    reply->type = RedisReply::Type::string;
    reply->data = Blob::adopt(std::move(value));
    return reply;
}

tl::expected<std::vector<RedisReplyPtr>, RedisError>
RedisConnection::exchange(std::span<const RedisCommand> commands, SteadyClock::time_point deadline,
                          const std::atomic<bool>* abort) {
    if (!m_usable) {
        return tl::make_unexpected(RedisError{RedisErrorKind::io, "connection already failed"});
    }
    m_budget = std::chrono::ceil<Milliseconds>(deadline - SteadyClock::now());
    if (auto written = write_all(commands, deadline, abort); !written) {
        return tl::make_unexpected(std::move(written.error()));
    }
    std::vector<RedisReplyPtr> replies;
    replies.reserve(commands.size());
    while (replies.size() < commands.size()) {
        auto reply = read_reply(deadline, abort);
        if (!reply) {
            return tl::make_unexpected(std::move(reply.error()));
        }
        replies.push_back(std::move(*reply));
    }
    return replies;
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
