// SPDX-License-Identifier: MIT
#include "client/cli/commands.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <span>
#include <string_view>
#include <unistd.h>

#include "client/cli/common.hpp"
#include "client/cli/format.hpp"
#include "client/client.hpp"
#include "client/cxx/process.hpp"
#include "config/config.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace pt2cache::client::cli {

const char* const k_exit_status_help =
    "Exit status:\n"
    "  0  success\n"
    "  1  miss: no such entry (get, rm, bundle show, autotune show), or not stored\n"
    "     (put --nx)\n"
    "  2  usage error: bad arguments, unreadable input or unwritable output file,\n"
    "     a damaged or truncated archive (import), invalid configuration\n"
    "  3  pt2cached unreachable, or it did not answer within --timeout\n"
    "  4  pt2cached answered an error, or a reply this client does not understand,\n"
    "     or a bundle or best-config that is not valid (bundle show, autotune show)";

void complain(std::string_view message) {
    fmt::print(stderr, "pt2cache: {}\n", message);
}

int report(const Error& error) {
    complain(error.message);
    switch (error.kind) {
    case ErrorKind::unreachable:
    case ErrorKind::timeout:
        return exit_status::unreachable;
    case ErrorKind::protocol:
    case ErrorKind::server:
        break;
    }
    return exit_status::server;
}

namespace {

tl::expected<config::Loaded, config::ConfigError> load_config(const Globals& globals) {
    config::LoadOptions options;
    options.config_path = globals.config;
    return config::load(options, config::process_environment());
}

// --socket, else the socket pt2cached would listen on with the same
// configuration file and environment.
std::string choose_socket(const Globals& globals) {
    if (!globals.socket.empty()) {
        return globals.socket;
    }
    auto loaded = load_config(globals);
    if (!loaded) {
        complain(fmt::format("warning: {}; using the default socket", loaded.error().message));
        return {};
    }
    return loaded->config.socket_path;
}

} // namespace

Client make_client(const Globals& globals) {
    Options options;
    options.socket_path = choose_socket(globals);
    options.client_name = "pt2cache-cli";
    options.retry_after = std::chrono::milliseconds(0);
    if (globals.timeout_ms) {
        options.connect_timeout = std::chrono::milliseconds(*globals.timeout_ms);
        options.io_timeout = options.connect_timeout;
    }
    return Client(std::move(options));
}

const CLI::Validator k_count(
    [](const std::string& text) {
        const bool digits = !text.empty() && text.size() <= 20 &&
                            text.find_first_not_of("0123456789") == std::string::npos;
        if (digits && (text.size() < 20 || text <= "18446744073709551615")) {
            return std::string();
        }
        return fmt::format("expected a count of 0 to 18446744073709551615, got \"{}\"", text);
    },
    "N");

const CLI::Validator k_finite(
    [](const std::string& text) {
        char* end = nullptr;
        const double value = std::strtod(text.c_str(), &end);
        if (!text.empty() && end == text.c_str() + text.size() && std::isfinite(value)) {
            return std::string();
        }
        return fmt::format("expected a finite number, got \"{}\"", text);
    },
    "NUMBER");

namespace {

std::string describe(const KeyArgs& args) {
    return fmt::format("\"{}\" in {}", printable(args.key), args.ns);
}

bool is_stdio(const std::string& path) {
    return path.empty() || path == "-";
}

// All of `path` ("-" or empty: stdin), but at most `limit` bytes, or an
// error message.
tl::expected<Bytes, std::string> read_input(const std::string& path, std::uint64_t limit) {
    const std::string name = is_stdio(path) ? std::string("standard input") : path;
    const int fd = is_stdio(path) ? STDIN_FILENO : ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return tl::unexpected(fmt::format("cannot open {}: {}", name, std::strerror(errno)));
    }
    Bytes data;
    std::size_t size = 0;
    for (;;) {
        if (size >= limit) {
            if (fd != STDIN_FILENO) {
                ::close(fd);
            }
            break;
        }
        if (data.size() - size < (64u << 10)) {
            data.resize(std::max<std::size_t>(data.size() * 2, 256u << 10));
        }
        const auto room = std::min<std::uint64_t>(data.size() - size, limit - size);
        const ssize_t got = ::read(fd, data.data() + size, static_cast<std::size_t>(room));
        if (got < 0 && errno == EINTR) {
            continue;
        }
        if (got <= 0) {
            const int error = errno;
            if (fd != STDIN_FILENO) {
                ::close(fd);
            }
            if (got < 0) {
                return tl::unexpected(
                    fmt::format("cannot read {}: {}", name, std::strerror(error)));
            }
            break;
        }
        size += static_cast<std::size_t>(got);
    }
    data.resize(size);
    return data;
}

