// SPDX-License-Identifier: MIT
// The one wrapper of hiredis (0.14, blocking, RESP2, no TLS). hiredis only
// opens the TCP connection (with a connect timeout); TLS, when the endpoint
// asks for it, runs over that socket (tls_transport.hpp); replies are parsed by
// proto::RedisReplyReader, which treats them as untrusted input (bounded
// lengths and counts, memory committed as bytes arrive; docs/remote.md). This
// file does the socket I/O itself, non-blocking with poll(), so that every
// exchange has one overall deadline: a per-syscall SO_RCVTIMEO would let a
// Redis that trickles bytes hold a worker far longer than the operation
// timeout.
//
// Never call any of this on an Asio thread: it blocks (up to its deadline).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <sys/uio.h>
#include <vector>

#include "daemon/store/blob.hpp"
#include "proto/redis_reply.hpp"

#include <tl/expected.hpp>

struct redisContext;

namespace pt2cache::daemon::store {

class TlsContext;
class TlsSession;

using SteadyClock = std::chrono::steady_clock;
using Milliseconds = std::chrono::milliseconds;

// Where and how to connect. Either `unix_socket` or `host`/`port`.
struct RedisEndpoint {
    std::string unix_socket;
    std::string host = "localhost";
    std::uint16_t port = 6379;
    std::string username; // ACL user; empty: AUTH with the password only
    std::string password; // empty: no AUTH
    unsigned db = 0;      // SELECT when not 0
    Milliseconds connect_timeout{500};
    Milliseconds op_timeout{1000};
    // The longest bulk reply accepted (remote.max_value_size); a longer one
    // is a protocol error.
    std::uint64_t max_value_size = 512ULL << 20;
    // TLS (TCP only): the shared SSL_CTX and its policy; null: plain TCP. A
    // copy of the endpoint for another node (cluster) keeps it: the server
    // name verified is then that node's host unless the context names one.
    std::shared_ptr<const TlsContext> tls;

    // "unix:///path", "redis://host:port/db" or "rediss://…", with no credentials.
    std::string describe() const;
};

enum class RedisErrorKind {
    connect,   // refused, unreachable, or setup (AUTH, SELECT) failed
    io,        // the connection broke (reset, closed by the server)
    timeout,   // the deadline passed
    protocol,  // the server sent something that is not RESP2, a reply of a type the command
               // never gets, more bytes than asked for, or closed the connection mid-reply
    reply,     // the server answered with an error (-ERR, -NOPERM, -OOM ...)
    aborted,   // the caller's abort flag was raised
    exhausted, // no pooled connection became free in time
    suspended, // not sent: the node's circuit breaker is open (answered locally)
};

struct RedisError {
    RedisErrorKind kind;
    std::string message;

    // A failure of Redis or the path to it (what the circuit breaker counts),
    // as opposed to an error reply or a busy pool.
    bool connectivity() const {
        return kind == RedisErrorKind::connect || kind == RedisErrorKind::io ||
               kind == RedisErrorKind::timeout || kind == RedisErrorKind::protocol;
    }
};

// One parsed reply. Strings are held in a `Blob` (adopting the reader's
// buffer), so a GET's value is handed to the store without another copy.
struct RedisReply {
    using Type = proto::RedisValue::Type; // string, status, error, integer, nil, array

    Type type = Type::nil;
    std::int64_t integer = 0;
    Blob data; // string, status and error replies
    std::vector<std::unique_ptr<RedisReply>> elements;

    std::string_view text() const { return data.text(); }
    bool is_ok() const { return type == Type::status && text() == "OK"; }
    // An error reply that the same command may not get later: Redis busy
    // with a script, loading, a replica or a cluster in transition, out of
    // memory, failing to save (-NOPERM, -ERR and the like are for good).
    bool is_transient_error() const {
        if (type != Type::error) {
            return false;
        }
        const std::string_view code = text().substr(0, text().find(' '));
        for (const std::string_view transient :
             {"BUSY", "LOADING", "MASTERDOWN", "READONLY", "TRYAGAIN", "CLUSTERDOWN", "MISCONF",
              "OOM", "NOREPLICAS"}) {
            if (code == transient) {
                return true;
            }
        }
        return false;
    }
};

using RedisReplyPtr = std::unique_ptr<RedisReply>;

// One command: its arguments, viewed, not copied (a SET's value stays in its
// `Blob` until written to the socket).
struct RedisCommand {
    std::vector<std::string_view> args;
    // The reply types this command can get besides an error reply (which is
    // always a reply); any other is a protocol error. Empty: any.
    std::vector<RedisReply::Type> accepts = {};
    // The most array elements its reply may hold, summed over the reply;
    // 0: the reader's default (65536, docs/remote.md).
    std::uint64_t max_elements = 0;
    // A reply that holds no value (CLUSTER SLOTS): its longest bulk string,
    // and its whole size, instead of the endpoint's max_value_size plus
    // RedisReplyLimits::max_reply_extra. 0: those.
    std::uint64_t max_bulk = 0;
    std::uint64_t max_reply_bytes = 0;
};

// Transfers of large values get more time than `op_timeout`: one second per
// this many bytes actually received or written on top of it (a 512 MiB value
// gets 16 s more). Never per byte a reply merely announces.
inline constexpr std::uint64_t k_min_bytes_per_second = 32ULL << 20;

// One open connection: socket, reply parser, read buffer. Not thread-safe;
// the pool hands it to one thread at a time.
class RedisConnection {
public:
    ~RedisConnection();
    RedisConnection(RedisConnection&&) noexcept;
    RedisConnection& operator=(RedisConnection&&) noexcept;

