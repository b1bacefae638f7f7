// SPDX-License-Identifier: MIT
#include "client/cxx/process.hpp"

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace pt2cache::client::cxx {

namespace {

std::vector<char*> make_argv(std::span<const std::string> args) {
    std::vector<char*> argv;
    argv.reserve(args.size() + 1);
    for (const auto& arg : args) {
        argv.push_back(const_cast<char*>(arg.c_str()));
    }
    argv.push_back(nullptr);
    return argv;
}

// The whole content of a memfd, from its start.
std::string slurp(int fd) {
    std::string text;
    struct stat st {};
    if (::fstat(fd, &st) == 0 && st.st_size > 0) {
        text.resize(static_cast<std::size_t>(st.st_size));
        std::size_t done = 0;
        while (done < text.size()) {
            const auto n =
                ::pread(fd, text.data() + done, text.size() - done, static_cast<off_t>(done));
            if (n < 0 && errno == EINTR) {
                continue;
            }
            if (n <= 0) {
                break;
            }
            done += static_cast<std::size_t>(n);
        }
        text.resize(done);
    }
    return text;
}

} // namespace

std::string env_or(const char* name, std::string fallback) {
    const char* value = std::getenv(name);
    return value != nullptr ? std::string(value) : fallback;
}

int write_all(int fd, std::string_view text) {
    while (!text.empty()) {
        const auto n = ::write(fd, text.data(), text.size());
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            // As a blocking write would: wait until the reader makes room.
            pollfd ready{fd, POLLOUT, 0};
            if (::poll(&ready, 1, -1) < 0 && errno != EINTR) {
                return errno;
            }
            continue;
        }
        if (n < 0) {
            return errno;
        }
        if (n == 0) {
            return EIO; // no progress on a non-empty write
        }
        text.remove_prefix(static_cast<std::size_t>(n));
    }
    return 0;
}

int write_all(int fd, std::span<const std::byte> bytes) {
    return write_all(fd,
                     std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

RunResult run_captured(const std::string& program, std::span<const std::string> args) {
    RunResult result;
    const int out_fd = ::memfd_create("pt2cache-cxx-stdout", MFD_CLOEXEC);
    const int err_fd = ::memfd_create("pt2cache-cxx-stderr", MFD_CLOEXEC);
    if (out_fd < 0 || err_fd < 0) {
        result.error = std::strerror(errno);
        if (out_fd >= 0) {
            ::close(out_fd);
        }
        if (err_fd >= 0) {
            ::close(err_fd);
        }
        return result;
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out_fd, STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions, err_fd, STDERR_FILENO);
    auto argv = make_argv(args);
    const auto start = std::chrono::steady_clock::now();
    pid_t pid = 0;
    const int rc = ::posix_spawn(&pid, program.c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) {
        result.error = std::strerror(rc);
        ::close(out_fd);
        ::close(err_fd);
        return result;
    }
    result.started = true;
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    result.wall = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - start);
    if (WIFSIGNALED(status)) {
        result.signal = WTERMSIG(status);
        result.exit_code = 128 + result.signal;
    } else {
        result.exit_code = WEXITSTATUS(status);
    }
    result.out = slurp(out_fd);
    result.err = slurp(err_fd);
    ::close(out_fd);
    ::close(err_fd);
    return result;
}

void exec_program(const std::string& program, std::span<const std::string> args) {
    auto argv = make_argv(args);
    ::execv(program.c_str(), argv.data());
}

void exit_like(const RunResult& result) {
    if (result.signal != 0) {
        std::signal(result.signal, SIG_DFL);
        ::raise(result.signal);
    }
    std::_Exit(result.exit_code);
}

} // namespace pt2cache::client::cxx
