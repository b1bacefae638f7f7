// One accepted client: checks the peer's uid, tells the native protocol from
// RESP by the first byte, and owns the socket and its buffers for the session.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <sys/socket.h>

#include "daemon/asio.hpp"
#include "daemon/context.hpp"
#include "daemon/io_buffers.hpp"

namespace pt2cache::daemon {

class Connection : public std::enable_shared_from_this<Connection> {
public:
    Connection(UnixSocket socket, Context& context, std::uint64_t id);

    // Serves the connection until the peer leaves, a protocol error closes
    // it, or the daemon stops.
    awaitable<void> run();

    // The client process (SO_PEERCRED); -1 when unknown.
    pid_t peer_pid() const { return m_peer.pid; }
    // Turns the connection away before serving it: sends `error` as a RESP
    // error line (best effort, never blocking) and closes.
    void refuse(std::string_view error);

    // Makes a pending read see end-of-file; replies in flight still go out.
    void shutdown_read();

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
    // Reads exactly `out.size()` bytes, bypassing input(). False on EOF/error.
    awaitable<bool> read_exact(std::span<std::byte> out);
    // Ends a batch of requests: writes the replies, then reads more requests
    // (at least one byte, room for `hint`). False when the session is over:
    // the peer left, or the daemon is stopping.
    awaitable<bool> next_batch(OutputBatch& batch, std::size_t hint);
    // Writes and clears `batch`. False when the peer is gone.
    awaitable<bool> flush(OutputBatch& batch);

private:
    bool peer_allowed();
    // Brings the lease in line with the input buffer's capacity.
    awaitable<bool> lease_input();

    UnixSocket m_socket;
    Context& m_context;
    std::uint64_t m_id;
    ucred m_peer{0, static_cast<uid_t>(-1), static_cast<gid_t>(-1)};
    bool m_peer_known = false;
    InputBuffer m_input;
    InflightLease m_lease;
};

} // namespace pt2cache::daemon
