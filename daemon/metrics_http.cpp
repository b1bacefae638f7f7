// SPDX-License-Identifier: MIT
#include "daemon/metrics_http.hpp"

#include <vector>

#include "daemon/context.hpp"
#include "daemon/log.hpp"
#include "daemon/metrics_text.hpp"
#include "daemon/socket_setup.hpp"

#include <fmt/format.h>

namespace pt2cache::daemon {

namespace {

using Tcp = asio::ip::tcp;

std::string response(std::string_view status, std::string_view content_type, std::string_view body,
                     std::string_view extra_headers = {}) {
    return fmt::format("HTTP/1.1 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n{}"
                       "Connection: close\r\n\r\n{}",
                       status, content_type, body.size(), extra_headers, body);
}

std::string plain(std::string_view status, std::string_view extra_headers = {}) {
    return response(status, "text/plain; charset=utf-8", fmt::format("{}\n", status),
                    extra_headers);
}

} // namespace

std::string metrics_http_response(std::string_view head, std::string (*render)(void*),
                                  void* state) {
    const auto line_end = head.find("\r\n");
    const auto line = head.substr(0, line_end);
    const auto first_space = line.find(' ');
    const auto second_space =
        first_space == std::string_view::npos ? first_space : line.find(' ', first_space + 1);
    if (second_space == std::string_view::npos ||
        !line.substr(second_space + 1).starts_with("HTTP/1.")) {
        return plain("400 Bad Request");
    }
    const auto method = line.substr(0, first_space);
    auto target = line.substr(first_space + 1, second_space - first_space - 1);
    if (method != "GET") {
        return plain("405 Method Not Allowed", "Allow: GET\r\n");
    }
    target = target.substr(0, target.find('?'));
    if (target != "/metrics") {
        return plain("404 Not Found");
    }
    return response("200 OK", "text/plain; version=0.0.4; charset=utf-8", render(state));
}

MetricsHttpServer::MetricsHttpServer(Context& context, const config::ListenAddress& address)
    : m_context(context)
    , m_acceptor(m_io) {
    boost::system::error_code ec;
    const auto ip = asio::ip::make_address(address.host, ec);
    if (ec) {
        throw Fatal(fmt::format("metrics.listen: bad address {}: {}", address.host, ec.message()));
    }
    const Tcp::endpoint endpoint(ip, address.port);
    m_acceptor.open(endpoint.protocol(), ec);
    if (!ec) {
        m_acceptor.set_option(Tcp::acceptor::reuse_address(true), ec);
    }
    if (!ec) {
        m_acceptor.bind(endpoint, ec);
    }
    if (!ec) {
        m_acceptor.listen(static_cast<int>(k_metrics_max_connections), ec);
    }
    if (ec) {
        throw Fatal(fmt::format("metrics.listen: cannot listen on {}:{}: {}", address.host,
                                address.port, ec.message()));
    }
    auto& log = logger("metrics");
    const auto shown = address.ipv6 ? fmt::format("[{}]:{}", address.host, address.port)
                                    : fmt::format("{}:{}", address.host, address.port);
    if (address.loopback) {
        log.info("serving GET /metrics on http://{}/metrics", shown);
    } else {
        log.warn("serving GET /metrics on the non-loopback address {}: anyone who can reach it "
                 "can read the cache's metrics",
                 shown);
    }
}

MetricsHttpServer::~MetricsHttpServer() {
    stop();
}

void MetricsHttpServer::start() {
    asio::co_spawn(m_io, accept_loop(), asio::detached);
    m_thread = std::thread([this] {
        try {
            m_io.run();
        } catch (const std::exception& e) {
            logger("metrics").error("metrics endpoint stopped: {}", e.what());
        }
    });
}

void MetricsHttpServer::stop() {
    m_io.stop();
    if (m_thread.joinable()) {
        m_thread.join();
    }
}

awaitable<void> MetricsHttpServer::accept_loop() {
    for (;;) {
        boost::system::error_code ec;
        auto socket = co_await m_acceptor.async_accept(asio::redirect_error(use_awaitable, ec));
        if (ec == asio::error::operation_aborted) {
            co_return;
        }
        if (ec) {
            // Out of descriptors and the like: wait a little rather than spin.
            logger("metrics").warn("accept failed: {}", ec.message());
            asio::steady_timer pause(m_io, std::chrono::milliseconds(100));
            co_await pause.async_wait(asio::redirect_error(use_awaitable, ec));
            continue;
        }
        if (m_connections >= k_metrics_max_connections) {
            logger("metrics").debug("{} connections open: closing a new one",
                                    k_metrics_max_connections);
            socket.close(ec);
            continue;
        }
        ++m_connections;
        asio::co_spawn(m_io, serve(std::move(socket)), asio::detached);
    }
}

awaitable<void> MetricsHttpServer::serve(Tcp::socket accepted) {
    struct Slot {
        std::size_t& count;
        ~Slot() { --count; }
    } slot{m_connections};

    // The deadline closes the socket, which ends any read or write in
    // progress; its handler shares the socket, as it may run after this ends.
    const auto shared = std::make_shared<Tcp::socket>(std::move(accepted));
    auto& socket = *shared;
    asio::steady_timer deadline(m_io);
    const auto arm = [&](std::chrono::seconds after) {
        deadline.expires_after(after);
        deadline.async_wait([shared](const boost::system::error_code& ec) {
            if (!ec) {
                boost::system::error_code ignored;
                shared->close(ignored);
            }
        });
    };
    arm(k_metrics_header_deadline);

    // On the heap, not in the coroutine frame: GCC 12 at -O1 (the sanitizer
    // builds) misreads a frame this large (-Wmismatched-new-delete).
    std::vector<char> buffer(k_metrics_max_header);
    std::size_t filled = 0;
    std::size_t head_end = std::string_view::npos;
    boost::system::error_code ec;
    while (head_end == std::string_view::npos && filled < buffer.size()) {
        const auto got = co_await socket.async_read_some(
            asio::buffer(buffer.data() + filled, buffer.size() - filled),
            asio::redirect_error(use_awaitable, ec));
        if (ec) {
            deadline.cancel();
            co_return; // peer left, or the deadline closed the socket
        }
        // The blank line may straddle reads: search from a little before.
        const std::size_t from = filled >= 3 ? filled - 3 : 0;
        filled += got;
        const auto at = std::string_view(buffer.data(), filled).find("\r\n\r\n", from);
        if (at != std::string_view::npos) {
            head_end = at + 4;
        }
    }
    std::string reply;
    if (head_end == std::string_view::npos) {
        reply = plain("431 Request Header Fields Too Large");
    } else {
        reply = metrics_http_response(
            std::string_view(buffer.data(), head_end),
            [](void* context) { return prometheus_text(*static_cast<Context*>(context)); },
            &m_context);
    }
    deadline.cancel();
    arm(k_metrics_write_deadline);
    co_await asio::async_write(socket, asio::buffer(reply),
                               asio::redirect_error(use_awaitable, ec));
    if (!ec) {
        socket.shutdown(Tcp::socket::shutdown_send, ec);
    }
    deadline.cancel();
    socket.close(ec);
}

} // namespace pt2cache::daemon
