// SPDX-License-Identifier: MIT
//
// The include search list of an invocation, as the compiler prints it with
// -v: which directories it looks in, in which order, and which it left out
// (docs/cxx.md, "Shadowing candidates"). Pure functions: no I/O.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "client/cxx/args.hpp"

namespace pt2cache::client::cxx {

// The arguments (argv[0] included) that make `compiler` print its include
// search list for the invocation's options: `args` without the source, the
// output, -c, -include and link inputs, preprocessing an empty C++ input with
// -v and -Wno-error. C++, whatever the source's language: its list holds C's.
std::vector<std::string> search_probe_args(const std::string& compiler,
                                           std::span<const std::string> args,
                                           const Invocation& invocation);

// An include search list as the probe prints it, directories as printed
// (maybe relative).
struct SearchList {
    std::vector<std::string> quoted;  // searched for "name" only, in order
    std::vector<std::string> bracket; // then for both, in order
    // Left out as nonexistent, as the duplicate of another (the same
    // directory through another path, which may not stay so), or as a file
    // ("not a directory"): at a place in the order that the compiler does
    // not print.
    std::vector<std::string> absent;
};

// Nullopt when the output holds no complete list.
std::optional<SearchList> parse_search_list(std::string_view verbose_output);

} // namespace pt2cache::client::cxx
