// SPDX-License-Identifier: MIT
// TLS transport deadlines (a silent server, one flooding post-handshake
// messages) and configuration errors (the TLS cases against a real
// redis-server are in tests/daemon/remote/test_remote_tls.py), and the
// entry signer: the docs/remote.md format (a known-answer vector computed
// independently with Python's hmac), tampering, rotation, key file checks.
#include <atomic>
#include <chrono>
#include <fstream>
#include <future>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/store/remote/entry_signing.hpp"
#include "daemon/store/remote/redis_context.hpp"
#include "daemon/store/remote/tls_transport.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

using namespace pt2cache::daemon::store;
using namespace std::chrono_literals;
using pt2cache::tests::TempDir;

namespace {

// A TCP listener on 127.0.0.1 that never accepts: connects succeed (the
// kernel completes them), and nothing is ever said.
class SilentListener {
public:
    SilentListener() {
        m_fd = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in address{};
        address.sin_family = AF_INET;
        address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        REQUIRE(::bind(m_fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
        REQUIRE(::listen(m_fd, 16) == 0);
        socklen_t size = sizeof(address);
        REQUIRE(::getsockname(m_fd, reinterpret_cast<sockaddr*>(&address), &size) == 0);
        m_port = ntohs(address.sin_port);
    }
    ~SilentListener() { ::close(m_fd); }
    std::uint16_t port() const { return m_port; }

private:
    int m_fd = -1;
    std::uint16_t m_port = 0;
};

// A TLS 1.3 server on 127.0.0.1 that completes one handshake (a throwaway
// self-signed certificate), answers the client's setup, then, once told to,
// sends `updates` KeyUpdate messages as fast as the socket takes them and
// never answers again: each costs the client a key derivation, and they are
// made before the flood starts, so the client cannot keep up. Every wait is
// bounded (5 s).
class KeyUpdateFlood {
public:
    explicit KeyUpdateFlood(std::size_t updates) {
        m_listener = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in address{};
        address.sin_family = AF_INET;
        address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        REQUIRE(::bind(m_listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
        REQUIRE(::listen(m_listener, 4) == 0);
        socklen_t size = sizeof(address);
        REQUIRE(::getsockname(m_listener, reinterpret_cast<sockaddr*>(&address), &size) == 0);
        m_port = ntohs(address.sin_port);
        m_thread = std::async(std::launch::async, [this, updates] { return serve(updates); });
    }
    ~KeyUpdateFlood() {
        m_go.store(true);
        if (m_thread.valid()) {
            m_thread.wait();
        }
        ::close(m_listener);
    }
    std::uint16_t port() const { return m_port; }
    // Blocks until the updates are made (false: the server failed first).
    bool ready() { return m_ready.get_future().get(); }
    void flood() { m_go.store(true); }
    // How many bytes of updates the server made; once: how many it sent
    // (waits for the server to finish).
    std::size_t made() const { return m_made; }
    std::size_t sent() { return m_thread.get(); }

private:
    std::size_t serve(std::size_t updates) {
        bool told = false;
        const auto tell = [&](bool ok) {
            if (!told) {
                told = true;
                m_ready.set_value(ok);
            }
            return 0;
        };
        pollfd listening{m_listener, POLLIN, 0};
        if (::poll(&listening, 1, 5000) != 1) {
            return tell(false);
        }
        const int fd = ::accept(m_listener, nullptr, nullptr);
        const timeval bound{5, 0};
        ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &bound, sizeof bound);
        ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &bound, sizeof bound);
        EVP_PKEY* key = EVP_EC_gen("P-256");
        X509* cert = X509_new();
        X509_set_version(cert, 2);
        ASN1_INTEGER_set(X509_get_serialNumber(cert), 1);
        X509_gmtime_adj(X509_getm_notBefore(cert), 0);
        X509_gmtime_adj(X509_getm_notAfter(cert), 3600);
        X509_set_pubkey(cert, key);
        X509_NAME_add_entry_by_txt(X509_get_subject_name(cert), "CN", MBSTRING_ASC,
                                   reinterpret_cast<const unsigned char*>("127.0.0.1"), -1, -1, 0);
        X509_set_issuer_name(cert, X509_get_subject_name(cert));
        X509_sign(cert, key, EVP_sha256());
        SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
        SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
        SSL_CTX_use_certificate(ctx, cert);
        SSL_CTX_use_PrivateKey(ctx, key);
        SSL* ssl = SSL_new(ctx);
        SSL_set_fd(ssl, fd);
        std::size_t sent = 0;
        char command[256];
        // The setup (CLIENT SETNAME) gets its +OK; then the updates are made
        // into memory, and sent when the client waits for its next reply.
        if (SSL_accept(ssl) == 1 && SSL_read(ssl, command, sizeof command) > 0 &&
            SSL_write(ssl, "+OK\r\n", 5) == 5) {
            BIO* memory = BIO_new(BIO_s_mem());
            SSL_set0_wbio(ssl, memory);
            for (std::size_t i = 0; i < updates; ++i) {
                SSL_key_update(ssl, SSL_KEY_UPDATE_NOT_REQUESTED);
                SSL_do_handshake(ssl);
            }
            char* bytes = nullptr;
            const auto size = static_cast<std::size_t>(BIO_get_mem_data(memory, &bytes));
            m_made = size;
            tell(true);
            const auto until = std::chrono::steady_clock::now() + 5s;
            while (!m_go.load() && std::chrono::steady_clock::now() < until) {
                std::this_thread::sleep_for(1ms);
            }
            while (sent < size) {
                const auto n = ::send(fd, bytes + sent, size - sent, MSG_NOSIGNAL);
                if (n <= 0) {
                    break; // the client closed, or 5 s without progress
                }
                sent += static_cast<std::size_t>(n);
            }
        }
        tell(false);
        SSL_free(ssl);
        SSL_CTX_free(ctx);
        X509_free(cert);
        EVP_PKEY_free(key);
        ::close(fd);
        return sent;
    }

    int m_listener = -1;
    std::uint16_t m_port = 0;
    std::atomic<bool> m_go{false};
    std::promise<bool> m_ready;
    std::size_t m_made = 0;
    std::future<std::size_t> m_thread;
};

// rediss://127.0.0.1:PORT, any certificate accepted.
RedisEndpoint unverified_tls_endpoint(std::uint16_t port, Milliseconds connect, Milliseconds op) {
    TlsOptions options;
    options.verify = false;
    auto context = TlsContext::make(options);
    REQUIRE(context);
    RedisEndpoint endpoint;
    endpoint.host = "127.0.0.1";
    endpoint.port = port;
    endpoint.connect_timeout = connect;
    endpoint.op_timeout = op;
    endpoint.tls = *context;
    return endpoint;
}

constexpr std::string_view k_key_a =
    "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
constexpr std::string_view k_key_b =
    "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";

EntrySigner signer_of(std::string_view text) {
    auto signer = EntrySigner::parse(text, "test");
    REQUIRE(signer);
    return std::move(*signer);
}

} // namespace

TEST_CASE("a TLS handshake with a silent server ends at the deadline", "[store][tls]") {
    SilentListener listener;
    const auto endpoint = unverified_tls_endpoint(listener.port(), 200ms, 300ms);
    CHECK(endpoint.describe() == "rediss://127.0.0.1:" + std::to_string(listener.port()));

    const auto started = std::chrono::steady_clock::now();
    auto connection = RedisConnection::open(endpoint);
    const auto took = std::chrono::steady_clock::now() - started;
    REQUIRE_FALSE(connection);
    CHECK(connection.error().kind == RedisErrorKind::timeout);
    CHECK(connection.error().message.find("TLS handshake: no answer within") != std::string::npos);
    CHECK(took >= 290ms);
    CHECK(took < 300ms + 200ms + 250ms); // op + connect timeouts, and scheduling slack

    // An abort flag cuts it short.
    std::atomic<bool> abort{true};
    auto aborted = RedisConnection::open(endpoint, std::chrono::steady_clock::now() + 10s, &abort);
    REQUIRE_FALSE(aborted);
    CHECK(aborted.error().kind == RedisErrorKind::aborted);
}

TEST_CASE("a TLS server flooding post-handshake messages is cut at the deadline", "[store][tls]") {
    // 150,000 updates (about 4 MB) take the client over half a second to
    // process; the exchange gets 100 ms.
    KeyUpdateFlood server(150'000);
    auto connection = RedisConnection::open(unverified_tls_endpoint(server.port(), 2s, 2s));
    REQUIRE(connection);
    REQUIRE(server.ready());

    const RedisCommand ping{{"PING"}};
    const auto started = std::chrono::steady_clock::now();
    server.flood();
    auto reply = connection->exchange(std::span(&ping, 1), started + 100ms);
    const auto took = std::chrono::steady_clock::now() - started;
    REQUIRE_FALSE(reply);
    CHECK(reply.error().kind == RedisErrorKind::timeout);
    // 250 ms: scheduling slack on a loaded machine.
    CHECK(took < 100ms + 250ms);
    connection = tl::make_unexpected(reply.error()); // closes the socket
    // The flood was real: more was made than the client could have taken.
    const auto sent = server.sent();
    INFO("made " << server.made() << " bytes, sent " << sent);
    CHECK(server.made() > 3'000'000);
}

TEST_CASE("TLS configuration errors name the file", "[store][tls]") {
    TempDir dir;
    TlsOptions options;
    options.ca_file = (dir / "missing.pem").string();
    auto missing = TlsContext::make(options);
    REQUIRE_FALSE(missing);
    CHECK(missing.error().find("cannot load the CA file " + options.ca_file) == 0);

    TlsOptions key_only;
    key_only.key_file = "/nonexistent.key";
    auto lone_key = TlsContext::make(key_only);
    REQUIRE_FALSE(lone_key);
    CHECK(lone_key.error().find("without remote.tls_cert_file") != std::string::npos);
}

TEST_CASE("entry signatures: the documented format", "[store][signing]") {
    const auto signer = signer_of(std::string(k_key_a) + "\n");
    const std::string key = "pt2:fx-graph-v1::fabc:c1";
    // hmac.new(bytes(range(32)), b"pt2cache-sig-v1\0" + len(key).to_bytes(8, "big") + key
    //          + b"hello", sha256); key id: sha256(b"pt2cache-key-id-v1\0" + key)[:4].
    const std::string expected =
        "v1:49cc93c9:fe9d180121654b3f2bbde983545d8ec4399bbeae6fc6ad26ab945661f9e69cd0";
    CHECK(signer.sign(key, "hello") == expected);
    CHECK(signer.sign(key, "hello").size() == EntrySigner::k_signature_size);
    CHECK(signer.signing_key_id() == "49cc93c9");
    CHECK(signer.verify(key, "hello", expected));
    CHECK(signature_key(key) == "pt2sig:{pt2:fx-graph-v1::fabc:c1}");
    CHECK(signature_shares_slot(key));
    CHECK_FALSE(signature_shares_slot("a}b"));
}

TEST_CASE("entry signatures reject tampering and foreign keys", "[store][signing]") {
    const auto a = signer_of(k_key_a);
    const auto b = signer_of(k_key_b);
    const std::string key = "pt2:fx-graph-v1::fabc:c1";
    const std::string value(100000, 'v');
    const auto signature = a.sign(key, value);
    CHECK(a.verify(key, value, signature));
    CHECK_FALSE(a.verify(key, value + "x", signature));    // value changed
    CHECK_FALSE(a.verify(key + "x", value, signature));    // moved to another key
    CHECK_FALSE(a.verify(key, value, b.sign(key, value))); // another key signed it
    CHECK_FALSE(b.verify(key, value, signature));
    CHECK_FALSE(a.verify(key, value, ""));
    CHECK_FALSE(a.verify(key, value, signature.substr(0, 75)));
    auto flipped = signature;
    flipped.back() = flipped.back() == '0' ? '1' : '0';
    CHECK_FALSE(a.verify(key, value, flipped));
    // The length prefix separates key from value: "ab" + "c" is not "a" + "bc".
    CHECK_FALSE(a.verify("a", "bc", a.sign("ab", "c")));
}

TEST_CASE("entry signatures: rotation", "[store][signing]") {
    const std::string key = "pt2:autotune::t1:c1";
    const auto old_only = signer_of(k_key_a);
    const auto rotated =
        signer_of(fmt::format("# new key first\n{}\n\n  {}  \n", k_key_b, k_key_a));
    CHECK(rotated.key_count() == 2);
    const auto old_signature = old_only.sign(key, "v");
    CHECK(rotated.verify(key, "v", old_signature)); // old entries still verify
    const auto new_signature = rotated.sign(key, "v");
    CHECK(new_signature != old_signature); // new ones are signed by the first key
    CHECK(signer_of(k_key_b).verify(key, "v", new_signature));
    CHECK_FALSE(old_only.verify(key, "v", new_signature));
}

TEST_CASE("signing key files: format errors", "[store][signing]") {
    const auto error = [](std::string_view text) {
        auto signer = EntrySigner::parse(text, "keys");
        REQUIRE_FALSE(signer);
        return signer.error();
    };
    CHECK(error("").find("keys: no key") == 0);
    CHECK(error("# only a comment\n").find("keys: no key") == 0);
    CHECK(error("abcd\n").find("keys line 1: 4 characters") == 0);
    CHECK(error(std::string(k_key_a) + "\n" + std::string(63, 'a') + "z\n")
              .find("keys line 2: not a hex digit") == 0);
    std::string many;
    for (int i = 0; i < 17; ++i) {
        many += std::string(k_key_a) + "\n";
    }
    CHECK(error(many).find("more than 16 keys") != std::string::npos);
}

TEST_CASE("signing key files: only the owner may read them", "[store][signing]") {
    TempDir dir;
    const auto path = dir / "keys";
    std::ofstream(path) << k_key_a << "\n";
    ::chmod(path.c_str(), 0644);
    auto open_to_all = EntrySigner::load(path);
    REQUIRE_FALSE(open_to_all);
    CHECK(open_to_all.error().find("mode 0644") != std::string::npos);
    CHECK(open_to_all.error().find("chmod 600") != std::string::npos);
    ::chmod(path.c_str(), 0640);
    CHECK_FALSE(EntrySigner::load(path));
    ::chmod(path.c_str(), 0600);
    auto loaded = EntrySigner::load(path);
    REQUIRE(loaded);
    CHECK(loaded->signing_key_id() == "49cc93c9");
    auto missing = EntrySigner::load(dir / "none");
    REQUIRE_FALSE(missing);
    CHECK(missing.error().find("cannot open the signing key file") == 0);
    auto directory = EntrySigner::load(dir.path());
    CHECK_FALSE(directory);
    if (::geteuid() == 0) { // root can give the file away: another user's key file
        REQUIRE(::chown(path.c_str(), 65534, 65534) == 0);
        auto foreign = EntrySigner::load(path);
        REQUIRE_FALSE(foreign);
        CHECK(foreign.error().find("owned by uid 65534, not by uid 0") != std::string::npos);
    }
}
