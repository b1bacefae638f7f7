// SPDX-License-Identifier: MIT
// A real redis-server for the remote-tier tests, on a Unix socket in a temp
// directory; stopped (SIGKILL) when the object goes. Tests skip themselves
// when redis-server is not installed.
#pragma once

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <spawn.h>
#include <stdexcept>
#include <string>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

extern char** environ;

// Catch2 2.x has no SKIP: the test passes with a warning.
#define REQUIRE_REDIS_SERVER()                                                                     \
    do {                                                                                           \
        if (!pt2cache::tests::have_redis_server()) {                                               \
            WARN("redis-server not installed: test skipped");                                      \
            return;                                                                                \
        }                                                                                          \
    } while (false)

namespace pt2cache::tests {

inline bool have_redis_server() {
    return std::system("command -v redis-server >/dev/null 2>&1") == 0;
}

inline bool can_connect_unix(const std::filesystem::path& path) {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    path.native().copy(address.sun_path, sizeof(address.sun_path) - 1);
    const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
    ::close(fd);
    return ok;
}

class RedisServer {
public:
    RedisServer(std::filesystem::path dir, std::vector<std::string> extra = {})
        : m_dir(std::move(dir))
        , m_socket(m_dir / "redis.sock")
        , m_extra(std::move(extra)) {
        start();
    }
    ~RedisServer() { kill(); }
    RedisServer(const RedisServer&) = delete;
    RedisServer& operator=(const RedisServer&) = delete;

    const std::filesystem::path& socket() const { return m_socket; }

    void start() {
        std::vector<std::string> args = {"redis-server",
                                         "--port",
                                         "0",
                                         "--unixsocket",
                                         m_socket.string(),
                                         "--unixsocketperm",
                                         "700",
                                         "--save",
                                         "",
                                         "--appendonly",
                                         "no",
                                         "--dir",
                                         m_dir.string()};
        args.insert(args.end(), m_extra.begin(), m_extra.end());
        std::vector<char*> argv;
        for (auto& arg : args) {
            argv.push_back(arg.data());
        }
        argv.push_back(nullptr);
        posix_spawn_file_actions_t actions;
        posix_spawn_file_actions_init(&actions);
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
        const int rc =
            ::posix_spawnp(&m_pid, "redis-server", &actions, nullptr, argv.data(), environ);
        posix_spawn_file_actions_destroy(&actions);
        if (rc != 0) {
            throw std::runtime_error("cannot start redis-server");
        }
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (!can_connect_unix(m_socket)) {
            if (std::chrono::steady_clock::now() > deadline) {
                throw std::runtime_error("redis-server did not start");
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
    }

    void kill() {
        if (m_pid > 0) {
            ::kill(m_pid, SIGCONT);
            ::kill(m_pid, SIGKILL);
            ::waitpid(m_pid, nullptr, 0);
            m_pid = 0;
        }
    }
    void freeze() { ::kill(m_pid, SIGSTOP); }
    void thaw() { ::kill(m_pid, SIGCONT); }

    // redis-cli's output for `args`.
    std::string cli(const std::string& args) const {
        const std::string command = "redis-cli -s " + m_socket.string() + " " + args;
        std::string out;
        if (FILE* pipe = ::popen(command.c_str(), "r")) {
            char buffer[4096];
            std::size_t got = 0;
            while ((got = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) {
                out.append(buffer, got);
            }
            ::pclose(pipe);
        }
        while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) {
            out.pop_back();
        }
        return out;
    }

    // calls= of `cmdstat_<command>` in INFO commandstats (0 when absent).
    long calls(const std::string& command) const {
        const std::string info = cli("info commandstats");
        const std::string needle = "cmdstat_" + command + ":calls=";
        const auto at = info.find(needle);
        return at == std::string::npos ? 0 : std::stol(info.substr(at + needle.size()));
    }

private:
    std::filesystem::path m_dir;
    std::filesystem::path m_socket;
    std::vector<std::string> m_extra;
    pid_t m_pid = 0;
};

} // namespace pt2cache::tests