// Writes `data` to `path` ("-" or empty: stdout), or returns an error message.
tl::expected<void, std::string> write_output(const std::string& path,
                                             std::span<const std::byte> data) {
    const std::string name = is_stdio(path) ? std::string("standard output") : path;
    const int fd = is_stdio(path)
                       ? STDOUT_FILENO
                       : ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) {
        return tl::unexpected(fmt::format("cannot open {}: {}", name, std::strerror(errno)));
    }
    int error = cxx::write_all(fd, data);
    if (fd != STDOUT_FILENO && ::close(fd) != 0 && error == 0) {
        error = errno;
    }
    if (error != 0) {
        return tl::unexpected(fmt::format("cannot write {}: {}", name, std::strerror(error)));
    }
    return {};
}

} // namespace

int run_stats(const Globals& globals, bool json) {
    auto client = make_client(globals);
    auto stats = client.stats_json();
    if (!stats) {
        return report(stats.error());
    }
    if (json) {
        fmt::print("{}\n", *stats);
        return exit_status::ok;
    }
    try {
        const auto parsed = nlohmann::json::parse(*stats);
        fmt::print("{}{}", render_stats(parsed), render_latency(parsed));
    } catch (const nlohmann::json::exception& e) {
        complain(fmt::format("unexpected STATS reply ({}); try --json", e.what()));
        return exit_status::server;
    }
    return exit_status::ok;
}

int run_get(const Globals& globals, const KeyArgs& args, const std::string& output) {
    auto client = make_client(globals);
    auto value = client.get(args.ns, args.key);
    if (!value) {
        return report(value.error());
    }
    if (!*value) {
        complain(fmt::format("no entry {}", describe(args)));
        return exit_status::miss;
    }
    if (auto ok = write_output(output, **value); !ok) {
        complain(ok.error());
        return exit_status::usage;
    }
    return exit_status::ok;
}

int run_put(const Globals& globals, const KeyArgs& args, const std::string& input,
            std::uint64_t ttl_s, bool only_if_absent) {
    // Connected first: the daemon's max_value bounds what is read (an
    // endless input, /dev/zero, was read until memory ran out).
    auto client = make_client(globals);
    if (auto connected = client.connect(); !connected) {
        return report(connected.error());
    }
    const std::uint64_t max_value = client.max_value();
    auto value = read_input(input, max_value + (max_value < UINT64_MAX ? 1 : 0));
    if (!value) {
        complain(value.error());
        return exit_status::usage;
    }
    if (value->size() > client.max_value()) {
        complain(fmt::format("the input is larger than pt2cached's max_value {}; nothing stored",
                             client.max_value()));
        return exit_status::server;
    }
    PutOptions options;
    options.ttl = std::chrono::seconds(ttl_s);
    options.only_if_absent = only_if_absent;
    auto stored = client.put(args.ns, args.key, *value, options);
    if (!stored) {
        return report(stored.error());
    }
    if (!*stored) {
        complain(fmt::format("not stored: an entry {} exists", describe(args)));
        return exit_status::miss;
    }
    return exit_status::ok;
}

int run_rm(const Globals& globals, const KeyArgs& args) {
    auto client = make_client(globals);
    auto removed = client.remove(args.ns, args.key);
    if (!removed) {
        return report(removed.error());
    }
    if (!*removed) {
        complain(fmt::format("no entry {}", describe(args)));
        return exit_status::miss;
    }
    return exit_status::ok;
}

int run_ls(const Globals& globals, const std::string& ns, bool long_format, std::uint64_t limit) {
    auto client = make_client(globals);
    std::string cursor;
    std::uint64_t shown = 0;
    do {
        const std::uint64_t want = limit == 0 ? 1000 : std::min<std::uint64_t>(limit - shown, 1000);
        auto page = client.list(ns, cursor, static_cast<std::uint32_t>(want));
        if (!page) {
            return report(page.error());
        }
        for (const auto& entry : page->entries) {
            if (limit != 0 && shown == limit) {
                break;
            }
            if (long_format) {
                fmt::print("{:>12}  {}  {}\n", entry.size, format_mtime(entry.mtime_ms),
                           printable(entry.key));
            } else {
                fmt::print("{}\n", printable(entry.key));
            }
            ++shown;
        }
        cursor = std::move(page->next_cursor);
    } while (!cursor.empty() && (limit == 0 || shown < limit));
    return exit_status::ok;
}

int run_clear(const Globals& globals, const std::string& ns, bool yes) {
    if (!yes) {
        complain(
            fmt::format("clear removes every entry of {} from every local tier; pass --yes", ns));
        return exit_status::usage;
    }
    auto client = make_client(globals);
    auto removed = client.clear(ns);
    if (!removed) {
        return report(removed.error());
    }
    fmt::print("removed {} entr{} from {}\n", *removed, *removed == 1 ? "y" : "ies", ns);
    return exit_status::ok;
}

int run_config(const Globals& globals) {
    auto loaded = load_config(globals);
    if (!loaded) {
        complain(loaded.error().message);
        return exit_status::usage;
    }
    for (const auto& warning : loaded->warnings) {
        fmt::print("# warning: {}\n", warning);
    }
    fmt::print("{}", config::render(*loaded));
    const auto client = make_client(globals);
    fmt::print("\n# socket used by pt2cache: {}\n", client.socket_path());
    return exit_status::ok;
}

} // namespace pt2cache::client::cli
