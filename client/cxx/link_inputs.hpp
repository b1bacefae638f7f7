// SPDX-License-Identifier: MIT
//
// What a file handed to the linker is, and the files a GNU ld script among
// them makes it read (docs/cxx.md, "Cacheable invocations"). Pure
// functions: no I/O.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pt2cache::client::cxx {

enum class LinkFileKind {
    elf,          // an object or shared object
    archive,      // "!<arch>": its members are in it
    thin_archive, // "!<thin>": only its members' names are
    script,       // anything else: ld reads it as a linker script
};

// From the file's first bytes (at least 8 when it has them).
LinkFileKind link_file_kind(std::string_view head);

// The files a linker script such as glibc's libc.so or GCC's libgcc_s.so
// names in its GROUP, INPUT and AS_NEEDED lists, in order, as written: an
// absolute path, a relative name (ld looks in the script's directory, the
// working directory, then along the library search) or "-lNAME" (a library
// search). nullopt when it
// holds anything else that could make ld read a file (SEARCH_DIR, INCLUDE, a
// quoted name, a command the key does not follow), or cannot be read: such a
// script is not followed.
std::optional<std::vector<std::string>> linker_script_inputs(std::string_view text);

} // namespace pt2cache::client::cxx
