// One accepted client: checks the peer's uid, tells the native protocol from
// RESP by the first byte, and owns the socket and its buffers for the session.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string_view>
#include <sys/socket.h>

#include "daemon/asio.hpp"
#include "daemon/context.hpp"
#include "daemon/drained_read.hpp"
#include "daemon/io_buffers.hpp"

namespace pt2cache::daemon {

class DeferredReplies;

class Connection : public std::enable_shared_from_this<Connection> {
public:
    Connection(UnixSocket socket, Context& context, std::uint64_t id);
    ~Connection();
    Connection(const Connection&) = delete;
    Connection& operator=(const Connection&) = delete;

    // Serves the connection until the peer leaves, a protocol error ends
    // it, or the daemon stops, and writes the replies still due. Runs on
    // executor(). The socket stays open for close().
    awaitable<void> run();
    // Closes the socket, on executor(). Only once no other thread can call
    // shutdown_read(): the descriptor's number may be reused at once.
    void close();
    // The connection's loop: its session and its reply writer run there. One
    // thread runs each loop (server.cpp), so they never run at once and need
    // no strand.
    Executor executor() const { return m_executor; }

    // The client process (SO_PEERCRED); -1 when unknown.
    pid_t peer_pid() const { return m_peer.pid; }
    // Whether the client sees the daemon's files under the daemon's paths:
    // the same mount namespace and root directory (not a container or chroot
    // sharing the socket). Asked once, when first needed; false when unknown.
    // HASH_FILES and CXX_LOOKUP hash nothing for a client that does not.
    bool peer_shares_files();
    // Turns the connection away before serving it: sends `error` as a RESP
    // error line (best effort, never blocking) and closes.
    void refuse(std::string_view error);

    // Makes a pending read see end-of-file; replies in flight still go out.
    void shutdown_read();
    // The in-flight budget the session holds between requests (commands
    // queued by MULTI): reads are watched for stalls while it is not 0.
    void hold_for_session(std::uint64_t bytes) { m_session_held = bytes; }

    std::uint64_t id() const { return m_id; }
    Context& context() { return m_context; }
    InputBuffer& input() { return m_input; }

    // Reads at least one more byte into input(), growing it for `hint` bytes.
    // False on end-of-file or error, and when the input buffer could not grow
    // within the daemon's in-flight budget (counted as inflight_refused).
    awaitable<bool> read_more(std::size_t hint);
    // The in-flight budget this connection holds (its input buffer beyond
    // the base size, and large bodies being received).
    InflightLease& lease() { return m_lease; }
    // Reads exactly `out.size()` bytes, bypassing input(). False on EOF/error,
    // and when the client stalls (see read_some_watched).
    awaitable<bool> read_exact(std::span<std::byte> out);
    // Ends a batch of `requests` requests: sends the replies (see send();
    // send_later() for a pipeline), then reads more requests (at least one
    // byte, room for `hint`). False when the session is over: the peer left,
    // or the daemon is stopping.
    awaitable<bool> next_batch(OutputBatch& batch, std::size_t hint, std::size_t requests);
    // Sends and clears `batch`, and waits until every reply sent so far is
    // written. False when the peer is gone.
    awaitable<bool> flush(OutputBatch& batch);
    // Sends and clears `batch` without waiting: what the socket takes now is
    // written at once, the rest by a writer on the loop while the session
    // goes on reading. A client that sends a long pipeline before reading
    // any reply so never blocks against us (docs/protocol.md, "Pipelining").
    // False when an earlier write failed (the peer is gone).
    bool send(OutputBatch& batch);
    // Like send(), but the write waits until the loop has run the handlers
    // of its last wait for events, as Redis writes its replies before it
    // waits again: replies to many connections then go out together, and
    // a client that pipelines to several connections finds more of them
    // ready per wait of its own (docs/architecture.md, "Replies"). Any
    // other send, flush or close of this connection sends it first.
    bool send_later(OutputBatch& batch);
    // Between two requests of a batch: once `batch` and the queued replies
    // pass output_limit(), sends `batch` and waits for the writer to bring
    // the queue under it. False when the peer is gone.
    awaitable<bool> make_room(OutputBatch& batch);
    // Whether make_room(batch) would have to wait or send.
    bool needs_room(const OutputBatch& batch) const {
        return batch.size() + m_queued_bytes > output_limit();
    }

