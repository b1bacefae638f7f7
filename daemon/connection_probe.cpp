// Connection's drained reads (daemon/drained_read.hpp): which reads report
// a short read as having drained the socket, and the probe that finds an
// end-of-file no event was raised for (docs/architecture.md, "Replies").
#include <cerrno>
#include <sys/socket.h>

#include "daemon/connection.hpp"
#include "daemon/log.hpp"

namespace pt2cache::daemon {

void Connection::begin_read() {
    m_reading = true;
    m_read_began = std::chrono::steady_clock::now();
    if (m_drained && !m_probe_armed) {
        arm_probe();
    }
}

void Connection::end_read(std::size_t room, std::size_t n, const boost::system::error_code& ec) {
    m_reading = false;
    ++m_reads;
    m_received += n;
    m_probe_saw_bytes = false;
    m_drained = k_drained_reads && m_quick_reads && !ec && n < room;
    m_quick_reads = std::chrono::steady_clock::now() - m_read_began < k_quick_read;
}

void Connection::arm_probe() {
    m_probe_armed = true;
    m_probe_reads = m_reads;
    m_probe_timer.expires_after(k_drained_probe);
    m_probe_timer.async_wait(
        [this, self = shared_from_this()](const boost::system::error_code& waited) {
            probe_drained(waited);
        });
}

void Connection::probe_drained(const boost::system::error_code& waited) {
    m_probe_armed = false;
    if (waited || !m_reading || !m_drained) {
        return; // closed, or busy: the next wait after a short read arms it again
    }
    if (m_reads != m_probe_reads) {
        arm_probe(); // reads ended meanwhile: this wait is a newer one
        return;
    }
    char byte = 0;
    const auto got = ::recv(m_socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        return; // nothing waiting: the next bytes or end-of-file raise an event
    }
    if (got > 0) {
        if (!m_probe_saw_bytes) {
            // Bytes raise an event of their own; it may be in this round of
            // the loop, after this handler. Look again later.
            m_probe_saw_bytes = true;
            arm_probe();
            return;
        }
        // Bytes that 10 ms brought no event for: a recv stopped short of
        // them, at descriptors passed with SCM_RIGHTS or an out-of-band
        // mark, which no client of ours sends. Cancelling ends the read.
        m_context.stats.daemon().protocol_errors++;
        logger("session").warn("[{}] bytes waiting that no read can take (descriptors passed "
                               "or out-of-band data?); closing",
                               m_id);
        boost::system::error_code ignored;
        m_socket.cancel(ignored);
        return;
    }
    // End-of-file (or an error) that raised no event of its own: the client
    // sent its last bytes and closed, or shut down writing, before we read
    // them. Shutting down our reading side, which the peer has already
    // ended, raises one, and the pending read sees end-of-file.
    ::shutdown(m_socket.native_handle(), SHUT_RD);
}

} // namespace pt2cache::daemon
