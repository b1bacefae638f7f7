// SPDX-License-Identifier: MIT
#include "client/client.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <sys/socket.h>
#include <unistd.h>
#include <utility>

#include "client/socket.hpp"
#include "config/config.hpp"
#include "proto/bytes.hpp"
#include "proto/frame.hpp"
#include "proto/messages.hpp"

#include <fmt/format.h>

namespace pt2cache::client {

namespace {

using Clock = std::chrono::steady_clock;

#define PT2CACHE_SAME_STATUS(name)                                                                 \
    static_assert(static_cast<int>(Status::name) == static_cast<int>(proto::Status::name))
PT2CACHE_SAME_STATUS(ok);
PT2CACHE_SAME_STATUS(miss);
PT2CACHE_SAME_STATUS(not_stored);
PT2CACHE_SAME_STATUS(malformed);
PT2CACHE_SAME_STATUS(version_mismatch);
PT2CACHE_SAME_STATUS(unknown_op);
PT2CACHE_SAME_STATUS(key_too_long);
PT2CACHE_SAME_STATUS(value_too_large);
PT2CACHE_SAME_STATUS(bad_namespace);
PT2CACHE_SAME_STATUS(handshake_required);
PT2CACHE_SAME_STATUS(storage_error);
PT2CACHE_SAME_STATUS(unknown_token);
PT2CACHE_SAME_STATUS(internal);
PT2CACHE_SAME_STATUS(busy);
#undef PT2CACHE_SAME_STATUS

constexpr std::size_t k_read_buffer = 64u << 10;
// Reads at least this large go straight into their destination.
constexpr std::size_t k_direct_read = 16u << 10;
// A reply body's first allocation (Client::receive_body).
constexpr std::uint64_t k_first_body_step = 256u << 20;
// Error bodies are one str16.
constexpr std::uint64_t k_max_error_body = 2 + std::numeric_limits<std::uint16_t>::max();
constexpr std::uint64_t k_max_hello_body = 2 + 4 + 8 + 2 + 1 + 255;

tl::unexpected<Error> make_error(ErrorKind kind, std::string message,
                                 Status status = Status::internal) {
    return tl::unexpected(Error{kind, status, std::move(message)});
}

Error from_socket(socket::SocketError error) {
    const auto kind =
        error.failure == socket::Failure::timeout ? ErrorKind::timeout : ErrorKind::unreachable;
    return Error{kind, Status::internal, std::move(error.message)};
}

} // namespace

std::string_view status_name(Status status) {
    return proto::status_name(static_cast<proto::Status>(status));
}

std::string_view kind_name(ErrorKind kind) {
    switch (kind) {
    case ErrorKind::unreachable:
        return "unreachable";
    case ErrorKind::timeout:
        return "timeout";
    case ErrorKind::protocol:
        return "protocol";
    case ErrorKind::server:
        return "server";
    }
    return "unknown";
}

Client::Client(Options options)
    : m_options(std::move(options)) {
    if (m_options.socket_path.empty()) {
        m_options.socket_path = config::default_socket_path(config::process_environment());
    }
}

Client::~Client() {
    drop();
}

Client::Client(Client&& other) noexcept
    : m_options(std::move(other.m_options))
    , m_fd(std::exchange(other.m_fd, -1))
    , m_pid(other.m_pid)
    , m_next_id(other.m_next_id)
    , m_out(std::move(other.m_out))
    , m_retry_at(other.m_retry_at)
    , m_last_failure(std::move(other.m_last_failure))
    , m_max_value(other.m_max_value)
    , m_capabilities(other.m_capabilities)
    , m_server_name(std::move(other.m_server_name))
    , m_in(std::move(other.m_in))
    , m_in_pos(std::exchange(other.m_in_pos, 0))
    , m_in_end(std::exchange(other.m_in_end, 0)) {}

Client& Client::operator=(Client&& other) noexcept {
    if (this != &other) {
        drop();
        m_options = std::move(other.m_options);
        m_fd = std::exchange(other.m_fd, -1);
        m_pid = other.m_pid;
        m_next_id = other.m_next_id;
        m_out = std::move(other.m_out);
        m_retry_at = other.m_retry_at;
        m_last_failure = std::move(other.m_last_failure);
        m_max_value = other.m_max_value;
        m_capabilities = other.m_capabilities;
        m_server_name = std::move(other.m_server_name);
        m_in = std::move(other.m_in);
        m_in_pos = std::exchange(other.m_in_pos, 0);
        m_in_end = std::exchange(other.m_in_end, 0);
    }
    return *this;
}

const std::string& Client::socket_path() const {
    return m_options.socket_path;
}

// ---- connection ----

void Client::drop() {
    if (m_fd >= 0) {
        ::close(m_fd);
        m_fd = -1;
    }
    m_in_pos = m_in_end = 0;
}

Error Client::fail(Error error) {
    drop();
    m_retry_at = Clock::now() + m_options.retry_after;
    m_last_failure = error.message;
    return error;
}

tl::expected<void, Error> Client::connect() {
    return ensure_connected();
}

tl::expected<void, Error> Client::ensure_connected() {
    if (m_fd >= 0 && m_pid != ::getpid()) {
        // We are a fork()ed child: the connection, and its place in the reply
        // stream, belong to the parent. Closing our copy leaves it alone.
        drop();
    }
    if (m_fd >= 0 && m_in_pos == m_in_end && socket::peer_closed(m_fd)) {
        // The daemon closed this idle connection (it restarted, or exited
        // when idle): reconnect now rather than fail one call and back off.
        drop();
    }
    if (m_fd >= 0) {
        return {};
    }
    const auto now = Clock::now();
    if (now < m_retry_at) {
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(m_retry_at - now);
        return make_error(ErrorKind::unreachable,
                          fmt::format("pt2cached unavailable, not retrying for {} ms ({})",
                                      left.count(), m_last_failure));
    }
    const auto deadline = now + m_options.connect_timeout;
    auto fd = socket::connect_unix(m_options.socket_path, deadline);
    if (!fd) {
        return tl::unexpected(fail(from_socket(std::move(fd.error()))));
    }
    m_fd = *fd;
    m_pid = ::getpid();
    m_in.resize(k_read_buffer);
    m_in_pos = m_in_end = 0;
    if (auto ok = handshake(deadline); !ok) {
        return tl::unexpected(fail(std::move(ok.error())));
    }
    return {};
}

tl::expected<void, Error> Client::handshake(Clock::time_point deadline) {
    // Not in m_out: a request may already be encoded there.
    Bytes frame;
    const std::uint32_t id = m_next_id++;
    proto::encode_hello(frame, id,
                        proto::HelloRequest{proto::k_version,
                                            proto::capability::ttl | proto::capability::bundle |
                                                proto::capability::hash_files |
                                                proto::capability::cxx_lookup,
                                            m_options.client_name});
    if (auto sent = socket::send_all(m_fd, frame, {}, deadline); !sent) {
        // A refusing daemon may have closed before the HELLO went out: its
        // reason is still there to read.
        std::array<std::byte, 256> line{};
        const ssize_t got = ::recv(m_fd, line.data(), line.size(), MSG_DONTWAIT);
        if (got > 0 && line[0] == std::byte{'-'}) {
            return tl::unexpected(refusal(std::span(line).first(static_cast<std::size_t>(got))));
        }
        return tl::unexpected(from_socket(std::move(sent.error())));
    }
    auto reply = read_reply(proto::Op::hello, id, k_max_hello_body, deadline);
    if (!reply) {
        if (reply.error().status == Status::version_mismatch) {
            reply.error().kind = ErrorKind::protocol;
        }
        return tl::unexpected(std::move(reply.error()));
    }
    // The version comes first in every version's hello_response: check it
    // before the rest, which another version may lay out differently.
    proto::ByteReader version_reader(reply->body);
    const auto version = version_reader.integer<std::uint16_t>();
    if (version_reader.ok() && version != proto::k_version) {
        return make_error(ErrorKind::protocol,
                          fmt::format("client speaks protocol version {}, pt2cached at {} speaks "
                                      "version {}",
                                      proto::k_version, m_options.socket_path, version),
                          Status::version_mismatch);
    }
    auto hello = proto::parse_hello_response(reply->body);
    if (!hello) {
        return make_error(ErrorKind::protocol, "pt2cached sent a malformed HELLO response");
    }
    m_max_value = hello->max_value;
    m_capabilities = hello->capabilities;
    m_server_name = std::string(hello->server_name);
    return {};
}

// ---- frames ----

tl::expected<void, Error> Client::send(std::span<const std::byte> head,
                                       std::span<const std::byte> tail,
                                       Clock::time_point deadline) {
    if (auto ok = socket::send_all(m_fd, head, tail, deadline); !ok) {
        return tl::unexpected(fail(from_socket(std::move(ok.error()))));
    }
    return {};
}

tl::expected<void, Error> Client::receive(std::span<std::byte> out, Clock::time_point deadline) {
    std::size_t done = std::min(out.size(), m_in_end - m_in_pos);
    if (done > 0) {
        std::memcpy(out.data(), m_in.data() + m_in_pos, done);
        m_in_pos += done;
    }
    while (done < out.size()) {
        const bool direct = out.size() - done >= k_direct_read;
        auto got = direct ? socket::receive_some(m_fd, out.subspan(done), deadline)
                          : socket::receive_some(m_fd, m_in, deadline);
        if (!got) {
            return tl::unexpected(fail(from_socket(std::move(got.error()))));
        }
        if (direct) {
            done += *got;
            continue;
        }
        const std::size_t take = std::min(*got, out.size() - done);
        std::memcpy(out.data() + done, m_in.data(), take);
        done += take;
        m_in_pos = take;
        m_in_end = *got;
    }
    return {};
}

tl::expected<void, Error> Client::receive_body(Bytes& body, std::uint64_t length,
                                               Clock::time_point deadline) {
    // The buffer grows with the bytes that arrive, not with what the header
    // announces: a header that lies (up to max_value, 4 GiB) costs a
    // first step, not the whole allocation. The first step holds a
    // precompiled header's result (about 160 MB) without a copy.
    std::size_t filled = 0;
    while (filled < length) {
        const std::uint64_t step = std::max<std::uint64_t>(k_first_body_step, filled);
        const auto target = static_cast<std::size_t>(std::min(length, filled + step));
        if (filled > 0 && body.capacity() < length) {
            // Past the first step, the bytes are real: one allocation of
            // the whole (address space; pages are touched as they fill),
            // not a copy per doubling.
            body.reserve(static_cast<std::size_t>(length));
        }
        body.resize(target);
        if (auto ok = receive(std::span(body).subspan(filled), deadline); !ok) {
            return ok;
        }
        filled = target;
    }
    return {};
}

Error Client::refusal(std::span<const std::byte> head) {
    // A daemon over its connection limits answers as Redis does, with one
    // error line, and closes (docs/protocol.md, "Refusal").
    std::string line(reinterpret_cast<const char*>(head.data()) + 1, head.size() - 1);
    const std::size_t buffered = std::min<std::size_t>(m_in_end - m_in_pos, 200);
    line.append(reinterpret_cast<const char*>(m_in.data() + m_in_pos), buffered);
    line = line.substr(0, line.find('\r'));
    return Error{
        ErrorKind::unreachable, Status::internal,
        fmt::format("pt2cached at {} refused the connection: {}", m_options.socket_path, line)};
}

tl::expected<Client::Reply, Error> Client::read_reply(proto::Op op, std::uint32_t id,
                                                      std::uint64_t max_body,
                                                      Clock::time_point deadline) {
    std::array<std::byte, proto::k_header_size> head;
    if (auto ok = receive(head, deadline); !ok) {
        return tl::unexpected(std::move(ok.error()));
    }
    if (head[0] == std::byte{'-'}) {
        return tl::unexpected(fail(refusal(head)));
    }
    auto header = proto::decode_response_header(head);
    if (!header) {
        return tl::unexpected(
            fail(Error{ErrorKind::protocol, Status::internal,
                       fmt::format("bad reply from pt2cached: {}", header.error().message)}));
    }
    const auto status = static_cast<Status>(header->flags);
    const bool is_error = proto::is_error(header->status());
    // A frame with bad magic is answered under op 0 and id 0.
    const bool anonymous = is_error && static_cast<int>(header->op) == 0 && header->id == 0;
    if (!anonymous && (header->id != id || header->op != op)) {
        return tl::unexpected(fail(
            Error{ErrorKind::protocol, Status::internal,
                  fmt::format("reply {} #{} from pt2cached does not match request {} #{}",
                              proto::op_name(header->op), header->id, proto::op_name(op), id)}));
    }
    if (!is_error && header->flags > static_cast<std::uint8_t>(Status::not_stored)) {
        return tl::unexpected(
            fail(Error{ErrorKind::protocol, Status::internal,
                       fmt::format("unknown status 0x{:02x} from pt2cached", header->flags)}));
    }
    const std::uint64_t limit = is_error ? k_max_error_body : max_body;
    if (header->length > limit) {
        return tl::unexpected(
            fail(Error{ErrorKind::protocol, Status::internal,
                       fmt::format("{} reply of {} bytes from pt2cached exceeds the limit of {}",
                                   proto::op_name(op), header->length, limit)}));
    }
    Reply reply{status, {}};
    if (auto ok = receive_body(reply.body, header->length, deadline); !ok) {
        return tl::unexpected(std::move(ok.error()));
    }
    if (is_error) {
        if (proto::closes_connection(header->status())) {
            drop(); // the daemon closes it too; reconnect on the next call
        }
        return make_error(ErrorKind::server,
                          fmt::format("pt2cached: {}: {}", status_name(status),
                                      proto::parse_error_message(reply.body)),
                          status);
    }
    return reply;
}

std::uint32_t Client::begin_request() {
    m_out.clear();
    return m_next_id++;
}

tl::expected<Client::Reply, Error> Client::round_trip(proto::Op op, std::uint32_t id,
                                                      std::span<const std::byte> tail,
                                                      std::uint64_t max_body) {
    if (auto ok = ensure_connected(); !ok) {
        return tl::unexpected(std::move(ok.error()));
    }
    if (max_body == k_up_to_max_value) {
        max_body = m_max_value;
    }
    const auto deadline = Clock::now() + m_options.io_timeout;
    if (auto sent = socket::send_all(m_fd, m_out, tail, deadline); !sent) {
        // A daemon that refuses a request as soon as its header arrives (a
        // frame longer than daemon.max_inflight_bytes: BUSY) answers and
        // closes while the rest is still being sent: its reason is there to
        // read, and says more than "Broken pipe".
        if (sent.error().failure == socket::Failure::unreachable) {
            auto answer = read_reply(op, id, max_body, Clock::now());
            if (!answer && answer.error().kind == ErrorKind::server) {
                return answer;
            }
        }
        return tl::unexpected(fail(from_socket(std::move(sent.error()))));
    }
    return read_reply(op, id, max_body, deadline);
}

} // namespace pt2cache::client