    // Replies queued beyond this wait for the writer before more requests
    // are read (a client that never reads cannot make us buffer without end).
    static constexpr std::size_t k_max_queued_output = 16u << 20;
    // The same, while all connections' queued replies pass
    // daemon.max_reply_bytes: many clients that do not read cannot make us
    // buffer 16 MiB each (1,024 connections: 16 GiB).
    static constexpr std::size_t k_max_queued_output_over_limit = 64u << 10;
    // How often a connection waiting under that lower bound looks whether
    // the daemon is still over daemon.max_reply_bytes.
    static constexpr std::chrono::milliseconds k_reply_pressure_recheck{50};
    // How long a read waits after a short read before probe_drained() looks
    // for an end-of-file that raised no event of its own.
    static constexpr std::chrono::milliseconds k_drained_probe{10};
    // A read that waited less than this is followed by a drained read (the
    // client sends its requests back to back); after a longer wait the next
    // read tries a recv first, as Asio's own does, so that a client that
    // computes between its requests costs no probe per request.
    static constexpr std::chrono::milliseconds k_quick_read{1};

private:
    friend class DeferredReplies;

    bool peer_allowed();
    // Input buffer bytes past what every connection holds without a lease.
    std::uint64_t input_beyond_base() const;
    // Grows the lease to the input buffer's capacity, waiting for room.
    awaitable<bool> lease_input();
    // A read while the connection holds part of the in-flight budget (a
    // request arriving, or the session's, see hold_for_session): unless the
    // client sends k_stall_progress bytes within every k_inflight_patience
    // (as long as another request waits for room before it is refused), it
    // is taken to have stalled: its reading side is shut down, so the read
    // ends as at end-of-file, and it is counted (stalled_requests).
    // Otherwise a client stopped (or trickling bytes) in the middle of large
    // requests would keep everyone else's large requests refused for good.
    awaitable<std::size_t> read_some_watched(asio::mutable_buffer space,
                                             boost::system::error_code& ec);
    // Around each read of the socket (async_read_drained): after a short
    // read the reactor waits for the socket's next event, so a wait that
    // begins then arms the probe timer (probe_drained).
    void begin_read();
    void end_read(std::size_t room, std::size_t n, const boost::system::error_code& ec);
    // The probe timer's handler: a read that has waited k_drained_probe after
    // a short read, with no read in between, may be waiting for an event the
    // short read consumed (end-of-file that came with the last bytes; see
    // drained_read.hpp). A peek tells: end-of-file, and the connection shuts
    // down its own reading side, which raises an event; bytes, and it looks
    // again later, then ends the connection.
    void probe_drained(const boost::system::error_code& waited);
    void arm_probe();
    // Shrinks the lease to the input buffer's capacity, before a wait for
    // the client to read.
    void release_input_lease();
    // send(), with no deferred batch ahead of `batch`.
    bool send_now(OutputBatch& batch);
    // Sends the batch that send_later() kept, if any.
    void send_deferred();
    // Starts an async_write of the front of m_queued (on the loop's thread).
    void write_front();
    // Waits until the writer has made progress or ended.
    // While the connection holds part of the in-flight budget (commands
    // queued by MULTI whose EXEC waits to send more replies, or requests read
    // but not yet answered), its client must read k_stall_progress bytes of
    // replies within every k_inflight_patience, or the connection is closed
    // and counted (stalled_requests), as read_some_watched does for a
    // client that stops sending.
    awaitable<void> writer_progress();
    // How many reply bytes this connection may have queued before it waits
    // for its client to read them (k_max_queued_output, or
    // k_max_queued_output_over_limit while the daemon is over
    // daemon.max_reply_bytes).
    std::size_t output_limit() const {
        return m_context.queued_replies.load(std::memory_order_relaxed) >
                       m_context.max_reply_bytes.load(std::memory_order_relaxed)
                   ? k_max_queued_output_over_limit
                   : k_max_queued_output;
    }
    // m_queued_bytes and the daemon's total together.
    void add_queued(std::size_t bytes);
    void remove_queued(std::size_t bytes);
    // next_batch's slow path: waits until the queued replies are under
    // output_limit(), then reads.
    awaitable<bool> drain_then_read(std::size_t hint);
    // `value`, as a finished coroutine.
    static awaitable<bool> answer(bool value);
    // Waits until every queued reply is written (or a write failed).
    awaitable<bool> written();

