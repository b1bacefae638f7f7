// SPDX-License-Identifier: MIT
//
// What the client does when the other end misbehaves. pt2cached never sends
// these, so a scripted peer on a temporary socket plays the daemon: another
// protocol version, crossed ids, oversized or garbled replies, silence.
#include <array>
#include <atomic>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <sys/socket.h>
#include <sys/un.h>
#include <thread>
#include <unistd.h>

#include "client/client.hpp"
#include "proto/frame.hpp"
#include "proto/messages.hpp"
#include "tests/client/helpers.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

using namespace pt2cache;
using namespace std::chrono_literals;

namespace {

struct Request {
    proto::Header header;
    std::vector<std::byte> body;
};

bool read_exact(int fd, std::byte* data, std::size_t size) {
    while (size > 0) {
        const ssize_t got = ::recv(fd, data, size, 0);
        if (got <= 0) {
            return false;
        }
        data += got;
        size -= static_cast<std::size_t>(got);
    }
    return true;
}

std::optional<Request> read_request(int fd) {
    std::array<std::byte, proto::k_header_size> head;
    if (!read_exact(fd, head.data(), head.size())) {
        return std::nullopt;
    }
    auto header = proto::decode_request_header(head, proto::Limits{});
    if (!header) {
        return std::nullopt;
    }
    Request request{*header, std::vector<std::byte>(header->length)};
    if (!read_exact(fd, request.body.data(), request.body.size())) {
        return std::nullopt;
    }
    return request;
}

void write_all(int fd, const std::vector<std::byte>& data) {
    std::size_t done = 0;
    while (done < data.size()) {
        const ssize_t sent = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
        if (sent <= 0) {
            return;
        }
        done += static_cast<std::size_t>(sent);
    }
}

// Answers HELLO normally (announcing `max_value`); false if none came.
bool hello(int fd, std::uint64_t max_value = 1u << 20) {
    auto request = read_request(fd);
    if (!request || request->header.op != proto::Op::hello) {
        return false;
    }
    std::vector<std::byte> out;
    proto::HelloResponse response;
    response.max_value = max_value;
    response.server_name = "scripted";
    proto::encode_hello_response(out, request->header.id, response);
    write_all(fd, out);
    return true;
}

// Accepts connections on a temporary socket and runs `script` on each, on a
// thread of its own.
class ScriptedPeer {
public:
    explicit ScriptedPeer(std::function<void(int fd)> script)
        : m_script(std::move(script)) {
        m_listener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_un address{};
        address.sun_family = AF_UNIX;
        const std::string path = socket_path();
        std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
        REQUIRE(::bind(m_listener, reinterpret_cast<const sockaddr*>(&address), sizeof address) ==
                0);
        REQUIRE(::listen(m_listener, 8) == 0);
        m_thread = std::thread([this] {
            for (;;) {
                const int fd = ::accept4(m_listener, nullptr, nullptr, SOCK_CLOEXEC);
                if (fd < 0) {
                    return;
                }
                ++m_connections;
                m_script(fd);
                ::close(fd);
            }
        });
    }
    ~ScriptedPeer() {
        ::shutdown(m_listener, SHUT_RDWR);
        m_thread.join();
        ::close(m_listener);
    }

    std::string socket_path() const { return (m_dir / "s").string(); }
    int connections() const { return m_connections; }

    client::Options options() const {
        client::Options options;
        options.socket_path = socket_path();
        options.io_timeout = 500ms;
        options.retry_after = 0ms;
        return options;
    }

private:
    tests::TempDir m_dir;
    std::function<void(int fd)> m_script;
    int m_listener = -1;
    std::atomic<int> m_connections{0};
    std::thread m_thread;
};

} // namespace

TEST_CASE("a daemon speaking another version is a protocol error", "[client][errors]") {
    SECTION("HELLO response with version 2") {
        ScriptedPeer peer([](int fd) {
            auto request = read_request(fd);
            std::vector<std::byte> out;
            proto::HelloResponse response;
            response.version = 2;
            proto::encode_hello_response(out, request->header.id, response);
            write_all(fd, out);
        });
        client::Client client(peer.options());
        auto result = client.connect();
        REQUIRE_FALSE(result);
        CHECK(result.error().kind == client::ErrorKind::protocol);
        CHECK(result.error().status == client::Status::version_mismatch);
        CHECK_THAT(result.error().message,
                   Catch::Contains("version 1") && Catch::Contains("version 2"));
        CHECK_FALSE(client.connected());
    }
    SECTION("VERSION_MISMATCH status") {
        ScriptedPeer peer([](int fd) {
            auto request = read_request(fd);
            std::vector<std::byte> out;
            proto::encode_error(out, proto::Op::hello, request->header.id,
                                {proto::Status::version_mismatch,
                                 "client speaks protocol version 1, pt2cached speaks version 3"});
            write_all(fd, out);
        });
        client::Client client(peer.options());
        auto result = client.get("pgo", "k");
        REQUIRE_FALSE(result);
        CHECK(result.error().kind == client::ErrorKind::protocol);
        CHECK_THAT(result.error().message, Catch::Contains("version 3"));
    }
}

