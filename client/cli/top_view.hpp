// SPDX-License-Identifier: MIT
//
// `pt2cache top`'s full-screen view, drawn with ncurses: `top_screen_lines`
// lays a frame out as text (pure), `TopScreen` paints it and reads keys.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "client/cli/top_model.hpp"

struct screen; // curses' SCREEN

namespace pt2cache::client::cli {

struct ScreenLine {
    enum class Style { plain, title, heading, error };
    std::string text;
    Style style = Style::plain;
};

// The screen's lines, top to bottom: a title bar, the daemon-wide figures,
// the tiers, then one row per namespace. `frame` may be null (no reply yet);
// `error` (empty: none) says why the last refresh failed.
std::vector<ScreenLine> top_screen_lines(const TopFrame* frame, const std::string& error,
                                         double interval_s);

// The terminal in curses mode for its lifetime; restores it when destroyed.
class TopScreen {
public:
    // The screen, or nullptr when stdin or stdout is not a terminal or
    // curses does not know the terminal (TERM unset or unknown): the caller
    // then prints plain lines. (initscr() would exit the process with
    // status 1; without a terminal on stdin, getch() returns at once and the
    // wait spun.)
    static std::unique_ptr<TopScreen> open();
    ~TopScreen();
    TopScreen(const TopScreen&) = delete;
    TopScreen& operator=(const TopScreen&) = delete;

    void draw(const std::vector<ScreenLine>& lines);

    enum class Input { none, quit, redraw };
    // Waits up to `timeout` for a key, returning early on `q`, Ctrl-C (as a
    // key, or `interrupted` set by a signal handler) and a resize.
    Input wait(std::chrono::milliseconds timeout, const std::atomic<bool>& interrupted);

private:
    explicit TopScreen(::screen* terminal);
    ::screen* m_screen;
};

} // namespace pt2cache::client::cli