    UnixSocket m_socket;
    Executor m_executor;
    DeferredReplies* m_deferred_replies;
    // Replies the socket did not take at once, in order; the front one has
    // `m_front_written` bytes written already.
    std::deque<OutputBatch> m_queued;
    // Replies that send_later() kept; they go out before any later ones.
    OutputBatch m_deferred;
    std::size_t m_front_written = 0;
    std::size_t m_queued_bytes = 0;
    bool m_writing = false;
    bool m_write_failed = false;
    // The writer cancels it to wake the session; it expires only for a
    // session waiting under daemon.max_reply_bytes (writer_progress).
    asio::steady_timer m_writer_event;
    // The stall rule's clock, one for each direction: a deadline
    // k_inflight_patience ahead (time_point::max(): not watching), moved on
    // each time the client has moved k_stall_progress more bytes.
    struct StallWatch {
        std::chrono::steady_clock::time_point deadline =
            std::chrono::steady_clock::time_point::max();
        std::uint64_t mark = 0; // the running total when the deadline was set

        void stop() { deadline = std::chrono::steady_clock::time_point::max(); }
        bool progressed(std::uint64_t total) const { return total - mark >= k_stall_progress; }
        // The deadline to wait for, given the bytes moved so far: a new one
        // when none runs or the client has moved enough since.
        std::chrono::steady_clock::time_point due(std::uint64_t total) {
            if (deadline == std::chrono::steady_clock::time_point::max() || progressed(total)) {
                deadline = std::chrono::steady_clock::now() + k_inflight_patience;
                mark = total;
            }
            return deadline;
        }
    };
    // Both directions' stall waits (never at once); a wait that ends after
    // the read or write it watched (another generation) does nothing.
    asio::steady_timer m_stall_timer;
    std::uint64_t m_stall_generation = 0;
    StallWatch m_read_watch;      // read_some_watched, over m_received
    StallWatch m_write_watch;     // writer_progress, over m_written; stopped once all is written
    std::uint64_t m_received = 0; // bytes read from the socket
    std::uint64_t m_written = 0;  // bytes the writer wrote
    std::uint64_t m_session_held = 0;
    // The loop's reactor, for async_read_drained.
    std::remove_reference_t<decltype(drained_reactor(std::declval<Executor>()))>* m_reactor;
    // Reads of the socket ended so far; whether the last one was short (the
    // next waits for an event); whether one is pending.
    std::uint64_t m_reads = 0;
    bool m_drained = false;
    bool m_reading = false;
    // Whether the last read waited less than k_quick_read (the next one is
    // then a drained read), and when the current one began.
    bool m_quick_reads = true;
    std::chrono::steady_clock::time_point m_read_began;
    // Runs while the connection reads after short reads; m_probe_reads is
    // m_reads when it was set.
    asio::steady_timer m_probe_timer;
    bool m_probe_armed = false;
    bool m_probe_saw_bytes = false;
    std::uint64_t m_probe_reads = 0;
    Context& m_context;
    std::uint64_t m_id;
    ucred m_peer{0, static_cast<uid_t>(-1), static_cast<gid_t>(-1)};
    bool m_peer_known = false;
    std::optional<bool> m_peer_shares_files; // peer_shares_files(), once asked
    InputBuffer m_input;
    InflightLease m_lease;
};

} // namespace pt2cache::daemon
