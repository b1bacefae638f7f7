// SPDX-License-Identifier: MIT
//
// The real pt2cached, run by a test: fork()s and exec()s $PT2CACHED with
//   --socket <tmp>/s --cache-dir <tmp>/cache --log-level warn <extra args>
// in a scratch directory, and waits (at most 10 s) until the socket accepts
// connections. The scratch directory outlives restarts, so a restarted daemon
// finds its cache again. The daemon reads no user configuration: its
// XDG_CONFIG_HOME points into the scratch directory.
#pragma once

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include "tests/support/temp_dir.hpp"

namespace pt2cache::tests {

class DaemonProcess {
public:
    static constexpr std::chrono::seconds k_start_timeout{10};
    static constexpr std::chrono::seconds k_stop_timeout{10};

    // The daemon executable from $PT2CACHED, or std::nullopt when unset.
    static std::optional<std::string> executable() {
        const char* path = std::getenv("PT2CACHED");
        if (path == nullptr || *path == '\0') {
            return std::nullopt;
        }
        return std::string(path);
    }

    // Starts the daemon at once unless `start_now` is false (then call
    // start(); socket_path() is known before).
    explicit DaemonProcess(std::vector<std::string> extra_args = {}, bool start_now = true)
        : m_extra_args(std::move(extra_args)) {
        if (start_now) {
            start();
        }
    }

    ~DaemonProcess() {
        if (m_pid > 0) {
            ::kill(m_pid, SIGKILL);
            int status = 0;
            ::waitpid(m_pid, &status, 0);
        }
    }

    DaemonProcess(const DaemonProcess&) = delete;
    DaemonProcess& operator=(const DaemonProcess&) = delete;

    std::string socket_path() const { return (m_dir / "s").string(); }
    std::string cache_dir() const { return (m_dir / "cache").string(); }
    const std::filesystem::path& dir() const { return m_dir.path(); }
    pid_t pid() const { return m_pid; }
    bool running() const { return m_pid > 0; }

    // Starts the daemon and waits until its socket accepts a connection.
    // Throws std::runtime_error when $PT2CACHED is unset, or the daemon exits
    // or stays silent for k_start_timeout.
    void start() {
        if (m_pid > 0) {
            throw std::runtime_error("pt2cached is already running");
        }
        const auto exe = executable();
        if (!exe) {
            throw std::runtime_error("PT2CACHED is not set");
        }
        std::vector<std::string> args = {*exe,        "--socket",    socket_path(), "--cache-dir",
                                         cache_dir(), "--log-level", "warn"};
        args.insert(args.end(), m_extra_args.begin(), m_extra_args.end());
        std::vector<char*> argv;
        for (auto& arg : args) {
            argv.push_back(arg.data());
        }
        argv.push_back(nullptr);
        // The environment is built before fork(): after it, a multithreaded
        // parent's child may only make async-signal-safe calls.
        std::vector<std::string> env_strings = {"XDG_CONFIG_HOME=" + (m_dir / "config").string()};
        for (char** var = environ; *var != nullptr; ++var) {
            if (std::strncmp(*var, "XDG_CONFIG_HOME=", 16) != 0) {
                env_strings.emplace_back(*var);
            }
        }
        std::vector<char*> envp;
        for (auto& var : env_strings) {
            envp.push_back(var.data());
        }
        envp.push_back(nullptr);

        const pid_t pid = ::fork();
        if (pid < 0) {
            throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
        }
        if (pid == 0) {
            ::execve(argv[0], argv.data(), envp.data());
            ::_exit(127);
        }
        m_pid = pid;

        const auto deadline = std::chrono::steady_clock::now() + k_start_timeout;
        while (!accepts_connections()) {
            int status = 0;
            if (::waitpid(m_pid, &status, WNOHANG) == m_pid) {
                m_pid = -1;
                throw std::runtime_error("pt2cached exited during startup: " + describe(status));
            }
            if (std::chrono::steady_clock::now() > deadline) {
                kill9();
                throw std::runtime_error("pt2cached did not accept connections within 10 s");
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
    }

    // SIGTERM, then waits (at most k_stop_timeout, then SIGKILL) and returns
    // the wait status (see waitpid(2); 0 for a clean exit). -1 if not running.
    int stop() {
        if (m_pid <= 0) {
            return -1;
        }
        ::kill(m_pid, SIGTERM);
        const auto deadline = std::chrono::steady_clock::now() + k_stop_timeout;
        int status = 0;
        for (;;) {
            const pid_t done = ::waitpid(m_pid, &status, WNOHANG);
            if (done == m_pid || (done < 0 && errno != EINTR)) {
                break;
            }
            if (std::chrono::steady_clock::now() > deadline) {
                ::kill(m_pid, SIGKILL);
                ::waitpid(m_pid, &status, 0);
                break;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        m_pid = -1;
        return status;
    }

    // SIGKILL, as a crash would; reaps the process.
    void kill9() {
        if (m_pid <= 0) {
            return;
        }
        ::kill(m_pid, SIGKILL);
        int status = 0;
        ::waitpid(m_pid, &status, 0);
        m_pid = -1;
    }

    // stop() then start(), on the same socket and cache directory. Returns
    // stop()'s status.
    int restart() {
        const int status = stop();
        start();
        return status;
    }

    // "exit status N" or "signal N".
    static std::string describe(int status) {
        if (WIFEXITED(status)) {
            return "exit status " + std::to_string(WEXITSTATUS(status));
        }
        if (WIFSIGNALED(status)) {
            return "signal " + std::to_string(WTERMSIG(status));
        }
        return "wait status " + std::to_string(status);
    }

private:
    bool accepts_connections() const {
        const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            return false;
        }
        sockaddr_un address{};
        address.sun_family = AF_UNIX;
        const std::string path = socket_path();
        std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
        const bool ok =
            ::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0;
        ::close(fd);
        return ok;
    }

    TempDir m_dir;
    std::vector<std::string> m_extra_args;
    pid_t m_pid = -1;
};

} // namespace pt2cache::tests
