// SPDX-License-Identifier: MIT
//
// Where the compiler looks for headers, and which header names a file asks
// for: what the launcher needs to record the files that would shadow the
// headers a build used (docs/cxx.md, "Shadowing candidates"). Pure
// functions: no I/O.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "client/cxx/args.hpp"

namespace pt2cache::client::cxx {

// A header name as a file gives it to #include, #include_next, #import or
// __has_include(_next).
struct IncludeName {
    std::string name;
    bool quoted = false; // "name" (searched from the file's directory first)
    bool next = false;   // #include_next, __has_include_next: the search
                         // starts after the directory of the file asking
    bool asks = false;   // __has_include(_next): only asks whether it exists

    bool operator==(const IncludeName&) const = default;
};

// Every literal header name `text` asks for, in order, including those in
// comments and in branches the preprocessor skips (more names only mean more
// candidates). A name computed by a macro is not seen.
std::vector<IncludeName> include_names(std::string_view text);

// The arguments (argv[0] included) that make `compiler` print its include
// search list for the invocation's options: `args` without the source, the
// output, -c, -include and link inputs, preprocessing an empty C++ input with
// -v. C++, whatever the source's language: its list holds C's.
std::vector<std::string> search_probe_args(const std::string& compiler,
                                           std::span<const std::string> args,
                                           const Invocation& invocation);

// An include search list as the probe prints it, directories as printed
// (maybe relative).
struct SearchList {
    std::vector<std::string> quoted;  // searched for "name" only, in order
    std::vector<std::string> bracket; // then for both, in order
    // Left out as nonexistent: they may exist when the next build runs, at
    // a place in the order that the compiler does not print.
    std::vector<std::string> absent;
};

// Nullopt when the output holds no complete list.
std::optional<SearchList> parse_search_list(std::string_view verbose_output);

} // namespace pt2cache::client::cxx
