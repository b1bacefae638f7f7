#include "daemon/connection.hpp"

#include <cstring>
#include <optional>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utility>

#include "daemon/log.hpp"
#include "daemon/native_session.hpp"
#include "daemon/resp_session.hpp"
#include "daemon/store/log.hpp"
#include "proto/frame.hpp"

namespace pt2cache::daemon {

// The connections of one loop whose replies wait for the end of the loop's
// round (Connection::send_later). Only the loop's thread uses it (one thread
// runs each loop, server.cpp). A service of the loop's io_context, so that a
// loop stopped with replies still kept releases its connections before the
// io_context goes.
class DeferredReplies : public asio::execution_context::service {
public:
    static inline asio::execution_context::id id;

    explicit DeferredReplies(asio::execution_context& owner)
        : asio::execution_context::service(owner) {}

    // Keeps `connection` for the round's end; the first one posts send_all.
    void add(std::shared_ptr<Connection> connection) {
        m_waiting.push_back(std::move(connection));
        if (m_waiting.size() == 1) {
            // Runs after the completions that the loop's last wait for
            // events delivered, which may add more connections meanwhile.
            asio::post(m_waiting.back()->executor(), [this] { send_all(); });
        }
    }

private:
    void send_all() {
        // Sending adds no connection: only a session's send_later() does.
        for (auto& connection : m_waiting) {
            connection->send_deferred();
        }
        m_waiting.clear();
    }

    void shutdown() override { m_waiting.clear(); }

    std::vector<std::shared_ptr<Connection>> m_waiting;
};

Connection::Connection(UnixSocket socket, Context& context, std::uint64_t id)
    : m_socket(std::move(socket))
    , m_executor(m_socket.get_executor())
    , m_deferred_replies(&asio::use_service<DeferredReplies>(m_executor.context()))
    , m_writer_event(m_executor, std::chrono::steady_clock::time_point::max())
    , m_stall_timer(m_executor)
    , m_reactor(&drained_reactor(m_executor))
    , m_probe_timer(m_executor)
    , m_context(context)
    , m_id(id)
    , m_lease(context.inflight) {
    socklen_t len = sizeof m_peer;
    m_peer_known =
        ::getsockopt(m_socket.native_handle(), SOL_SOCKET, SO_PEERCRED, &m_peer, &len) == 0;
    if (!m_peer_known) {
        m_peer.pid = -1;
    }
}

Connection::~Connection() {
    remove_queued(m_queued_bytes);
}

void Connection::add_queued(std::size_t bytes) {
    m_queued_bytes += bytes;
    m_context.queued_replies.fetch_add(bytes, std::memory_order_relaxed);
}

void Connection::remove_queued(std::size_t bytes) {
    m_queued_bytes -= bytes;
    m_context.queued_replies.fetch_sub(bytes, std::memory_order_relaxed);
}

void Connection::refuse(std::string_view error) {
    boost::system::error_code ignored;
    m_socket.non_blocking(true, ignored);
    const std::string line = fmt::format("-{}\r\n", error);
    m_socket.write_some(asio::buffer(line), ignored);
    m_socket.shutdown(UnixSocket::shutdown_both, ignored);
    m_socket.close(ignored);
}

bool Connection::peer_allowed() {
    if (!m_peer_known) {
        logger("session").warn("[{}] SO_PEERCRED failed", m_id);
        return false;
    }
    // The daemon never changes its user: one system call, not one per
    // connection.
    static const uid_t our_uid = ::geteuid();
    const ucred& cred = m_peer;
    if (cred.uid != our_uid) {
        logger("session").warn("[{}] refused a connection from uid {} (pid {}): pt2cached "
                               "serves only uid {}",
                               m_id, cred.uid, cred.pid, our_uid);
        return false;
    }
    return true;
}

namespace {

// The identity (device, inode) of what `path` names; nullopt when unknown.
std::optional<std::pair<dev_t, ino_t>> identity(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
        return std::nullopt;
    }
    return std::pair(st.st_dev, st.st_ino);
}

} // namespace

