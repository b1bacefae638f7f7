// SPDX-License-Identifier: MIT
//
// Helpers shared by the files of `pt2cache`'s subcommands (commands.cpp,
// autotune_commands.cpp).
#pragma once

#include <string_view>

#include "client/cli/commands.hpp"
#include "client/client.hpp"

#include <CLI/CLI.hpp>

namespace pt2cache::client::cli {

// Prints "pt2cache: <message>" on stderr.
void complain(std::string_view message);

// Complains about `error` and returns its exit status (unreachable or server).
int report(const Error& error);

// A client for the socket of --socket, else the one pt2cached would choose;
// no fail-fast back-off, --timeout for connecting and each call.
Client make_client(const Globals& globals);

// Option checks CLI11 2.1 leaves out: a count of decimal digits only (it took
// "-1" as 2^64 - 1), and a finite number (it let "nan" through a range).
extern const CLI::Validator k_count;
extern const CLI::Validator k_finite;

} // namespace pt2cache::client::cli
