// SPDX-License-Identifier: MIT
#include "client/cli/top.hpp"

#include <atomic>
#include <chrono>
#include <csignal>
#include <ctime>
#include <optional>
#include <thread>
#include <unistd.h>

#include "client/cli/common.hpp"
#include "client/cli/top_model.hpp"
#include "client/cli/top_view.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace pt2cache::client::cli {

namespace {

using Clock = std::chrono::steady_clock;

std::atomic<bool> g_interrupted{false};
static_assert(std::atomic<bool>::is_always_lock_free, "used from a signal handler");

extern "C" void on_interrupt(int) {
    g_interrupted.store(true);
}

// SIGINT and SIGTERM end the loop instead of the process, so that the
// terminal is restored. Installed before curses starts: ncurses then leaves
// them alone.
void catch_interrupts() {
    struct sigaction action {};
    action.sa_handler = on_interrupt;
    sigemptyset(&action.sa_mask);
    action.sa_flags = 0; // no SA_RESTART: a blocked read returns EINTR
    ::sigaction(SIGINT, &action, nullptr);
    ::sigaction(SIGTERM, &action, nullptr);
}

struct Sample {
    nlohmann::json stats;
    Clock::time_point at;
};

// One STATS reply, parsed; the error message when it failed.
tl::expected<Sample, Error> sample(Client& client) {
    auto text = client.stats_json();
    if (!text) {
        return tl::unexpected(text.error());
    }
    const auto at = Clock::now();
    auto stats = nlohmann::json::parse(*text, nullptr, false);
    if (stats.is_discarded() || !stats.is_object() || !stats.contains("namespaces")) {
        return tl::unexpected(
            Error{ErrorKind::protocol, Status::internal, "unexpected STATS reply"});
    }
    return Sample{std::move(stats), at};
}

double seconds_between(Clock::time_point from, Clock::time_point to) {
    return std::chrono::duration<double>(to - from).count();
}

std::string wall_clock() {
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    ::localtime_r(&now, &local);
    return fmt::format("{:02}:{:02}:{:02}", local.tm_hour, local.tm_min, local.tm_sec);
}

// Sleeps until `until` in short steps; false when interrupted.
bool sleep_until(Clock::time_point until) {
    while (!g_interrupted.load()) {
        const auto now = Clock::now();
        if (now >= until) {
            return true;
        }
        std::this_thread::sleep_for(
            std::min<Clock::duration>(until - now, std::chrono::milliseconds(50)));
    }
    return false;
}

std::chrono::milliseconds interval_of(const TopArgs& args) {
    return std::chrono::milliseconds(static_cast<std::int64_t>(args.interval_s * 1000));
}

int run_plain(Client& client, const TopArgs& args, Sample first) {
    std::optional<Sample> previous = std::move(first);
    auto next = previous->at + interval_of(args);
    for (std::uint64_t done = 0; args.iterations == 0 || done < args.iterations; ++done) {
        if (!sleep_until(next)) {
            break;
        }
        next += interval_of(args);
        auto now = sample(client);
        if (!now) {
            fmt::print("{} unreachable: {}\n", wall_clock(), now.error().message);
            std::fflush(stdout);
            previous.reset();
            continue;
        }
        const auto frame = make_top_frame(now->stats, previous ? &previous->stats : nullptr,
                                          previous ? seconds_between(previous->at, now->at) : 0);
        fmt::print("{}\n", top_plain_line(frame, wall_clock()));
        std::fflush(stdout);
        previous = std::move(*now);
    }
    return exit_status::ok;
}

int run_screen(Client& client, const TopArgs& args, Sample first, TopScreen& screen) {
    std::optional<Sample> previous = std::move(first);
    std::optional<TopFrame> frame = make_top_frame(previous->stats, nullptr, 0);
    std::string error;
    const auto redraw = [&] {
        screen.draw(top_screen_lines(frame ? &*frame : nullptr, error, args.interval_s));
    };
    redraw();
    auto next = previous->at + interval_of(args);
    for (std::uint64_t done = 0; args.iterations == 0 || done < args.iterations;) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now());
        const auto input = screen.wait(std::max(left, std::chrono::milliseconds(0)), g_interrupted);
        if (input == TopScreen::Input::quit) {
            break;
        }
        if (input == TopScreen::Input::redraw) {
            redraw();
            continue;
        }
        if (Clock::now() < next) {
            continue;
        }
        next += interval_of(args);
        ++done;
        auto now = sample(client);
        if (!now) {
            error = now.error().message;
            previous.reset();
        } else {
            error.clear();
            frame = make_top_frame(now->stats, previous ? &previous->stats : nullptr,
                                   previous ? seconds_between(previous->at, now->at) : 0);
            previous = std::move(*now);
        }
        redraw();
    }
    return exit_status::ok;
}

} // namespace

CLI::App* add_top_command(CLI::App& app, TopArgs& args) {
    auto* top = app.add_subcommand(
        "top", "Live view: ops/s, hit ratio, latency, tiers, queues, remote state, clients");
    top->add_option("--interval", args.interval_s, "Refresh every SECONDS (default 1)")
        ->type_name("SECONDS")
        ->check(k_finite)
        ->check(CLI::Range(0.1, 3600.0));
    top->add_option("--iterations", args.iterations,
                    "Exit after N refreshes (default: run until q or Ctrl-C)")
        ->type_name("N")
        ->check(k_count);
    top->add_flag("--plain", args.plain,
                  "One line per refresh even on a terminal (the default when stdout is not one)");
    return top;
}

int run_top(const Globals& globals, const TopArgs& args) {
    catch_interrupts();
    auto client = make_client(globals);
    auto first = sample(client);
    if (!first) {
        return report(first.error());
    }
    auto screen = args.plain ? nullptr : TopScreen::open();
    if (!screen) {
        return run_plain(client, args, std::move(*first));
    }
    return run_screen(client, args, std::move(*first), *screen);
}

} // namespace pt2cache::client::cli