TEST_CASE("replies that do not fit are refused", "[client][errors]") {
    enum class Fault { wrong_id, wrong_op, too_long, bad_magic, unknown_status };
    const Fault fault = GENERATE(Fault::wrong_id, Fault::wrong_op, Fault::too_long,
                                 Fault::bad_magic, Fault::unknown_status);
    ScriptedPeer peer([fault](int fd) {
        if (!hello(fd, 16)) {
            return;
        }
        auto request = read_request(fd);
        if (!request) {
            return;
        }
        std::vector<std::byte> out;
        const auto id = request->header.id;
        switch (fault) {
        case Fault::wrong_id:
            proto::encode_response(out, proto::Op::get, id + 1, proto::Status::miss);
            break;
        case Fault::wrong_op:
            proto::encode_response(out, proto::Op::put, id, proto::Status::miss);
            break;
        case Fault::too_long: // over the announced max_value of 16
            proto::encode_response_header(out, proto::Op::get, id, proto::Status::ok, 17);
            out.resize(out.size() + 17);
            break;
        case Fault::bad_magic:
            proto::encode_response(out, proto::Op::get, id, proto::Status::miss);
            out[0] = std::byte{'H'};
            break;
        case Fault::unknown_status:
            proto::encode_response(out, proto::Op::get, id, static_cast<proto::Status>(0x07));
            break;
        }
        write_all(fd, out);
        // Hold the connection open: the client must not wait for more.
        std::array<std::byte, 1> more;
        read_exact(fd, more.data(), more.size());
    });
    client::Client client(peer.options());
    const auto start = std::chrono::steady_clock::now();
    auto result = client.get("pgo", "k");
    REQUIRE_FALSE(result);
    CHECK(result.error().kind == client::ErrorKind::protocol);
    CHECK_FALSE(client.connected());
    CHECK(std::chrono::steady_clock::now() - start < 400ms);
}

namespace {

// A line of /proc/self/status ("VmHWM", "VmRSS") in bytes; 0 if absent.
std::uint64_t status_bytes(std::string_view field) {
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line)) {
        if (line.starts_with(field) && line.size() > field.size() && line[field.size()] == ':') {
            return std::stoull(line.substr(field.size() + 1)) << 10;
        }
    }
    return 0;
}

} // namespace

TEST_CASE("a reply body's buffer grows with its bytes, not its header", "[client][errors]") {
    // The header announces 3 GiB (within the announced max_value), then 1 MiB
    // arrives and the peer goes silent: the client times out having
    // allocated its first step, not 3 GiB.
    constexpr std::uint64_t announced = 3ull << 30;
    ScriptedPeer peer([](int fd) {
        if (!hello(fd, announced)) {
            return;
        }
        auto request = read_request(fd);
        if (!request) {
            return;
        }
        std::vector<std::byte> out;
        proto::encode_response_header(out, proto::Op::get, request->header.id, proto::Status::ok,
                                      announced);
        out.resize(out.size() + (1u << 20), std::byte{'x'});
        write_all(fd, out);
        std::array<std::byte, 1> more;
        read_exact(fd, more.data(), more.size());
    });
    client::Client client(peer.options());
    REQUIRE(client.connect());
    // Resets VmHWM, the peak resident size, to the current one.
    std::ofstream("/proc/self/clear_refs") << "5";
    const std::uint64_t before = status_bytes("VmRSS");
    REQUIRE(before > 0);
    auto result = client.get("pgo", "k");
    REQUIRE_FALSE(result);
    CHECK(result.error().kind == client::ErrorKind::timeout);
    const std::uint64_t peak = status_bytes("VmHWM");
    INFO("resident before " << before << " bytes, peak " << peak);
    CHECK(peak < before + (1ull << 30));
}

TEST_CASE("a silent daemon times out", "[client][errors]") {
    ScriptedPeer peer([](int fd) {
        if (hello(fd)) {
            std::array<std::byte, 4096> sink;
            while (read_exact(fd, sink.data(), 1)) {
            }
        }
    });
    auto options = peer.options();
    options.io_timeout = 200ms;
    client::Client client(options);
    REQUIRE(client.connect());
    const auto start = std::chrono::steady_clock::now();
    auto result = client.exists("pgo", "k");
    const auto elapsed = std::chrono::steady_clock::now() - start;
    REQUIRE_FALSE(result);
    CHECK(result.error().kind == client::ErrorKind::timeout);
    CHECK(elapsed >= 190ms);
    CHECK(elapsed < 1s);
    CHECK_FALSE(client.connected());
}

TEST_CASE("a daemon that hangs up is unreachable", "[client][errors]") {
    // Reads the first request, then hangs up without answering.
    ScriptedPeer peer([](int fd) {
        if (hello(fd)) {
            read_request(fd);
        }
    });
    client::Client client(peer.options());
    REQUIRE(client.connect());
    auto result = client.get("pgo", "k");
    REQUIRE_FALSE(result);
    CHECK(result.error().kind == client::ErrorKind::unreachable);
    // retry_after is 0: the next call reconnects (and fails the same way).
    CHECK_FALSE(client.get("pgo", "k"));
    CHECK(peer.connections() == 2);
}

TEST_CASE("an error status that keeps the connection keeps it", "[client][errors]") {
    ScriptedPeer peer([](int fd) {
        if (!hello(fd)) {
            return;
        }
        while (auto request = read_request(fd)) {
            std::vector<std::byte> out;
            if (request->header.op == proto::Op::get) {
                proto::encode_error(out, proto::Op::get, request->header.id,
                                    {proto::Status::storage_error, "disk on fire"});
            } else {
                proto::encode_response(out, request->header.op, request->header.id,
                                       proto::Status::ok, request->body);
            }
            write_all(fd, out);
        }
    });
    client::Client client(peer.options());
    auto result = client.get("pgo", "k");
    REQUIRE_FALSE(result);
    CHECK(result.error().kind == client::ErrorKind::server);
    CHECK(result.error().status == client::Status::storage_error);
    CHECK_THAT(result.error().message, Catch::Contains("disk on fire"));
    CHECK(client.connected());
    CHECK(client.ping());
    CHECK(peer.connections() == 1);
}
