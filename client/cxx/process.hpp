// SPDX-License-Identifier: MIT
//
// Running the real compiler: exec (pass-through) or spawn with its stdout
// and stderr captured.
#pragma once

#include <chrono>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace pt2cache::client::cxx {

struct RunResult {
    bool started = false; // false: could not be spawned (errno in `error`)
    int exit_code = 0;    // the exit status, or 128 + signal
    int signal = 0;       // the signal that ended it, 0 if none
    std::string out;      // what it wrote to stdout
    std::string err;      // what it wrote to stderr
    std::chrono::milliseconds wall{0};
    std::string error;
};

// Runs `program` with `args` (args[0] is argv[0]) and captures its output.
// The environment is ours.
RunResult run_captured(const std::string& program, std::span<const std::string> args);

// Replaces this process with `program` (args[0] is argv[0]); returns only on
// failure, with errno set.
void exec_program(const std::string& program, std::span<const std::string> args);

// Writes all of `text` to `fd`: retries short and interrupted writes, and
// waits for room when `fd` is non-blocking (a terminal or pipe that another
// process made O_NONBLOCK would otherwise cut the output at EAGAIN). Returns
// 0, or the errno of the write that failed.
int write_all(int fd, std::string_view text);
int write_all(int fd, std::span<const std::byte> bytes);

// The environment variable `name`, or `fallback` when it is unset.
std::string env_or(const char* name, std::string fallback = {});

// Ends this process as a process that ended with `result` would: the same
// exit status, or the same signal.
[[noreturn]] void exit_like(const RunResult& result);

} // namespace pt2cache::client::cxx
