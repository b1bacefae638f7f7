// SPDX-License-Identifier: MIT
#include "daemon/store/remote/tls_transport.hpp"

#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <netinet/in.h>
#include <sys/socket.h>

#include <fmt/format.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

namespace pt2cache::daemon::store {

namespace {

// OpenSSL's queued errors of this thread, as one line (and the queue emptied).
std::string openssl_errors() {
    std::string text;
    while (const unsigned long code = ERR_get_error()) {
        char buffer[256];
        ERR_error_string_n(code, buffer, sizeof(buffer));
        text += text.empty() ? "" : "; ";
        text += buffer;
    }
    return text.empty() ? "unknown OpenSSL error" : text;
}

bool is_ip_literal(std::string_view host) {
    const std::string text(host);
    unsigned char address[sizeof(in6_addr)];
    return ::inet_pton(AF_INET, text.c_str(), address) == 1 ||
           ::inet_pton(AF_INET6, text.c_str(), address) == 1;
}

} // namespace

// The BIO's state: the socket, and whether it reached its end (BIO_eof).
struct TlsSocket {
    int fd;
    bool eof = false;
};

namespace {

// A socket BIO that writes with MSG_NOSIGNAL (OpenSSL's own uses write(),
// which raises SIGPIPE on a closed peer).
int socket_write(BIO* bio, const char* data, std::size_t size, std::size_t* written) {
    auto* socket = static_cast<TlsSocket*>(BIO_get_data(bio));
    BIO_clear_retry_flags(bio);
    for (;;) {
        const ssize_t sent = ::send(socket->fd, data, size, MSG_NOSIGNAL);
        if (sent >= 0) {
            *written = static_cast<std::size_t>(sent);
            return 1;
        }
        if (errno == EINTR) {
            continue;
        }
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            BIO_set_retry_write(bio);
        }
        return 0;
    }
}

int socket_read(BIO* bio, char* data, std::size_t size, std::size_t* got) {
    auto* socket = static_cast<TlsSocket*>(BIO_get_data(bio));
    BIO_clear_retry_flags(bio);
    for (;;) {
        const ssize_t received = ::recv(socket->fd, data, size, 0);
        if (received > 0) {
            *got = static_cast<std::size_t>(received);
            return 1;
        }
        if (received == 0) {
            socket->eof = true;
            return 0;
        }
        if (errno == EINTR) {
            continue;
        }
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            BIO_set_retry_read(bio);
        }
        return 0;
    }
}

long socket_ctrl(BIO* bio, int command, long, void*) {
    switch (command) {
    case BIO_CTRL_FLUSH:
        return 1;
    case BIO_CTRL_EOF:
        return static_cast<TlsSocket*>(BIO_get_data(bio))->eof ? 1 : 0;
    default:
        return 0;
    }
}

int socket_create(BIO* bio) {
    BIO_set_init(bio, 1);
    return 1;
}

const BIO_METHOD* socket_method() {
    static BIO_METHOD* const method = [] {
        BIO_METHOD* made =
            BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "pt2cache socket");
        if (made != nullptr) {
            BIO_meth_set_write_ex(made, socket_write);
            BIO_meth_set_read_ex(made, socket_read);
            BIO_meth_set_ctrl(made, socket_ctrl);
            BIO_meth_set_create(made, socket_create);
        }
        return made;
    }();
    return method;
}

} // namespace

TlsContext::TlsContext(ssl_ctx_st* ctx, TlsOptions options)
    : m_ctx(ctx)
    , m_options(std::move(options)) {}

TlsContext::~TlsContext() {
    SSL_CTX_free(m_ctx);
}

