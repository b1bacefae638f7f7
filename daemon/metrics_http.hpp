// SPDX-License-Identifier: MIT
// metrics.listen: GET /metrics over HTTP/1.1 (docs/operations.md,
// "Prometheus metrics"). It runs on its own thread and io_context, apart from
// the cache's I/O threads, and renders from the same counters as STATS.
// Bounded: 16 connections (more are closed at once), 8 KiB of request
// header (431 beyond), 5 s to send the header (then closed), 10 s to take
// the response. One request per connection (Connection: close).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "config/listen_address.hpp"
#include "daemon/asio.hpp"

namespace pt2cache::daemon {

struct Context;

inline constexpr std::size_t k_metrics_max_connections = 16;
inline constexpr std::size_t k_metrics_max_header = 8 * 1024;
inline constexpr std::chrono::seconds k_metrics_header_deadline{5};
inline constexpr std::chrono::seconds k_metrics_write_deadline{10};

// The response to one HTTP request head (`head` ends with the blank line):
// 200 with the metrics for GET /metrics, 404 for other paths, 405 for other
// methods, 400 for what is not an HTTP/1.x request line. `render` makes the
// body of a 200. Pure; the server's tests drive it through a socket.
std::string metrics_http_response(std::string_view head, std::string (*render)(void*), void* state);

class MetricsHttpServer {
public:
    // Binds `address`; throws Fatal when it cannot.
    MetricsHttpServer(Context& context, const config::ListenAddress& address);
    ~MetricsHttpServer();
    MetricsHttpServer(const MetricsHttpServer&) = delete;
    MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

    // Serves on a thread of its own until stop().
    void start();
    // Closes the listener and every connection; joins the thread.
    void stop();

private:
    awaitable<void> accept_loop();
    awaitable<void> serve(asio::ip::tcp::socket accepted);

    Context& m_context;
    asio::io_context m_io{1};
    asio::ip::tcp::acceptor m_acceptor;
    std::thread m_thread;
    std::size_t m_connections = 0; // on m_io's thread only
};

} // namespace pt2cache::daemon