bool Connection::peer_shares_files() {
    if (!m_peer_shares_files) {
        bool same = m_peer_known && m_peer.pid > 0;
        for (const char* what : {"ns/mnt", "root"}) {
            if (!same) {
                break;
            }
            const auto theirs = identity(fmt::format("/proc/{}/{}", m_peer.pid, what));
            const auto ours = identity(fmt::format("/proc/self/{}", what));
            same = theirs && ours && *theirs == *ours;
        }
        // Every compile in such a container connects anew: one line per
        // 10 s, with how many were left out.
        static store::LogThrottle throttle;
        if (!same) {
            if (const auto left_out = throttle.take()) {
                logger("session").info("[{}] pid {} sees other files (another mount namespace "
                                       "or root, or unknown): its paths are not hashed here "
                                       "({} more such connections since the last line)",
                                       m_id, m_peer.pid, *left_out);
            }
        }
        m_peer_shares_files = same;
    }
    return *m_peer_shares_files;
}

awaitable<void> Connection::run() {
    auto& counters = m_context.stats.daemon();
    if (!peer_allowed()) {
        counters.peers_refused++;
        co_return;
    }
    counters.connections_accepted++;
    counters.connections_active++;
    // Synchronous operations on the socket return would_block instead of
    // blocking an I/O thread (see flush()).
    boost::system::error_code ignored_ec;
    m_socket.non_blocking(true, ignored_ec);
    try {
        if (co_await read_more(0)) {
            const auto first = m_input.readable().front();
            if (first == proto::k_magic0) {
                co_await serve_native(*this);
            } else {
                co_await serve_resp(*this);
            }
        }
    } catch (const std::exception& e) {
        logger("session").error("[{}] connection failed: {}", m_id, e.what());
    }
    // Replies still queued go out before the socket closes (e.g. to a client
    // that sent its last requests and shut down its writing side).
    co_await written();
    counters.connections_active--;
    m_context.touch();
}

void Connection::close() {
    // No shutdown first: the registry has let go of the descriptor, nothing
    // else holds it, and closing the last one ends the stream for the peer.
    m_probe_timer.cancel();
    boost::system::error_code ignored;
    m_socket.close(ignored);
}

void Connection::shutdown_read() {
    // Called from another thread: SHUT_RD on the descriptor is thread-safe
    // and makes a pending read complete with end-of-file.
    ::shutdown(m_socket.native_handle(), SHUT_RD);
}

std::uint64_t Connection::input_beyond_base() const {
    return m_input.capacity() > InputBuffer::k_base ? m_input.capacity() - InputBuffer::k_base : 0;
}

void Connection::release_input_lease() {
    // A client that never reads its replies must not keep the budget its
    // last large request took.
    m_input.shrink_to_content();
    if (const auto beyond_base = input_beyond_base(); beyond_base < m_lease.bytes()) {
        m_lease.resize_down(beyond_base);
    }
}

awaitable<bool> Connection::lease_input() {
    const bool granted = co_await m_lease.grow_to(input_beyond_base(), k_inflight_patience);
    co_return granted;
}

awaitable<bool> Connection::read_more(std::size_t hint) {
    boost::system::error_code ec;
    auto space = m_input.prepare(std::max<std::size_t>(hint, 4096));
    // Every byte of capacity beyond the base comes out of the daemon-wide
    // budget; the buffer only grows with what arrives (sessions ask for at
    // most about double what they hold), never with what a length claims.
    // The lease shrinks at once; growing it may wait, in a coroutine of its
    // own (the usual read needs no growth and no coroutine frame).
    bool leased = true;
    if (const std::uint64_t beyond_base = input_beyond_base(); beyond_base <= m_lease.bytes()) {
        m_lease.resize_down(beyond_base);
    } else {
        leased = co_await lease_input();
    }
    if (!leased) {
        m_context.stats.daemon().inflight_refused++;
        logger("session").warn("[{}] no room in daemon.max_inflight_bytes ({} of {} bytes in use) "
                               "for a {} byte input buffer {}; closing",
                               m_id, m_context.inflight.in_use(), m_context.inflight.limit(),
                               m_input.capacity(), refusal_reason(m_lease));
        co_return false;
    }
    std::size_t n = 0;
    if (m_lease.bytes() == 0 && m_session_held == 0) {
        m_read_watch.stop();
        begin_read();
        n = co_await async_read_drained(m_socket, *m_reactor, space, m_quick_reads,
                                        asio::redirect_error(use_awaitable, ec));
        end_read(space.size(), n, ec);
    } else {
        n = co_await read_some_watched(space, ec);
    }
    if (ec || n == 0) {
        co_return false;
    }
    m_input.commit(n);
    m_context.touch();
    co_return true;
}

