// SPDX-License-Identifier: MIT
//
// `pt2cache`: inspect and use the per-user pt2cached daemon from a shell.
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <optional>
#include <string>
#include <unistd.h>
#include <vector>

#include "client/cli/archive_commands.hpp"
#include "client/cli/commands.hpp"
#include "client/cli/common.hpp"
#include "client/cli/top.hpp"
#include "client/cxx/process.hpp"
#include "proto/frame.hpp"
#include "proto/messages.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#ifndef PT2CACHE_VERSION
#define PT2CACHE_VERSION "unknown"
#endif

namespace pt2cache::client::cli {
namespace {

const CLI::Validator k_namespace(
    [](const std::string& ns) {
        return proto::valid_namespace(ns)
                   ? std::string()
                   : fmt::format("invalid namespace \"{}\": expected 1 to {} characters of "
                                 "[a-z0-9-]",
                                 ns, proto::k_max_namespace);
    },
    "NS");

const CLI::Validator k_key(
    [](const std::string& key) {
        return !key.empty() && key.size() <= proto::k_max_key
                   ? std::string()
                   : fmt::format("key of {} bytes: keys are 1 to {} bytes", key.size(),
                                 proto::k_max_key);
    },
    "KEY");

void add_key_args(CLI::App& command, KeyArgs& args) {
    command.add_option("NS", args.ns, "Namespace, e.g. fx-graph")->required()->check(k_namespace);
    command.add_option("KEY", args.key, "Key (1 to 1024 bytes)")->required()->check(k_key);
}

int run(int argc, char** argv) {
    CLI::App app("Use and inspect pt2cached, the per-user PyTorch compile-cache daemon.",
                 "pt2cache");
    app.set_version_flag("--version", fmt::format("pt2cache {} (native protocol version {})",
                                                  PT2CACHE_VERSION, proto::k_version));
    app.footer(k_exit_status_help);
    app.require_subcommand(1);
    app.fallthrough(); // global options may follow the subcommand
    app.failure_message([](const CLI::App*, const CLI::Error& e) {
        return fmt::format("pt2cache: {} (see pt2cache --help)\n", e.what());
    });

    Globals globals;
    app.add_option("--socket", globals.socket,
                   "pt2cached's socket (default: as pt2cached would choose it)")
        ->type_name("PATH");
    app.add_option("--timeout", globals.timeout_ms,
                   "Give up connecting, or waiting for an answer, after MS milliseconds")
        ->type_name("MS")
        ->check(CLI::Range(1u, 3'600'000u));
    app.add_option("--config", globals.config,
                   "pt2cached's configuration file (default: "
                   "${XDG_CONFIG_HOME:-~/.config}/pt2cache/pt2cached.toml)")
        ->type_name("PATH");

    auto* ping = app.add_subcommand("ping", "Print the round-trip time of one request, in µs");
    std::optional<std::string> ping_wait;
    ping->add_option("--wait", ping_wait,
                     "Retry until pt2cached answers, for at most DURATION (e.g. 5s, 500ms)")
        ->type_name("DURATION");

    TopArgs top_args;
    auto* top = add_top_command(app, top_args);

    bool json = false;
    auto* stats = app.add_subcommand("stats", "Show the daemon's counters per namespace and tier");
    stats->add_flag("--json", json, "Print the raw JSON reply");
    bool zero = false;
    stats->add_flag("-z,--zero", zero,
                    "Reset the daemon's counters and latency histograms (with --json: print "
                    "the counts from just before the reset)");

    auto* metrics = app.add_subcommand(
        "metrics", "Print the daemon's metrics in the Prometheus text format (for "
                   "node_exporter's textfile collector)");

    KeyArgs get_args;
    std::string output;
    auto* get = app.add_subcommand("get", "Write an entry's value to stdout or a file");
    add_key_args(*get, get_args);
    get->add_option("-o,--output", output, "Write the value to FILE instead of stdout")
        ->type_name("FILE");

    KeyArgs put_args;
    std::string input = "-";
    std::uint64_t ttl_s = 0;
    bool nx = false;
    auto* put = app.add_subcommand("put", "Store the contents of FILE, or stdin, under a key");
    add_key_args(*put, put_args);
    put->add_option("FILE", input, "Input file; - or absent: stdin");
    put->add_option("--ttl", ttl_s, "Expire the entry after SECONDS (0: never)")
        ->type_name("SECONDS")
        ->check(CLI::Range(std::uint64_t{0}, std::uint64_t{1} << 40));
    put->add_flag("--nx", nx, "Only store if no live entry exists (exit 1 otherwise)");

    KeyArgs rm_args;
    auto* rm = app.add_subcommand("rm", "Remove an entry");
    add_key_args(*rm, rm_args);

    std::string ls_ns;
    bool long_format = false;
    std::uint64_t limit = 0;
    auto* ls = app.add_subcommand("ls", "List the keys of a namespace on disk");
    ls->add_option("NS", ls_ns, "Namespace")->required()->check(k_namespace);
    ls->add_flag("-l,--long", long_format, "Also show each entry's size in bytes and mtime");
    ls->add_option("--limit", limit, "Show at most N entries (0: all)")
        ->type_name("N")
        ->check(k_count);

    std::string clear_ns;
    bool yes = false;
    auto* clear = app.add_subcommand("clear", "Remove every entry of a namespace");
    clear->add_option("NS", clear_ns, "Namespace")->required()->check(k_namespace);
    clear->add_flag("--yes", yes, "Confirm; required");

    auto* config = app.add_subcommand(
        "config", "Print the effective configuration as pt2cached would load it");

    auto* bundle = app.add_subcommand("bundle", "Inspect bundles of autotune best-configs");
    bundle->require_subcommand(1);
    auto* bundle_ls = bundle->add_subcommand(
        "ls", "List the bundles (namespace autotune-bundle) with their entry counts and sizes");
    std::string bundle_key;
    auto* bundle_show =
        bundle->add_subcommand("show", "Print each best-config of a bundle, by kernel basename");
    bundle_show->add_option("KEY", bundle_key, "Bundle key (64 hex digits)")
        ->required()
        ->check(k_key);

    auto* autotune = app.add_subcommand("autotune", "Inspect autotune best-configs");
    autotune->require_subcommand(1);
    std::string autotune_key;
    auto* autotune_show =
        autotune->add_subcommand("show", "Print one best-config of namespace autotune readably");
    autotune_show
        ->add_option("KEY", autotune_key,
                     "<64 hex>.best_config (local) or <remote key>::<inner key> (remote)")
        ->required()
        ->check(k_key);

    std::vector<std::string> cxx_args;
    bool explain = false;
    auto* cxx = app.add_subcommand(
        "cxx", "Show what pt2cache-cxx keys a compile on: pt2cache cxx --explain -- ARGS...");
    cxx->add_flag("--explain", explain,
                  "Print each key input and its hash, and which stored variant matches")
        ->required();
    cxx->add_option("ARGS", cxx_args, "The compiler command line (after --)")->required();

    ArchiveCommands archive;
    add_archive_commands(app, archive);

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        // --help and --version are "errors" that exit 0; every real one exits 2.
        return app.exit(e) == 0 ? exit_status::ok : exit_status::usage;
    }

