// SPDX-License-Identifier: MIT
// TLS under RedisConnection (OpenSSL): one TlsContext (SSL_CTX) per endpoint
// configuration, shared by every connection of its pools (and by the per-node
// endpoints of a cluster, which copy the endpoint), and one TlsSession per
// connection, over the connection's non-blocking socket.
//
// Policy (docs/remote.md): TLS 1.2 or later; renegotiation refused
// (SSL_OP_NO_RENEGOTIATION); the peer's certificate chain verified against
// `ca_file` (else the system's CAs) and its name against the server name
// (SNI and host check; an IP literal is checked against the IP SANs), unless
// `verify` is false. Never blocks: every call does what the socket allows now
// and says what to wait for; the caller polls within its own deadline. A read
// returns after a record without application data (auto-retry is off).
// Sockets are written with MSG_NOSIGNAL: a closed peer is an error, never a
// SIGPIPE.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include <tl/expected.hpp>

struct ssl_ctx_st;
struct ssl_st;

namespace pt2cache::daemon::store {

struct TlsOptions {
    std::string ca_file;     // PEM CA bundle; empty: the system's default CAs
    std::string cert_file;   // PEM client certificate chain (mutual TLS); empty: none
    std::string key_file;    // its private key; empty: read from cert_file
    std::string server_name; // SNI and the name verified; empty: the endpoint's host
    bool verify = true;      // false: any certificate is accepted
};

// An SSL_CTX built from TlsOptions. Thread-safe once made.
class TlsContext {
public:
    // Loads the CA bundle and the client certificate and key. The error names
    // the file and OpenSSL's reason.
    static tl::expected<std::shared_ptr<const TlsContext>, std::string>
    make(const TlsOptions& options);

    ~TlsContext();
    TlsContext(const TlsContext&) = delete;
    TlsContext& operator=(const TlsContext&) = delete;

    const TlsOptions& options() const { return m_options; }
    // The name sent as SNI and verified for an endpoint at `host`.
    std::string_view server_name_for(std::string_view host) const {
        return m_options.server_name.empty() ? host : std::string_view(m_options.server_name);
    }
    ssl_ctx_st* native() const { return m_ctx; }

private:
    TlsContext(ssl_ctx_st* ctx, TlsOptions options);

    ssl_ctx_st* m_ctx;
    TlsOptions m_options;
};

// What one step of a session did.
struct TlsIo {
    enum class Status {
        done,       // `bytes` moved (0 for a finished handshake)
        want_read,  // wait until the socket is readable, then call again
        want_write, // wait until the socket is writable, then call again (same arguments)
        closed,     // the peer closed the connection
        failed,     // `error` says why; the session is unusable
    };
    Status status = Status::done;
    std::size_t bytes = 0;
    std::string error;
};

struct TlsSocket; // the socket under a session's BIO

// One TLS session over a connected, non-blocking socket (not owned). Not
// thread-safe.
class TlsSession {
public:
    // `host`: the endpoint's host (the server name unless the context names one).
    static tl::expected<std::unique_ptr<TlsSession>, std::string>
    make(const TlsContext& context, int fd, std::string_view host);

    ~TlsSession();
    TlsSession(const TlsSession&) = delete;
    TlsSession& operator=(const TlsSession&) = delete;

    // One step of the client handshake. A failure names the reason (for a
    // certificate, the verification error).
    TlsIo handshake();
    // Up to into.size() bytes of application data; done with bytes > 0, or
    // what to wait for. Data OpenSSL has buffered is returned before the
    // socket is read, so callers never poll while bytes are pending.
    TlsIo read(std::span<std::byte> into);
    // Some of `data` (done, bytes > 0), or what to wait for.
    TlsIo write(std::span<const std::byte> data);

private:
    TlsSession(ssl_st* ssl, std::unique_ptr<TlsSocket> socket);
    TlsIo result(int ret, std::string_view what);

    ssl_st* m_ssl;
    std::unique_ptr<TlsSocket> m_socket;
};

} // namespace pt2cache::daemon::store
