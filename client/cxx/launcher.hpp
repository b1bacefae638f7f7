// SPDX-License-Identifier: MIT
//
// pt2cache-cxx's work on one cacheable invocation (docs/cxx.md): compute the
// key, look the build up in the daemon, and on a miss run the real compiler,
// record what it read and store the result. The daemon can only ever make
// this slower, never make the compile fail.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "client/client.hpp"
#include "client/cxx/args.hpp"
#include "client/cxx/compiler.hpp"
#include "client/cxx/entries.hpp"
#include "client/cxx/includes.hpp"
#include "client/cxx/process.hpp"
#include "client/cxx/search_list.hpp"

namespace pt2cache::client::cxx {

// Environment variables that change what the compiler, assembler or linker
// does or says; they are part of the key.
inline constexpr std::string_view k_key_environment[] = {
    "CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "LIBRARY_PATH", "COMPILER_PATH",
    "GCC_EXEC_PREFIX", "SOURCE_DATE_EPOCH", "LANG", "LC_ALL", "LC_MESSAGES", "LC_CTYPE",
    "GCC_COMPARE_DEBUG", "LANGUAGE", "LD_RUN_PATH", "LDEMULATION", "GNUTARGET",
    // Diagnostics' colours, links and width, and where ld finds the
    // libraries of the libraries it links (a failure or a warning).
    "GCC_COLORS", "GCC_URLS", "GCC_EXTRA_DIAGNOSTIC_OUTPUT", "COLUMNS", "LD_LIBRARY_PATH"};

// Those of them that are search paths, rewritten like path arguments; the
// others are keyed as they are (LD_RUN_PATH is copied into a shared object).
inline constexpr std::string_view k_path_environment[] = {
    "CPATH",        "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH",
    "LIBRARY_PATH", "COMPILER_PATH",  "GCC_EXEC_PREFIX"};

// Environment variables that make an invocation uncacheable (the compiler
// writes a side file).
inline constexpr std::string_view k_uncacheable_environment[] = {"DEPENDENCIES_OUTPUT",
                                                                 "SUNPRO_DEPENDENCIES"};

struct LauncherOptions {
    std::string socket_path; // empty: PT2CACHE_SOCKET, else the client default
    std::chrono::milliseconds connect_timeout{500};
    std::chrono::milliseconds io_timeout{5000};
    // How long a launcher waits for a concurrent identical build.
    std::chrono::milliseconds collapse_wait{300'000};
    // PT2CACHE_CXX_LOG: where one line per decision goes: -1 nowhere,
    // stderr for `1`, an absolute path's file (appended to) otherwise.
    int log_fd = -1;
    bool hash_dir = false; // PT2CACHE_CXX_HASH_DIR: with -g, key the real paths

    bool verbose() const { return log_fd >= 0; }
    // One decision line to the log, if any: "pt2cache-cxx: MESSAGE" on
    // stderr, "pt2cache-cxx[PID]: MESSAGE" in a file (builds run in parallel).
    void log(std::string_view message) const;

    // From PT2CACHE_SOCKET, PT2CACHE_CXX_TIMEOUT_MS, PT2CACHE_CXX_LOG and
    // PT2CACHE_CXX_HASH_DIR.
    static LauncherOptions from_environment();
};

// One named input of the common key, for --explain.
struct KeyPart {
    std::string name;
    std::string shown; // what it is, as text (rewritten where it applies)
    std::string hash;  // XXH3-128 of the field's bytes, hex
};

class Launcher {
public:
    // `args` excludes argv[0].
    Launcher(RealCompiler compiler, std::vector<std::string> args, Invocation invocation,
             LauncherOptions options);

    // Hit: writes the output and replays; miss: builds (and stores). Ends the
    // process the way the real compiler would.
    [[noreturn]] void run();

    // The key inputs and what the daemon holds for them, as text.
    std::string explain();

private:
    // Sets m_common_key; false when this invocation must not be cached
    // (m_why says why).
    bool prepare();
    std::optional<CompilerFacts> compiler_facts();
    // Looks the build up (CXX_LOOKUP, or the manifest GET where the daemon
    // lacks it); true when the output was installed from a hit.
    bool lookup();
    // CXX_LOOKUP: whether it hit, or nullopt when the daemon refused the
    // request (then the manifest is read with GET).
    std::optional<bool> lookup_in_daemon();
    // Matches m_manifest against the inputs' current hashes and installs the
    // first matching variant's stored result.
    bool match_manifest();
    // Writes the output of a stored result and replays its stdout and stderr.
    bool install(std::span<const std::byte> value);
    [[noreturn]] void build_and_store();
    void store(const RunResult& result, const std::string& deps_path, std::int64_t start_ns);
    std::vector<FileHash> hash_files(const std::vector<std::string>& paths);
    // The current state of paths recorded in a manifest, expanded for this
    // invocation: directory pins answered from its rules, files hashed.
    std::vector<FileHash> current_state(std::span<const std::string_view> recorded);
    // The invocation's include search list (absolute directories), from the
    // compiler itself; nullopt when it would not say.
    std::optional<SearchList> search_list();
    // The build's input records: its dependencies and the files behind them,
    // then the shadowing `candidates`.
    Variant record_inputs(const std::vector<std::string>& deps,
                          const std::vector<std::string>& candidates, bool& cacheable);
    // For a precompiled header: marks in `named` the rewritten directories
    // its header's preprocessed text names (docs/cxx.md, "Directory pins").
    // False when the compiler could not preprocess it.
    bool mark_preprocessed_names(std::vector<bool>& named);
    // Every file a link would try for its libraries along the library search
    // `dirs`, in its order, up to the ones it takes, and what those take in
    // turn (linker scripts).
    std::vector<std::string> library_candidates(const std::vector<std::string>& dirs,
                                                bool& cacheable) const;
    std::vector<std::string> library_dirs(const CompilerFacts& facts) const;
    // Library `name` (of -lNAME) along `dirs`: every place tried is appended
    // to `tried`; the file taken, or nullopt where none of them has it.
    std::optional<std::string> find_library(std::string_view name,
                                            const std::vector<std::string>& dirs,
                                            std::vector<std::string>& tried) const;
    // False (logged) when the link input at `path` makes ld read files the
    // key cannot follow; the files it names are appended to `inputs`.
    bool follow_link_file(const std::string& path, const std::vector<std::string>& dirs,
                          std::vector<std::string>& inputs, int depth = 0) const;
    [[noreturn]] void pass_through();
    void log(std::string_view message) const;
    std::int64_t elapsed_ms() const; // since the launcher started

    RealCompiler m_compiler;
    std::vector<std::string> m_args;
    Invocation m_invocation;
    LauncherOptions m_options;
    Client m_client;
    bool m_daemon_ok = true;
    // For the log's "hit ... in N ms".
    std::chrono::steady_clock::time_point m_started = std::chrono::steady_clock::now();
    std::string m_cwd;
    bool m_exact_paths = false; // no path rewriting (-g with hash_dir)
    PathRewriter m_rewriter;
    std::optional<CompilerFacts> m_facts;
    // The programs and files behind the compiler (cc1plus, collect2, as, ld,
    // specs) as found for this invocation: inputs of every build.
    std::vector<std::string> m_programs;
    std::string m_common_key;
    // The manifest of the last lookup, which a build's variant joins.
    Manifest m_manifest;
    std::vector<KeyPart> m_parts;
    std::string m_why;
};

// A file's hash computed here (the fallback when the daemon cannot).
FileHash hash_file_locally(const std::string& path);

} // namespace pt2cache::client::cxx