awaitable<std::size_t> Connection::read_some_watched(asio::mutable_buffer space,
                                                     boost::system::error_code& ec) {
    const std::uint64_t generation = ++m_stall_generation;
    m_stall_timer.expires_at(m_read_watch.due(m_received));
    m_stall_timer.async_wait(
        [this, self = shared_from_this(), generation](const boost::system::error_code& waited) {
            if (waited || generation != m_stall_generation) {
                return; // the read ended first
            }
            m_context.stats.daemon().stalled_requests++;
            logger("session").warn("[{}] less than {} bytes received in {} s while holding {} "
                                   "bytes of daemon.max_inflight_bytes; closing",
                                   m_id, k_stall_progress, k_inflight_patience.count() / 1000,
                                   m_lease.bytes() + m_session_held);
            ::shutdown(m_socket.native_handle(), SHUT_RD);
        });
    begin_read();
    const auto n = co_await async_read_drained(m_socket, *m_reactor, space, m_quick_reads,
                                               asio::redirect_error(use_awaitable, ec));
    end_read(space.size(), n, ec);
    ++m_stall_generation;
    m_stall_timer.cancel();
    co_return n;
}

awaitable<bool> Connection::read_exact(std::span<std::byte> out) {
    // Read by parts, each watched: a large body holds its lease meanwhile.
    boost::system::error_code ec;
    std::size_t filled = 0;
    while (filled < out.size()) {
        const auto n =
            co_await read_some_watched(asio::buffer(out.data() + filled, out.size() - filled), ec);
        if (ec || n == 0) {
            co_return false;
        }
        filled += n;
    }
    co_return true;
}

awaitable<bool> Connection::next_batch(OutputBatch& batch, std::size_t hint, std::size_t requests) {
    // Not a coroutine: the usual batch goes straight on to read_more's
    // coroutine, with no frame of its own.
    const bool sent = requests > 1 ? send_later(batch) : send(batch);
    if (!sent || m_context.stopping) {
        return answer(false);
    }
    if (m_queued_bytes > output_limit() || m_write_failed) {
        return drain_then_read(hint);
    }
    return read_more(hint);
}

awaitable<bool> Connection::drain_then_read(std::size_t hint) {
    // Plain statements: GCC 12 miscompiles (SIGILL) a co_await inside a
    // short-circuit condition or a co_return of this awaitable<bool>.
    release_input_lease();
    while (m_queued_bytes > output_limit() && !m_write_failed) {
        co_await writer_progress();
    }
    if (m_write_failed) {
        co_return false;
    }
    const bool more = co_await read_more(hint);
    co_return more;
}

awaitable<bool> Connection::answer(bool value) {
    co_return value;
}

awaitable<bool> Connection::make_room(OutputBatch& batch) {
    if (!needs_room(batch)) {
        co_return true;
    }
    if (!send(batch)) {
        co_return false;
    }
    release_input_lease();
    while (m_queued_bytes > output_limit() && !m_write_failed) {
        co_await writer_progress();
    }
    co_return !m_write_failed;
}

awaitable<bool> Connection::flush(OutputBatch& batch) {
    if (!send(batch)) {
        co_return false;
    }
    const bool done = co_await written();
    co_return done;
}

bool Connection::send_later(OutputBatch& batch) {
    if (m_writing || m_write_failed || !m_deferred.empty() || batch.empty()) {
        return send(batch);
    }
    // Swapped, not moved: the session keeps the emptied batch's buffers.
    std::swap(m_deferred, batch);
    m_deferred_replies->add(shared_from_this());
    return true;
}

void Connection::send_deferred() {
    if (!m_deferred.empty()) {
        send_now(m_deferred);
    }
}

bool Connection::send(OutputBatch& batch) {
    send_deferred();
    return send_now(batch);
}

bool Connection::send_now(OutputBatch& batch) {
    if (m_write_failed) {
        batch.clear();
        return false;
    }
    if (batch.empty()) {
        return true;
    }
    if (m_writing) {
        // Behind the replies already queued, in order.
        add_queued(batch.size());
        m_queued.push_back(std::move(batch));
        batch = OutputBatch();
        return true;
    }
    // Most replies fit in the socket buffer: write them now, without the
    // scheduler round trip that even an immediately complete async_write
    // costs. Only what does not fit goes to the writer.
    boost::system::error_code ec;
    std::size_t written = 0;
    std::size_t total = 0;
    if (batch.has_blobs()) {
        const auto buffers = batch.buffers();
        total = asio::buffer_size(buffers);
        written = m_socket.write_some(buffers, ec);
    } else {
        // Replies alone (misses, SETs' OKs): one buffer, one send.
        const auto bytes = asio::buffer(batch.bytes());
        total = bytes.size();
        written = m_socket.write_some(bytes, ec);
    }
    if (ec && ec != asio::error::would_block && ec != asio::error::try_again) {
        batch.clear();
        m_write_failed = true;
        return false;
    }
    if (written == total) {
        batch.clear();
        return true;
    }
    add_queued(total - written);
    m_front_written = written;
    m_queued.push_back(std::move(batch));
    batch = OutputBatch();
    m_writing = true;
    write_front();
    return true;
}

