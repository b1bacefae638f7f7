// A socket read that tells Asio's reactor when it drained the socket, so
// that the next read waits for the next event instead of first trying a
// recv that finds nothing (docs/architecture.md, "Replies").
//
// Asio's own receive operation asks the reactor to try the next read at
// once ("speculatively") unless its last read returned 0 bytes. After a
// request-reply round trip that try is a recv that fails with EAGAIN: one
// system call per unpipelined request that redis-server does not make. This
// operation reports a short read (fewer bytes than the buffer had room for:
// the kernel had no more) as "exhausted", as Asio does for an empty one; the
// reactor then skips the try until the socket's next event.
//
// Two cases need help, and the caller (Connection::probe_drained) peeks at a
// socket that has waited 10 ms for an event after a short read:
// - End-of-file that arrives with the last bytes (a client that sends its
//   last request and closes, or shuts down writing, before the daemon reads)
//   raises one event for both. The short read takes the bytes, and no later
//   event comes for the end-of-file. The peek finds it, and the caller shuts
//   down its own reading side, which raises an event.
// - A recv on a Unix socket also stops short, with bytes still queued, at a
//   message that carries descriptors (SCM_RIGHTS) or at an out-of-band mark:
//   no client of ours sends either. Bytes that two peeks find with no read
//   in between end the connection.
// A connection whose reads wait long (a client that computes between its
// requests) reads as Asio does (`drained` false): its next read tries a recv
// first, and there is nothing to probe; see Connection::k_quick_read.
//
// Built on Boost 1.74's reactor interface (asio::detail); another Boost
// version uses the plain async_read_some, which never claims a drained
// socket.
#pragma once

#include <cstddef>
#include <utility>

#include "daemon/asio.hpp"

#include <boost/version.hpp>

#if BOOST_VERSION == 107400 && !defined(BOOST_ASIO_HAS_IOCP)
#include <boost/asio/detail/handler_alloc_helpers.hpp>
#include <boost/asio/detail/handler_work.hpp>
#include <boost/asio/detail/reactor.hpp>
#include <boost/asio/detail/reactor_op.hpp>
#include <boost/asio/detail/socket_ops.hpp>
#define PT2CACHE_DRAINED_READ 1
#else
#define PT2CACHE_DRAINED_READ 0
#endif

namespace pt2cache::daemon {

#if PT2CACHE_DRAINED_READ

namespace drained_detail {

namespace ad = asio::detail;

template <typename Handler, typename IoExecutor>
class RecvOp : public ad::reactor_op {
public:
    BOOST_ASIO_DEFINE_HANDLER_PTR(RecvOp);

    RecvOp(int socket, asio::mutable_buffer buffer, bool drained, Handler& handler,
           const IoExecutor& io_ex)
        : ad::reactor_op(boost::system::error_code(), &RecvOp::do_perform, &RecvOp::do_complete)
        , m_socket(socket)
        , m_buffer(buffer)
        , m_drained(drained)
        , m_handler(std::move(handler))
        , m_work(m_handler, io_ex) {}

    static status do_perform(ad::reactor_op* base) {
        auto* op = static_cast<RecvOp*>(base);
        if (!ad::socket_ops::non_blocking_recv1(op->m_socket, op->m_buffer.data(),
                                                op->m_buffer.size(), 0, true, op->ec_,
                                                op->bytes_transferred_)) {
            return not_done; // EAGAIN: the reactor waits for an event
        }
        // Fewer bytes than there was room for (or end-of-file, or an error):
        // the kernel had nothing more. Asio's own operation says so of
        // end-of-file only.
        const bool exhausted = op->m_drained ? op->bytes_transferred_ < op->m_buffer.size()
                                             : op->bytes_transferred_ == 0;
        return exhausted ? done_and_exhausted : done;
    }

    static void do_complete(void* owner, ad::operation* base, const boost::system::error_code&,
                            std::size_t) {
        // As Asio's own reactive_socket_recv_op: free the operation before
        // the upcall, which runs only when the loop is running (owner).
        auto* op = static_cast<RecvOp*>(base);
        ptr p = {std::addressof(op->m_handler), op, op};
        ad::handler_work<Handler, IoExecutor> work(std::move(op->m_work));
        ad::binder2<Handler, boost::system::error_code, std::size_t> handler(
            op->m_handler, op->ec_, op->bytes_transferred_);
        p.h = std::addressof(handler.handler_);
        p.reset();
        if (owner) {
            ad::fenced_block fence(ad::fenced_block::half);
            work.complete(handler, handler.handler_);
        }
    }

private:
    int m_socket;
    asio::mutable_buffer m_buffer;
    bool m_drained;
    Handler m_handler;
    ad::handler_work<Handler, IoExecutor> m_work;
};

// basic_socket keeps its implementation protected; a pointer to the member,
// taken through a derived class, reaches it on any socket of the type.
struct SocketAccess : UnixSocket {
    static auto& impl(UnixSocket& socket) { return socket.*(&SocketAccess::impl_); }
};

} // namespace drained_detail

// async_read_some on `socket` into `buffer` (not empty); when `drained`, a
// short read tells the reactor that it drained the socket. `reactor` is the
// socket's io_context's reactor (drained_reactor()), looked up once per
// connection.
template <typename Token>
auto async_read_drained(UnixSocket& socket, asio::detail::reactor& reactor,
                        asio::mutable_buffer buffer, bool drained, Token&& token) {
    auto initiate = [&socket, &reactor, buffer, drained](auto handler) {
        using Handler = decltype(handler);
        using Op = drained_detail::RecvOp<Handler, Executor>;
        auto& io = drained_detail::SocketAccess::impl(socket);
        auto& impl = io.get_implementation();
        const bool is_continuation = boost_asio_handler_cont_helpers::is_continuation(handler);
        typename Op::ptr p = {std::addressof(handler), Op::ptr::allocate(handler), nullptr};
        p.p = new (p.v) Op(impl.socket_, buffer, drained, handler, io.get_executor());
        if ((impl.state_ & asio::detail::socket_ops::non_blocking) != 0 ||
            asio::detail::socket_ops::set_internal_non_blocking(impl.socket_, impl.state_, true,
                                                                p.p->ec_)) {
            reactor.start_op(asio::detail::reactor::read_op, impl.socket_, impl.reactor_data_, p.p,
                             is_continuation, true);
        } else {
            reactor.post_immediate_completion(p.p, is_continuation);
        }
        p.v = p.p = nullptr;
    };
    return asio::async_initiate<Token, void(boost::system::error_code, std::size_t)>(
        std::move(initiate), token);
}

inline asio::detail::reactor& drained_reactor(const Executor& executor) {
    return asio::use_service<asio::detail::reactor>(executor.context());
}

inline constexpr bool k_drained_reads = true;

#else

struct NoReactor {};
template <typename Token>
auto async_read_drained(UnixSocket& socket, NoReactor&, asio::mutable_buffer buffer, bool,
                        Token&& token) {
    return socket.async_read_some(buffer, std::forward<Token>(token));
}
inline NoReactor& drained_reactor(const Executor&) {
    static NoReactor none;
    return none;
}
inline constexpr bool k_drained_reads = false;

#endif

} // namespace pt2cache::daemon
