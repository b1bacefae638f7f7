// SPDX-License-Identifier: MIT
//
// pt2cache-cxx's settings from the environment (docs/cxx.md, "Environment"),
// and where its decision lines go.
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

#include "client/cxx/launcher.hpp"

#include <fmt/format.h>

namespace pt2cache::client::cxx {

namespace {

// PT2CACHE_CXX_LOG's value: unset, empty or `0` is no log; an absolute path
// is a file the lines are appended to (O_APPEND: whole lines from parallel
// builds do not interleave), which Inductor does not swallow as it swallows a
// successful compiler's stderr; anything else is stderr. A file that cannot
// be opened is said once on stderr, and nothing is logged.
int open_log(const std::string& value) {
    if (value.empty() || value == "0") {
        return -1;
    }
    if (value.front() != '/') {
        return STDERR_FILENO;
    }
    const int fd = ::open(value.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        write_all(STDERR_FILENO, fmt::format("pt2cache-cxx: PT2CACHE_CXX_LOG: cannot open {}: {}\n",
                                             value, std::strerror(errno)));
    }
    return fd;
}

} // namespace

LauncherOptions LauncherOptions::from_environment() {
    LauncherOptions options;
    options.socket_path = env_or("PT2CACHE_SOCKET");
    if (const auto ms = env_or("PT2CACHE_CXX_TIMEOUT_MS"); !ms.empty()) {
        char* end = nullptr;
        const auto value = std::strtoul(ms.c_str(), &end, 10);
        if (end != nullptr && *end == '\0' && value > 0 && value <= 600'000) {
            options.io_timeout = std::chrono::milliseconds(value);
            options.connect_timeout = std::min(options.connect_timeout, options.io_timeout);
        }
    }
    const auto hash_dir = env_or("PT2CACHE_CXX_HASH_DIR");
    options.hash_dir = !hash_dir.empty() && hash_dir != "0";
    options.log_fd = open_log(env_or("PT2CACHE_CXX_LOG"));
    return options;
}

void LauncherOptions::log(std::string_view message) const {
    if (log_fd == STDERR_FILENO) {
        write_all(log_fd, fmt::format("pt2cache-cxx: {}\n", message));
    } else if (log_fd >= 0) {
        write_all(log_fd, fmt::format("pt2cache-cxx[{}]: {}\n", ::getpid(), message));
    }
}

} // namespace pt2cache::client::cxx
