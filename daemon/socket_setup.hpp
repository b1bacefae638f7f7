// Where the daemon listens, and the checks that make the socket private:
// a 0700 directory owned by the user (never a symlink), a 0600 socket made
// under umask 077, one daemon per socket (a lock file), and a stale socket
// from a crash taken over. Under systemd the socket is inherited instead.
#pragma once

#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>

namespace pt2cache::daemon {

// Startup failures: main prints the message and exits non-zero.
class Fatal : public std::runtime_error {
public:
    Fatal(const std::string& message, int exit_code = 1)
        : std::runtime_error(message)
        , m_exit_code(exit_code) {}
    int exit_code() const { return m_exit_code; }

private:
    int m_exit_code;
};

// A held lock that proves this process is the one daemon for a socket path.
class InstanceLock {
public:
    // Takes an exclusive flock on `lock_path` (created 0600, never through
    // a symbolic link) and writes this process's pid into it. Throws Fatal
    // with `held`, and the holder's pid, when another process holds it; a
    // lock file that cannot be opened throws too, unless `optional` (the
    // object then holds nothing).
    InstanceLock(const std::filesystem::path& lock_path, const std::string& held,
                 bool optional = false);
    ~InstanceLock();
    InstanceLock(const InstanceLock&) = delete;
    InstanceLock& operator=(const InstanceLock&) = delete;

private:
    int m_fd = -1;
};

// Creates the socket's directory (0700) if missing and checks it: throws
// Fatal naming the path and the problem if it is a symlink, not a directory,
// not owned by this user, or open to group or others.
void prepare_socket_directory(const std::filesystem::path& directory);

// A listening socket inherited from systemd (LISTEN_FDS), if any. Throws
// Fatal if systemd passed something other than one Unix stream socket.
std::optional<int> inherited_listener();

// Raises the soft descriptor limit to the hard one and returns how many
// client connections fit in it: `wanted`, or fewer when the limit less a
// reserve (listener, cache files, Redis, logs) is smaller, in which case
// `warning` says so.
unsigned fit_connection_limit(unsigned wanted, std::string& warning);

// Binds and listens on `path` with mode 0600, replacing a stale socket file.
// Returns the listening descriptor.
int bind_listener(const std::filesystem::path& path);

} // namespace pt2cache::daemon
