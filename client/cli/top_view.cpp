// SPDX-License-Identifier: MIT
#include "client/cli/top_view.hpp"

#include <algorithm>
#include <unistd.h>

#include "client/cli/format.hpp"

// Functions, not macros: curses.h would otherwise define move(), erase()...
#define NCURSES_NOMACROS
#include <curses.h>

#include <fmt/format.h>

namespace pt2cache::client::cli {

namespace {

std::string percent_of(std::uint64_t part, std::uint64_t whole) {
    if (whole == 0) {
        return "-";
    }
    return fmt::format("{:.1f}%", 100.0 * static_cast<double>(part) / static_cast<double>(whole));
}

std::string level_line(std::string_view name, const std::optional<Level>& level) {
    if (!level) {
        return fmt::format("{:<8} off", name);
    }
    return fmt::format("{:<8} {} of {} ({}), {} entries", name, human_bytes(level->bytes),
                       human_bytes(level->capacity), percent_of(level->bytes, level->capacity),
                       level->count);
}

std::string disk_queue_line(const TopFrame& frame) {
    if (!frame.disk) {
        return {};
    }
    if (!frame.disk_queue) {
        return "  write queue: none (disk.write_mode = sync)";
    }
    const auto& queue = *frame.disk_queue;
    return fmt::format("  write queue {} entries, {} of {}, oldest {:.1f} s", queue.entries,
                       human_bytes(queue.bytes), human_bytes(queue.capacity), queue.oldest_age_s);
}

std::vector<std::string> remote_lines(const TopFrame& frame) {
    if (!frame.remote) {
        return {fmt::format("{:<8} off", "remote")};
    }
    const auto& remote = *frame.remote;
    std::string state = remote.state;
    if (remote.breaker_open) {
        state = "BREAKER OPEN (" + state + ")";
    }
    return {
        fmt::format("{:<8} {}{}  {}", "remote", state, remote.read_only ? ", read-only" : "",
                    remote.endpoint),
        fmt::format("  errors {}/s ({} of operations), write-behind queue {} entries, {} of {}",
                    rate_text(remote.errors_per_s), ratio_text(remote.error_ratio),
                    remote.queue.count, human_bytes(remote.queue.bytes),
                    human_bytes(remote.queue.capacity)),
    };
}

} // namespace

std::vector<ScreenLine> top_screen_lines(const TopFrame* frame, const std::string& error,
                                         double interval_s) {
    using Style = ScreenLine::Style;
    std::vector<ScreenLine> lines;
    if (frame == nullptr) {
        lines.push_back(
            {fmt::format("pt2cache top, every {:.1f} s   (q: quit)", interval_s), Style::title});
    } else {
        lines.push_back(
            {fmt::format("pt2cached {}  pid {}  up {}  every {:.1f} s   (q: quit)", frame->version,
                         frame->pid, human_duration(frame->uptime_s), interval_s),
             Style::title});
    }
    lines.push_back({error.empty() ? std::string() : "pt2cached unreachable: " + error,
                     error.empty() ? Style::plain : Style::error});
    if (frame == nullptr) {
        return lines;
    }
    lines.push_back({fmt::format(
        "ops/s {}   hit {}   get p50 {} p99 {}   put p50 {} p99 {}", rate_text(frame->ops_per_s),
        ratio_text(frame->hit_ratio), latency_text(frame->get_latency, false),
        latency_text(frame->get_latency, true), latency_text(frame->put_latency, false),
        latency_text(frame->put_latency, true))});
    lines.push_back(
        {fmt::format("clients {}   compile time saved {:.1f} s ({} s/s)", frame->clients,
                     frame->compile_saved_s, rate_text(frame->compile_saved_per_s))});
    lines.push_back({});
    lines.push_back({level_line("memory", frame->memory)});
    lines.push_back({level_line("disk", frame->disk)});
    if (auto queue = disk_queue_line(*frame); !queue.empty()) {
        lines.push_back({std::move(queue)});
    }
    for (auto& line : remote_lines(*frame)) {
        lines.push_back({std::move(line)});
    }
    lines.push_back({});
    std::size_t width = std::string_view("NAMESPACE").size();
    for (const auto& row : frame->namespaces) {
        width = std::max(width, row.ns.size());
    }
    constexpr auto k_row = "{:<{}}  {:>9}  {:>9}  {:>6}  {:>8}  {:>8}";
    lines.push_back(
        {fmt::format(k_row, "NAMESPACE", width, "GET/S", "PUT/S", "HIT", "GET P50", "GET P99"),
         Style::heading});
    if (frame->namespaces.empty()) {
        lines.push_back({"no cache activity yet"});
    }
    for (const auto& row : frame->namespaces) {
        lines.push_back(
            {fmt::format(k_row, row.ns, width, rate_text(row.gets_per_s), rate_text(row.puts_per_s),
                         ratio_text(row.hit_ratio), latency_text(row.get_latency, false),
                         latency_text(row.get_latency, true))});
    }
    return lines;
}

std::unique_ptr<TopScreen> TopScreen::open() {
    if (::isatty(STDIN_FILENO) == 0 || ::isatty(STDOUT_FILENO) == 0) {
        return nullptr;
    }
    SCREEN* screen = ::newterm(nullptr, stdout, stdin);
    if (screen == nullptr) {
        return nullptr;
    }
    // A terminal that cannot place the cursor (TERM=dumb, emacs's shell)
    // would show an empty screen: plain lines instead.
    const char* cursor_address = ::tigetstr("cup");
    if (cursor_address == nullptr || cursor_address == reinterpret_cast<char*>(-1)) {
        ::endwin();
        ::delscreen(screen);
        return nullptr;
    }
    return std::unique_ptr<TopScreen>(new TopScreen(screen));
}

TopScreen::TopScreen(::screen* terminal)
    : m_screen(terminal) {
    ::cbreak();
    ::noecho();
    ::nonl();
    ::keypad(stdscr, TRUE);
    ::curs_set(0);
}

TopScreen::~TopScreen() {
    ::endwin();
    ::delscreen(m_screen);
}

void TopScreen::draw(const std::vector<ScreenLine>& lines) {
    ::erase();
    const int rows = LINES;
    const int cols = COLS;
    for (int y = 0; y < rows && y < static_cast<int>(lines.size()); ++y) {
        const auto& line = lines[static_cast<std::size_t>(y)];
        attr_t attributes = A_NORMAL;
        switch (line.style) {
        case ScreenLine::Style::title:
            attributes = A_REVERSE;
            break;
        case ScreenLine::Style::heading:
        case ScreenLine::Style::error:
            attributes = A_BOLD;
            break;
        case ScreenLine::Style::plain:
            break;
        }
        ::attrset(attributes);
        if (line.style == ScreenLine::Style::title) {
            ::mvhline(y, 0, ' ', cols); // the bar spans the screen
        }
        ::mvaddnstr(y, 0, line.text.c_str(), cols);
        ::attrset(A_NORMAL);
    }
    ::refresh();
}

TopScreen::Input TopScreen::wait(std::chrono::milliseconds timeout,
                                 const std::atomic<bool>& interrupted) {
    constexpr auto k_poll = std::chrono::milliseconds(100);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
        if (interrupted.load()) {
            return Input::quit;
        }
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) {
            return Input::none;
        }
        ::timeout(static_cast<int>(std::min(left, k_poll).count()));
        const int key = ::getch();
        if (key == 'q' || key == 'Q' || key == 3 /* Ctrl-C, should it arrive as a key */) {
            return Input::quit;
        }
        if (key == KEY_RESIZE || key == 12 /* Ctrl-L */) {
            return Input::redraw;
        }
    }
}

} // namespace pt2cache::client::cli
