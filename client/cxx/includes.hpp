// SPDX-License-Identifier: MIT
//
// Which header names a file asks for, and its text without comments: with
// the search list (search_list.hpp), what the launcher needs to record the
// files that would shadow the headers a build used (docs/cxx.md, "Shadowing
// candidates"). Pure functions: no I/O.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

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

// `text` with each comment replaced by a space and every backslash-newline
// removed, as the preprocessor sees it (string and character literals kept).
std::string without_comments(std::string_view text);

// The macros through which files of a build name headers, from all their
// texts (without comments) at once: a macro may be defined in one file and
// used in another.
struct IncludeMacros {
    // Function-like macros that ask __has_include, directly or through
    // another such macro (`#define HAS(x) __has_include(x)`).
    std::vector<std::string> wrappers;
    // Object-like macros given to #include or #include_next (`#include
    // CONFIG`), or named by the body of one.
    std::vector<std::string> included;
    // The same for __has_include and its wrappers.
    std::vector<std::string> asked;
};
IncludeMacros include_macros(std::span<const std::string_view> texts);

// Every literal header name a file asks for: in #include, #import,
// #include_next (also spelt %:, or split by comments or line splices),
// __has_include(_next) and the wrappers of it, and the body of a macro given
// to one of them that is a header name (`#define CONFIG <c.h>`; where it is
// used is not followed: as a quoted name it is looked for beside the file
// that defines it). `raw` is the file's text, `clean`
// the same without comments. Names in comments and in branches the
// preprocessor skips come too: more names only mean more candidates. A name
// built from macro arguments or by token pasting is not seen.
std::vector<IncludeName> include_names(std::string_view raw, std::string_view clean,
                                       const IncludeMacros& macros);
// The same for one file alone.
std::vector<IncludeName> include_names(std::string_view text);

} // namespace pt2cache::client::cxx