tl::expected<std::shared_ptr<const TlsContext>, std::string>
TlsContext::make(const TlsOptions& options) {
    ERR_clear_error();
    SSL_CTX* raw = SSL_CTX_new(TLS_client_method());
    if (raw == nullptr) {
        return tl::make_unexpected(fmt::format("SSL_CTX_new: {}", openssl_errors()));
    }
    std::shared_ptr<const TlsContext> context(new TlsContext(raw, options));
    const auto failed = [](std::string_view what) {
        return tl::make_unexpected(fmt::format("{}: {}", what, openssl_errors()));
    };
    if (SSL_CTX_set_min_proto_version(raw, TLS1_2_VERSION) != 1) {
        return failed("cannot require TLS 1.2");
    }
    // Renegotiation is refused: it could stretch an exchange past its
    // deadline and has a history of attacks. A truncated stream is caught by
    // the RESP reader (a close mid-reply), so a missing close_notify is a
    // plain close.
    SSL_CTX_set_options(raw, SSL_OP_NO_RENEGOTIATION | SSL_OP_IGNORE_UNEXPECTED_EOF);
    SSL_CTX_set_mode(raw, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    // A read returns after each record that holds no application data (a
    // TLS 1.3 KeyUpdate or session ticket), so that the caller sees its
    // deadline between records: with the default auto-retry, a server
    // streaming such messages kept one SSL_read busy for as long as it
    // wished (300,000 KeyUpdates held a 100 ms exchange for 2 s).
    SSL_CTX_clear_mode(raw, SSL_MODE_AUTO_RETRY);
    SSL_CTX_set_verify(raw, options.verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, nullptr);
    if (!options.ca_file.empty()) {
        if (SSL_CTX_load_verify_locations(raw, options.ca_file.c_str(), nullptr) != 1) {
            return failed(fmt::format("cannot load the CA file {}", options.ca_file));
        }
    } else if (SSL_CTX_set_default_verify_paths(raw) != 1) {
        return failed("cannot load the system's CA certificates");
    }
    if (options.cert_file.empty() && !options.key_file.empty()) {
        return tl::make_unexpected(fmt::format(
            "remote.tls_key_file {} given without remote.tls_cert_file", options.key_file));
    }
    if (!options.cert_file.empty()) {
        if (SSL_CTX_use_certificate_chain_file(raw, options.cert_file.c_str()) != 1) {
            return failed(fmt::format("cannot load the client certificate {}", options.cert_file));
        }
        const auto& key = options.key_file.empty() ? options.cert_file : options.key_file;
        if (SSL_CTX_use_PrivateKey_file(raw, key.c_str(), SSL_FILETYPE_PEM) != 1) {
            return failed(fmt::format("cannot load the client key {}", key));
        }
        if (SSL_CTX_check_private_key(raw) != 1) {
            return failed(fmt::format("the key {} does not match the certificate {}", key,
                                      options.cert_file));
        }
    }
    return context;
}

TlsSession::TlsSession(ssl_st* ssl, std::unique_ptr<TlsSocket> socket)
    : m_ssl(ssl)
    , m_socket(std::move(socket)) {}

TlsSession::~TlsSession() {
    SSL_free(m_ssl); // frees the BIO too; the socket is the connection's
}

tl::expected<std::unique_ptr<TlsSession>, std::string>
TlsSession::make(const TlsContext& context, int fd, std::string_view host) {
    ERR_clear_error();
    const BIO_METHOD* method = socket_method();
    if (method == nullptr) {
        return tl::make_unexpected(fmt::format("BIO_meth_new: {}", openssl_errors()));
    }
    SSL* ssl = SSL_new(context.native());
    if (ssl == nullptr) {
        return tl::make_unexpected(fmt::format("SSL_new: {}", openssl_errors()));
    }
    std::unique_ptr<TlsSession> session(
        new TlsSession(ssl, std::make_unique<TlsSocket>(TlsSocket{fd})));
    BIO* bio = BIO_new(method);
    if (bio == nullptr) {
        return tl::make_unexpected(fmt::format("BIO_new: {}", openssl_errors()));
    }
    BIO_set_data(bio, session->m_socket.get());
    SSL_set_bio(ssl, bio, bio); // the SSL owns it from here
    SSL_set_connect_state(ssl);

    const std::string name(context.server_name_for(host));
    if (is_ip_literal(name)) {
        // No SNI for an address (RFC 6066); the certificate needs an IP SAN.
        if (context.options().verify &&
            X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name.c_str()) != 1) {
            return tl::make_unexpected(
                fmt::format("bad IP address {}: {}", name, openssl_errors()));
        }
    } else {
        if (SSL_set_tlsext_host_name(ssl, name.c_str()) != 1) {
            return tl::make_unexpected(
                fmt::format("bad server name {}: {}", name, openssl_errors()));
        }
        if (context.options().verify) {
            SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
            if (SSL_set1_host(ssl, name.c_str()) != 1) {
                return tl::make_unexpected(
                    fmt::format("bad server name {}: {}", name, openssl_errors()));
            }
        }
    }
    return session;
}

TlsIo TlsSession::result(int ret, std::string_view what) {
    const int code = SSL_get_error(m_ssl, ret);
    switch (code) {
    case SSL_ERROR_NONE:
        return TlsIo{TlsIo::Status::done, ret > 0 ? static_cast<std::size_t>(ret) : 0, {}};
    case SSL_ERROR_WANT_READ:
        return TlsIo{TlsIo::Status::want_read, 0, {}};
    case SSL_ERROR_WANT_WRITE:
        return TlsIo{TlsIo::Status::want_write, 0, {}};
    case SSL_ERROR_ZERO_RETURN:
        return TlsIo{TlsIo::Status::closed, 0, {}};
    case SSL_ERROR_SYSCALL:
        if (errno == 0 || m_socket->eof) {
            ERR_clear_error();
            return TlsIo{TlsIo::Status::closed, 0, {}};
        }
        ERR_clear_error();
        return TlsIo{TlsIo::Status::failed, 0, fmt::format("{}: {}", what, std::strerror(errno))};
    default:
        break;
    }
    const long verified = SSL_get_verify_result(m_ssl);
    if (verified != X509_V_OK) {
        ERR_clear_error();
        return TlsIo{TlsIo::Status::failed, 0,
                     fmt::format("{}: certificate verification failed: {}", what,
                                 X509_verify_cert_error_string(verified))};
    }
    return TlsIo{TlsIo::Status::failed, 0, fmt::format("{}: {}", what, openssl_errors())};
}

TlsIo TlsSession::handshake() {
    ERR_clear_error();
    errno = 0;
    const int ret = SSL_do_handshake(m_ssl);
    auto io = result(ret, "TLS handshake");
    if (io.status == TlsIo::Status::closed) {
        io = TlsIo{TlsIo::Status::failed, 0, "TLS handshake: the server closed the connection"};
    }
    return io;
}

TlsIo TlsSession::read(std::span<std::byte> into) {
    ERR_clear_error();
    errno = 0;
    std::size_t got = 0;
    const int ret = SSL_read_ex(m_ssl, into.data(), into.size(), &got);
    if (ret == 1) {
        return TlsIo{TlsIo::Status::done, got, {}};
    }
    return result(ret, "TLS read");
}

TlsIo TlsSession::write(std::span<const std::byte> data) {
    ERR_clear_error();
    errno = 0;
    std::size_t sent = 0;
    const int ret = SSL_write_ex(m_ssl, data.data(), data.size(), &sent);
    if (ret == 1) {
        return TlsIo{TlsIo::Status::done, sent, {}};
    }
    return result(ret, "TLS write");
}

} // namespace pt2cache::daemon::store