    // Connects within `endpoint.connect_timeout` (host names are resolved by
    // getaddrinfo, which has no timeout of its own), then sends AUTH and
    // SELECT as needed and names the client "pt2cached", by `deadline` plus
    // the time the connect took (see `connect_time`).
    static tl::expected<RedisConnection, RedisError> open(const RedisEndpoint& endpoint,
                                                          SteadyClock::time_point deadline,
                                                          const std::atomic<bool>* abort = nullptr);
    // The same, by now + the endpoint's op timeout.
    static tl::expected<RedisConnection, RedisError> open(const RedisEndpoint& endpoint);

    // Sends `commands` in one write and reads one reply per command, all by
    // `deadline` (extended for large transfers, see k_min_bytes_per_second).
    // An error reply is a reply, not an error. A reply that breaks the rules
    // in docs/remote.md, of a type its command does not accept, bytes beyond
    // the last reply or waiting before the first command is sent (a reply to
    // nothing, which would answer these commands with another's value), or a
    // close mid-reply are `protocol` errors; a close before the commands
    // are sent is an `io` error (the pool retries on a new connection). When
    // `abort` becomes true the exchange stops within about 50 ms. After any
    // error the connection is unusable.
    tl::expected<std::vector<RedisReplyPtr>, RedisError>
    exchange(std::span<const RedisCommand> commands, SteadyClock::time_point deadline,
             const std::atomic<bool>* abort = nullptr);

    // One command, by now + the op timeout.
    tl::expected<RedisReplyPtr, RedisError> command(const RedisCommand& command,
                                                    const std::atomic<bool>* abort = nullptr);

    // How long opening the connection took (connect, without the setup).
    Milliseconds connect_time() const { return m_connect_time; }

    bool usable() const { return m_usable; }

private:
    // Nothing may wait on an idle connection (see exchange()).
    tl::expected<void, RedisError> check_quiet();

    struct ContextDeleter {
        void operator()(redisContext* context) const;
    };
    // The deadline of the exchange in progress: its base, extended by the
    // bytes transferred so far.
    struct Budget {
        SteadyClock::time_point base;
        std::uint64_t transferred = 0;
        SteadyClock::time_point deadline() const;
    };

    RedisConnection(std::unique_ptr<redisContext, ContextDeleter> context,
                    const RedisEndpoint& endpoint);

    tl::expected<void, RedisError> write_all(std::span<const RedisCommand> commands, Budget& budget,
                                             const std::atomic<bool>* abort);
    tl::expected<RedisReplyPtr, RedisError> read_reply(const RedisCommand& command, Budget& budget,
                                                       const std::atomic<bool>* abort);
    // Reads what the socket has into the reader (a bulk in progress straight
    // into its buffer); waits for it when it has nothing.
    tl::expected<void, RedisError> read_some(Budget& budget, const std::atomic<bool>* abort);
    // Reads into `room` (else m_buffer): what read()/readv() return, with
    // errno; over TLS, EAGAIN with `events` set to what to wait for.
    ssize_t receive(std::span<std::byte> room, short& events);
    // Writes some of `iov` (all of it by `index` on), waiting as needed: the
    // bytes sent.
    tl::expected<std::size_t, RedisError> send_some(std::span<iovec> iov, const Budget& budget,
                                                    const std::atomic<bool>* abort);
    // After a receive() that returned `got` <= 0: the error (end of stream, a
    // failed read), or nothing once reading may be tried again (EINTR, or
    // EAGAIN and the socket became ready for `events` before the deadline).
    tl::expected<void, RedisError> after_short_read(ssize_t got, short events, const Budget& budget,
                                                    const std::atomic<bool>* abort);
    // The TLS handshake over the connected socket, by `deadline`.
    tl::expected<void, RedisError> start_tls(const RedisEndpoint& endpoint,
                                             SteadyClock::time_point deadline,
                                             const std::atomic<bool>* abort);
    // Waits until the socket is ready for `events`, the deadline or an abort.
    tl::expected<void, RedisError> wait(short events, SteadyClock::time_point deadline,
                                        const std::atomic<bool>* abort);
    RedisError fail(RedisErrorKind kind, std::string message);
    // The reader's limits for the replies to `commands`.
    proto::RedisReplyLimits limits_for(std::span<const RedisCommand> commands) const;

    std::unique_ptr<redisContext, ContextDeleter> m_context;
    std::unique_ptr<TlsSession> m_tls; // over m_context's socket: destroyed first
    proto::RedisReplyReader m_reader;
    proto::RedisReplyLimits m_limits; // the endpoint's, for commands that set none
    std::vector<char> m_buffer;
    Milliseconds m_op_timeout;
    Milliseconds m_connect_time{0};
    Milliseconds m_budget{0}; // of the exchange in progress, for messages
    std::string m_tls_error;  // why the last TLS read failed
    int m_fd = -1;
    bool m_usable = true;
};

} // namespace pt2cache::daemon::store
