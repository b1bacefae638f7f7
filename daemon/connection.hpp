// One accepted client: checks the peer's uid, tells the native protocol from
// RESP by the first byte, and owns the socket and its buffers for the session.
#pragma once

#include <cstdint>
#include <memory>

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

    // Makes a pending read see end-of-file; replies in flight still go out.
    void shutdown_read();

    std::uint64_t id() const { return m_id; }
    Context& context() { return m_context; }
    InputBuffer& input() { return m_input; }

    // Reads at least one more byte into input(), growing it for `hint` bytes.
    // False on end-of-file or error.
    awaitable<bool> read_more(std::size_t hint);
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

    UnixSocket m_socket;
    Context& m_context;
    std::uint64_t m_id;
    InputBuffer m_input;
};

} // namespace pt2cache::daemon
