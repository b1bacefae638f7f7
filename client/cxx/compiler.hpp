// SPDX-License-Identifier: MIT
//
// Finding the real compiler behind pt2cache-cxx, and what identifies it in a
// key (docs/cxx.md, "The key").
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <tl/expected.hpp>

namespace pt2cache::client::cxx {

struct RealCompiler {
    std::string path;     // what is executed (found on PATH or PT2CACHE_CXX)
    std::string realpath; // `path` with every symlink resolved
};

// PT2CACHE_CXX when set (a name without '/' is looked up on PATH), else the
// first program on PATH named like argv[0] (g++, c++, clang++, ...; "g++" when
// argv[0] is pt2cache-cxx) that is not this launcher.
tl::expected<RealCompiler, std::string> find_real_compiler(std::string_view argv0);

// The stat fields that stand for a compiler binary's identity.
struct CompilerStamp {
    std::uint64_t size = 0;
    std::int64_t mtime_ns = 0;
    std::int64_t ctime_ns = 0;
    std::uint64_t inode = 0;
    std::uint64_t device = 0;
};
std::optional<CompilerStamp> stamp_compiler(const std::string& realpath);

// What pt2cache-cxx asks the compiler once per machine and remembers in the
// daemon (key "c-…"): its --version output, what -march=native and
// -mtune=native expand to, the library directories it passes to the linker
// (in that order), the start files it links into a shared object, and the
// programs and files behind it (cc1plus, collect2, as, ld, the specs file)
// as -print-prog-name prints them: absolute, or a name looked up on PATH.
struct CompilerFacts {
    std::string version;
    std::string native;
    std::vector<std::string> library_dirs;
    std::vector<std::string> start_files;
    std::vector<std::string> programs;

    std::string encode() const;
    static std::optional<CompilerFacts> decode(std::string_view text);
};

// Runs the compiler to learn its facts; nullopt if it cannot be run or fails.
std::optional<CompilerFacts> query_compiler(const RealCompiler& compiler);

// The libraries (-l names, without the -l) the driver passes to the linker
// for `args`, as `-###` prints the link: the invocation's own and those its
// specs add (-fopenmp's gomp and pthread, -fsanitize='s asan, ...). nullopt
// if the compiler cannot be run, fails or prints no command.
std::optional<std::vector<std::string>> linked_libraries(const RealCompiler& compiler,
                                                         std::span<const std::string> args);

// The first executable called `name` on PATH (or `name` itself when it holds a
// '/'); empty when there is none.
std::string find_program(const std::string& name);

// A fingerprint of this CPU (CPUID leaves on x86, /proc/cpuinfo elsewhere)
// and host name, so that remembered -march=native expansions are never shared
// between different machines.
std::string machine_fingerprint();

} // namespace pt2cache::client::cxx
