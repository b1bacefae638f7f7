// The one place that includes Boost.Asio. Boost 1.74's awaitable.hpp needs
// <utility> first with GCC 12, and only this subset of the coroutine API
// exists there: awaitable, co_spawn, detached, use_awaitable, redirect_error,
// this_coro::executor, steady_timer (and ip::tcp for the metrics endpoint).
#pragma once

#include <utility>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

namespace pt2cache::daemon {

namespace asio = boost::asio;
// Every coroutine and Unix socket of the daemon runs on an io_context: the
// concrete executor type spares each asynchronous operation the copies and
// indirect calls of the type-erased any_io_executor.
using Executor = asio::io_context::executor_type;
template <typename T = void>
using awaitable = asio::awaitable<T, Executor>;
inline constexpr asio::use_awaitable_t<Executor> use_awaitable{};
using UnixSocket = asio::basic_stream_socket<asio::local::stream_protocol, Executor>;
using UnixAcceptor = asio::basic_socket_acceptor<asio::local::stream_protocol, Executor>;

} // namespace pt2cache::daemon