void Connection::write_front() {
    auto buffers = m_queued.front().buffers();
    // Skip what an earlier write sent of the front batch.
    std::size_t skip = m_front_written;
    auto first = buffers.begin();
    while (skip >= first->size()) {
        skip -= first->size();
        ++first;
    }
    std::vector<asio::const_buffer> rest(first, buffers.end());
    rest.front() += skip;
    // One write at a time, not async_write's whole batch, so that
    // writer_progress() sees a client that reads a large reply slowly make
    // progress.
    m_socket.async_write_some(
        rest,
        asio::bind_executor(m_executor, [self = shared_from_this()](
                                            const boost::system::error_code& ec, std::size_t n) {
            self->remove_queued(std::min(n, self->m_queued_bytes));
            self->m_written += n;
            self->m_front_written += n;
            if (ec) {
                self->m_write_failed = true;
                self->m_queued.clear();
                self->m_front_written = 0;
                self->remove_queued(self->m_queued_bytes);
            } else if (self->m_front_written >= self->m_queued.front().size()) {
                self->m_queued.pop_front();
                self->m_front_written = 0;
            }
            if (self->m_queued.empty()) {
                self->m_writing = false;
                self->m_write_watch.stop();
            } else {
                self->write_front();
            }
            self->m_writer_event.cancel();
        }));
}

awaitable<void> Connection::writer_progress() {
    using Clock = std::chrono::steady_clock;
    boost::system::error_code ec;
    // Over daemon.max_reply_bytes (output_limit()'s lower bound) the total
    // may drop, or the limit rise, with no event of this connection's own:
    // look again every k_reply_pressure_recheck.
    const bool pressure = output_limit() < k_max_queued_output;
    if (pressure) {
        m_writer_event.expires_after(k_reply_pressure_recheck);
    }
    const std::uint64_t held = m_lease.bytes() + m_session_held;
    // Replies beyond what a connection may queue (one large value, or a
    // slice of MGET) are memory held for the client as budget is: it too must
    // read k_stall_progress of them in every k_inflight_patience.
    const std::uint64_t unread = m_queued_bytes > k_max_queued_output ? m_queued_bytes : 0;
    if (held == 0 && unread == 0) {
        m_write_watch.stop();
        co_await m_writer_event.async_wait(asio::redirect_error(use_awaitable, ec));
        m_writer_event.expires_at(Clock::time_point::max());
        co_return;
    }
    // An earlier wait may have ended with replies still queued, leaving its
    // deadline behind: due() starts a new one once the client has read
    // enough since.
    const std::uint64_t generation = ++m_stall_generation;
    m_stall_timer.expires_at(m_write_watch.due(m_written));
    m_stall_timer.async_wait([this, self = shared_from_this(), generation, held,
                              unread](const boost::system::error_code& waited) {
        // The writer's progress may have been handled first in the same
        // round of the loop: then it is no stall.
        if (waited || generation != m_stall_generation || !m_writing ||
            m_write_watch.progressed(m_written)) {
            return;
        }
        m_context.stats.daemon().stalled_requests++;
        logger("session").warn(
            "[{}] its client read less than {} bytes of replies in {} s while holding {}; "
            "closing",
            m_id, k_stall_progress, k_inflight_patience.count() / 1000,
            held > 0 ? fmt::format("{} bytes of daemon.max_inflight_bytes", held)
                     : fmt::format("{} bytes of replies", unread));
        // The writer fails, which ends the session's wait.
        boost::system::error_code ignored;
        m_socket.cancel(ignored);
    });
    co_await m_writer_event.async_wait(asio::redirect_error(use_awaitable, ec));
    m_writer_event.expires_at(Clock::time_point::max());
    ++m_stall_generation;
    m_stall_timer.cancel();
}

awaitable<bool> Connection::written() {
    send_deferred();
    release_input_lease();
    while (m_writing) {
        co_await writer_progress();
    }
    co_return !m_write_failed;
}

} // namespace pt2cache::daemon