    if (*ping) {
        return run_ping(globals, ping_wait);
    }
    if (*top) {
        return run_top(globals, top_args);
    }
    if (*stats) {
        return zero ? run_stats_zero(globals, json) : run_stats(globals, json);
    }
    if (*metrics) {
        return run_metrics(globals);
    }
    if (*get) {
        return run_get(globals, get_args, output);
    }
    if (*put) {
        return run_put(globals, put_args, input, ttl_s, nx);
    }
    if (*rm) {
        return run_rm(globals, rm_args);
    }
    if (*ls) {
        return run_ls(globals, ls_ns, long_format, limit);
    }
    if (*clear) {
        return run_clear(globals, clear_ns, yes);
    }
    if (*config) {
        return run_config(globals);
    }
    if (*bundle_ls) {
        return run_bundle_ls(globals);
    }
    if (*bundle_show) {
        return run_bundle_show(globals, bundle_key);
    }
    if (*cxx) {
        return run_cxx_explain(globals, cxx_args);
    }
    if (*autotune_show) {
        return run_autotune_show(globals, autotune_key);
    }
    if (auto status = archive.run(globals)) {
        return *status;
    }
    return exit_status::usage;
}

// A standard stream the caller closed gets /dev/null opened the other way
// round (writing stdout fails, EBADF), so that no file or connection this
// process opens takes its number: output printed into it would corrupt an
// archive, or run in the daemon as a request.
void hold_closed_standard_streams() {
    for (int fd = STDIN_FILENO; fd <= STDERR_FILENO; ++fd) {
        if (::fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
            const int opened = ::open("/dev/null", fd == STDIN_FILENO ? O_WRONLY : O_RDONLY);
            if (opened >= 0 && opened != fd) {
                ::close(opened); // lower ones were closed too: taken in order
            }
        }
    }
}

// stdio gives up at EAGAIN: on a standard output that another process sharing
// it made non-blocking (a pipe to node, some terminal multiplexers), `ls` or
// `stats` would lose lines once the reader fell behind. There, stdout is
// replaced by a stream whose writes wait for room, as blocking writes would.
void wait_for_room_on_non_blocking_stdout() {
    const int flags = ::fcntl(STDOUT_FILENO, F_GETFL);
    if (flags < 0 || (flags & O_NONBLOCK) == 0) {
        return;
    }
    cookie_io_functions_t io{};
    io.write = [](void* /*cookie*/, const char* data, std::size_t size) -> ssize_t {
        if (const int error = cxx::write_all(STDOUT_FILENO, std::string_view(data, size))) {
            errno = error;
            return -1;
        }
        return static_cast<ssize_t>(size);
    };
    FILE* waiting = ::fopencookie(nullptr, "w", io);
    if (waiting == nullptr) {
        return; // stdio's own stream, which reports EAGAIN at the end
    }
    if (::isatty(STDOUT_FILENO) != 0) {
        std::setvbuf(waiting, nullptr, _IOLBF, BUFSIZ);
    }
    stdout = waiting; // glibc's stdout is an assignable variable
}

} // namespace
} // namespace pt2cache::client::cli

int main(int argc, char** argv) {
    namespace cli = pt2cache::client::cli;
    cli::hold_closed_standard_streams();
    cli::wait_for_room_on_non_blocking_stdout();
    int status = cli::exit_status::server;
    try {
        status = cli::run(argc, argv);
    } catch (const std::exception& e) {
        fmt::print(stderr, "pt2cache: {}\n", e.what());
        return cli::exit_status::server;
    }
    // Buffered output fails only now (a full disk, a closed stdout).
    if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
        fmt::print(stderr, "pt2cache: cannot write standard output: {}\n", std::strerror(errno));
        return status == cli::exit_status::ok ? cli::exit_status::usage : status;
    }
    return status;
}
