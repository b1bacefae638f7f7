// SPDX-License-Identifier: MIT
//
// Directory pins (docs/cxx.md, "Directory pins"): which rewritten
// directories a build's inputs or output name, so that its variant matches
// only where the placeholder expands to that same directory. Pure functions:
// no I/O.
#pragma once

#include <cstddef>
#include <span>
#include <string_view>
#include <vector>

#include "client/cxx/args.hpp"

namespace pt2cache::client::cxx {

// Which of a directory's occurrences count as naming it.
enum class Occurrences {
    all,
    // All but a string literal that is the directory itself ("/tmp" or
    // "/tmp/": <cstdio>'s P_tmpdir, <paths.h>'s _PATH_TMP). In a header's
    // text such a literal names no file that an #include could open, and
    // counting it would pin every build including <cstdio> to its TMPDIR.
    // An output keeps it: there the string is the directory (a RUNPATH).
    but_quoted_alone,
};

// Marks in `named` each rule whose directory `bytes` contain, as narrow,
// UTF-16 or UTF-32 text (`which` occurrences).
void mark_named(std::string_view bytes, const std::vector<PathRewriter::Rule>& rules,
                std::vector<bool>& named, Occurrences which = Occurrences::all);

// Marks in `named` the rewritten directories an ELF object or shared object
// names outside its debug information (a __FILE__ string, an assert message,
// a RUNPATH). Any other output (a precompiled header) is not looked at: its
// format mixes in debug information and the header's own path, which would
// pin every one; its preprocessed text is (Launcher::mark_preprocessed_names).
// False when the ELF file's section table cannot be read.
bool mark_output_names(std::span<const std::byte> file,
                       const std::vector<PathRewriter::Rule>& rules, std::vector<bool>& named);

} // namespace pt2cache::client::cxx
