// SPDX-License-Identifier: MIT
#include <cstring>
#include <filesystem>
#include <string>
#include <sys/socket.h>
#include <sys/un.h>
#include <thread>
#include <unistd.h>

#include "daemon/store/remote/redis_context.hpp"
#include "daemon/store/remote/redis_pool.hpp"
#include "tests/daemon/store/alloc_probe.hpp"
#include "tests/daemon/store/helpers.hpp"
#include "tests/daemon/store/redis_server.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

using namespace pt2cache::daemon::store;
using namespace std::chrono_literals;
using pt2cache::tests::RedisServer;
using pt2cache::tests::TempDir;

namespace {

RedisEndpoint endpoint_of(const RedisServer& server) {
    RedisEndpoint endpoint;
    endpoint.unix_socket = server.socket().string();
    endpoint.connect_timeout = 500ms;
    endpoint.op_timeout = 300ms;
    return endpoint;
}

std::string as_string(const std::vector<std::byte>& bytes) {
    return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

// A one-connection server on a Unix socket that answers the connection's
// setup (CLIENT SETNAME) with +OK and the next command with `reply`, then
// keeps the connection open (or closes it) until destroyed. For replies
// redis-server never sends; tests/support/hostile_redis.py does the same for
// the daemon's tests.
class ScriptedServer {
public:
    ScriptedServer(std::filesystem::path path, std::string reply, bool close_after)
        : m_path(std::move(path)) {
        m_listener = ::socket(AF_UNIX, SOCK_STREAM, 0);
        sockaddr_un address{};
        address.sun_family = AF_UNIX;
        std::strncpy(address.sun_path, m_path.c_str(), sizeof(address.sun_path) - 1);
        REQUIRE(::bind(m_listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
        REQUIRE(::listen(m_listener, 1) == 0);
        m_thread = std::thread([this, reply = std::move(reply), close_after] {
            const int fd = ::accept(m_listener, nullptr, nullptr);
            if (fd < 0) {
                return;
            }
            char buffer[4096];
            for (const std::string& answer : {std::string("+OK\r\n"), reply}) {
                if (::read(fd, buffer, sizeof(buffer)) <= 0) {
                    break;
                }
                if (::write(fd, answer.data(), answer.size()) < 0) {
                    break;
                }
            }
            if (!close_after) {
                // Until the client gives up.
                [[maybe_unused]] const auto ignored = ::read(fd, buffer, sizeof(buffer));
            }
            ::close(fd);
        });
    }
    ~ScriptedServer() {
        ::shutdown(m_listener, SHUT_RDWR);
        ::close(m_listener);
        m_thread.join();
    }

    RedisEndpoint endpoint() const {
        RedisEndpoint endpoint;
        endpoint.unix_socket = m_path.string();
        endpoint.op_timeout = 300ms;
        return endpoint;
    }

private:
    std::filesystem::path m_path;
    int m_listener = -1;
    std::thread m_thread;
};

} // namespace

TEST_CASE("redis connection round trips values of every size", "[store][redis]") {
    REQUIRE_REDIS_SERVER();
    TempDir dir;
    RedisServer server(dir.path());
    auto connection = RedisConnection::open(endpoint_of(server));
    REQUIRE(connection);

    for (const std::size_t size : {0UL, 1UL, 5000UL, (64UL << 10) - 1, 64UL << 10, 4UL << 20}) {
        const auto value = as_string(pt2cache::tests::random_bytes(size, size + 1));
        auto set = connection->command({{"SET", "k", value}});
        REQUIRE(set);
        CHECK((*set)->is_ok());
        auto got = connection->command({{"GET", "k"}});
        REQUIRE(got);
        CHECK((*got)->type == RedisReply::Type::string);
        CHECK((*got)->text() == value);
    }

    SECTION("pipelined replies after a large bulk reply") {
        const std::string big(1 << 20, 'x');
        REQUIRE(connection->command({{"SET", "big", big}}));
        const std::vector<RedisCommand> commands = {
            {{"GET", "big"}}, {{"GET", "missing"}}, {{"INCR", "n"}}, {{"GET", "big"}}};
        auto replies = connection->exchange(commands, SteadyClock::now() + 1s);
        REQUIRE(replies);
        REQUIRE(replies->size() == 4);
        CHECK((*replies)[0]->text() == big);
        CHECK((*replies)[1]->type == RedisReply::Type::nil);
        CHECK((*replies)[2]->integer == 1);
        CHECK((*replies)[3]->text() == big);
    }
    SECTION("an error reply is a reply") {
        auto reply = connection->command({{"GET"}});
        REQUIRE(reply);
        CHECK((*reply)->type == RedisReply::Type::error);
        CHECK(connection->usable());
    }
    SECTION("arrays") {
        auto reply = connection->command({{"MGET", "k", "missing"}});
        REQUIRE(reply);
        REQUIRE((*reply)->type == RedisReply::Type::array);
        CHECK((*reply)->elements.size() == 2);
        CHECK((*reply)->elements[1]->type == RedisReply::Type::nil);
    }
}

TEST_CASE("redis connection failures are bounded and classified", "[store][redis]") {
    REQUIRE_REDIS_SERVER();
    TempDir dir;
    SECTION("nothing listening") {
        RedisEndpoint endpoint;
        endpoint.unix_socket = (dir.path() / "none.sock").string();
        auto connection = RedisConnection::open(endpoint);
        REQUIRE_FALSE(connection);
        CHECK(connection.error().kind == RedisErrorKind::connect);
        CHECK(connection.error().connectivity());
    }
    SECTION("a frozen server times out") {
        RedisServer server(dir.path());
        auto connection = RedisConnection::open(endpoint_of(server));
        REQUIRE(connection);
        server.freeze();
        const auto started = std::chrono::steady_clock::now();
        auto reply = connection->command({{"GET", "k"}});
        const auto took = std::chrono::steady_clock::now() - started;
        server.thaw();
        REQUIRE_FALSE(reply);
        CHECK(reply.error().kind == RedisErrorKind::timeout);
        CHECK(took >= 300ms);
        CHECK(took < 1000ms);
        CHECK_FALSE(connection->usable());
    }
    SECTION("an abort flag stops a wait") {
        RedisServer server(dir.path());
        auto connection = RedisConnection::open(endpoint_of(server));
        REQUIRE(connection);
        server.freeze();
        std::atomic<bool> abort{true};
        auto reply = connection->command({{"GET", "k"}}, &abort);
        server.thaw();
        REQUIRE_FALSE(reply);
        CHECK(reply.error().kind == RedisErrorKind::aborted);
    }
    SECTION("a killed server is an I/O error") {
        RedisServer server(dir.path());
        auto connection = RedisConnection::open(endpoint_of(server));
        REQUIRE(connection);
        server.kill();
        auto reply = connection->command({{"GET", "k"}});
        REQUIRE_FALSE(reply);
        CHECK(reply.error().kind == RedisErrorKind::io);
    }
}

TEST_CASE("redis connection AUTH and SELECT", "[store][redis]") {
    REQUIRE_REDIS_SERVER();
    TempDir dir;
    RedisServer server(dir.path(), {"--requirepass", "s3cret"});
    auto endpoint = endpoint_of(server);

    SECTION("no password") {
        auto connection = RedisConnection::open(endpoint);
        REQUIRE(connection); // the server answers NOAUTH only to commands
        auto reply = connection->command({{"GET", "k"}});
        REQUIRE(reply);
        CHECK((*reply)->type == RedisReply::Type::error);
    }
    SECTION("wrong password") {
        endpoint.password = "wrong";
        auto connection = RedisConnection::open(endpoint);
        REQUIRE_FALSE(connection);
        CHECK(connection.error().kind == RedisErrorKind::connect);
        CHECK_THAT(connection.error().message, Catch::Contains("AUTH refused"));
    }
    SECTION("password and database") {
        endpoint.password = "s3cret";
        endpoint.db = 3;
        auto connection = RedisConnection::open(endpoint);
        REQUIRE(connection);
        REQUIRE(connection->command({{"SET", "in3", "v"}}));
        CHECK(server.cli("-a s3cret --no-auth-warning -n 3 get in3") == "v");
        CHECK(server.cli("-a s3cret --no-auth-warning -n 0 exists in3") == "0");
    }
    SECTION("ACL user") {
        server.cli("-a s3cret --no-auth-warning ACL SETUSER cache on '>pw' '~pt2:*' '+get' "
                   "'+set' '+ping'");
        endpoint.username = "cache";
        endpoint.password = "pw";
        auto connection = RedisConnection::open(endpoint); // CLIENT SETNAME refused: ignored
        REQUIRE(connection);
        auto set = connection->command({{"SET", "pt2:x", "v"}});
        REQUIRE(set);
        CHECK((*set)->is_ok());
        auto denied = connection->command({{"SET", "other", "v"}});
        REQUIRE(denied);
        CHECK((*denied)->type == RedisReply::Type::error);
    }
}

TEST_CASE("redis pool reuses, bounds and drops connections", "[store][redis]") {
    REQUIRE_REDIS_SERVER();
    TempDir dir;
    RedisServer server(dir.path());
    RedisPool pool(endpoint_of(server), 2);
    {
        auto a = pool.acquire(std::chrono::steady_clock::now() + 100ms);
        REQUIRE(a);
        CHECK_FALSE(a->reused());
        auto b = pool.acquire(std::chrono::steady_clock::now() + 100ms);
        REQUIRE(b);
        const auto started = std::chrono::steady_clock::now();
        auto c = pool.acquire(started + 100ms);
        REQUIRE_FALSE(c);
        CHECK(c.error().kind == RedisErrorKind::exhausted);
        CHECK_FALSE(c.error().connectivity());
        CHECK(std::chrono::steady_clock::now() - started >= 100ms);
    }
    CHECK(pool.open_count() == 2);
    {
        auto again = pool.acquire(std::chrono::steady_clock::now() + 100ms);
        REQUIRE(again);
        CHECK(again->reused());
    }
    pool.drop_idle();
    CHECK(pool.open_count() == 0);
}

TEST_CASE("redis connection refuses hostile replies, bounded in memory and time",
          "[store][redis]") {
    TempDir dir;
    struct Case {
        std::string reply;
        bool close_after;
        RedisErrorKind kind;
        std::string message;
    };
    const std::vector<Case> cases = {
        {"$99999999999\r\nabc", false, RedisErrorKind::protocol,
         "bulk length 99999999999 over the limit of 536870912 bytes"},
        {"$524288000\r\n0123456789", false, RedisErrorKind::timeout, "no answer within"},
        {"$100\r\n0123456789", true, RedisErrorKind::protocol,
         "Redis closed the connection mid-reply"},
        {"%1\r\n+a\r\n+b\r\n", false, RedisErrorKind::protocol, "RESP3 reply type '%' (map)"},
        {"*2147483647\r\n", false, RedisErrorKind::protocol, "over the limit of 65536 elements"},
        {":1\r\n", false, RedisErrorKind::protocol, "GET: unexpected integer reply"},
        {"$-1\r\n+OK\r\n", false, RedisErrorKind::protocol,
         "unexpected bytes after the last reply"},
    };
    for (const auto& c : cases) {
        INFO(c.reply.substr(0, 20));
        ScriptedServer server(dir.path() / "scripted.sock", c.reply, c.close_after);
        auto connection = RedisConnection::open(server.endpoint());
        REQUIRE(connection);
        const RedisCommand get{{"GET", "k"}, {RedisReply::Type::string, RedisReply::Type::nil}};
        pt2cache::tests::reset_largest_allocation();
        const auto started = std::chrono::steady_clock::now();
        auto reply = connection->command(get);
        const auto took = std::chrono::steady_clock::now() - started;
        const auto largest = pt2cache::tests::largest_allocation();
        REQUIRE_FALSE(reply);
        CHECK(reply.error().kind == c.kind);
        CHECK_THAT(reply.error().message, Catch::Contains(c.message));
        CHECK(reply.error().connectivity());
        CHECK_FALSE(connection->usable());
        // Memory follows the bytes that arrived: one 64 KiB step at most.
        CHECK(largest <= (64 << 10));
        // Cut off at the op timeout, whatever the reply announced.
        CHECK(took < 300ms + 200ms);
        std::filesystem::remove(dir.path() / "scripted.sock");
    }
}

TEST_CASE("transient error replies are told from lasting ones", "[store][redis]") {
    const auto error = [](const char* text) {
        RedisReply reply;
        reply.type = RedisReply::Type::error;
        reply.data = Blob::copy_of(std::string_view(text));
        return reply;
    };
    CHECK(error("BUSY Redis is busy running a script.").is_transient_error());
    CHECK(error("LOADING Redis is loading the dataset in memory").is_transient_error());
    CHECK(error("READONLY You can't write against a read only replica.").is_transient_error());
    CHECK(error("OOM command not allowed when used memory > 'maxmemory'.").is_transient_error());
    CHECK(error("TRYAGAIN").is_transient_error());
    CHECK_FALSE(
        error("NOPERM this user has no permissions to run the 'del' command").is_transient_error());
    CHECK_FALSE(error("ERR unknown command 'DEL'").is_transient_error());
    CHECK_FALSE(error("BUSYKEY Target key name already exists.").is_transient_error());
    RedisReply status;
    status.type = RedisReply::Type::status;
    status.data = Blob::copy_of(std::string_view("BUSY"));
    CHECK_FALSE(status.is_transient_error());
}
