// SPDX-License-Identifier: MIT
//
// pt2cache-cxx on a miss: run the real compiler with dependency output, then
// record what it read and store the result.
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <memory>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <unordered_set>

#include "client/cxx/includes.hpp"
#include "client/cxx/launcher.hpp"
#include "client/cxx/mapped_file.hpp"
#include "client/cxx/pins.hpp"
#include "client/cxx/shadowing.hpp"
#include "proto/bytes.hpp"
#include "proto/cxx_value.hpp"

#include <fmt/format.h>

namespace pt2cache::client::cxx {

namespace wire = proto::cxx;

namespace {

std::int64_t to_ns(const struct timespec& t) {
    return static_cast<std::int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

std::int64_t now_ns() {
    struct timespec t {};
    ::clock_gettime(CLOCK_REALTIME, &t);
    return to_ns(t);
}

FileHash status_only(FileStatus status) {
    FileHash hash;
    hash.status = status;
    return hash;
}

std::string temp_dir() {
    const char* tmp = std::getenv("TMPDIR");
    return tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
}

// What makes a build's result depend on the time or on files' times, in the
// text of an input as the preprocessor sees it (comments gone, lines spliced):
// __DATE__, __TIME__ and __TIMESTAMP__ (a header's mtime), and `#pragma GCC
// dependency`, which compares mtimes. Empty if none. A literal that only
// mentions one counts too; a name pasted together from pieces (`__TI ##
// ME__`) is not seen (docs/cxx.md).
std::string_view time_dependence(std::string_view clean) {
    for (const std::string_view macro : {"__DATE__", "__TIME__", "__TIMESTAMP__"}) {
        if (clean.find(macro) != std::string_view::npos) {
            return macro;
        }
    }
    constexpr std::string_view k_word = "dependency";
    for (auto at = clean.find(k_word); at != std::string_view::npos;
         at = clean.find(k_word, at + 1)) {
        auto before = clean.substr(0, at);
        while (!before.empty() && (before.back() == ' ' || before.back() == '\t')) {
            before.remove_suffix(1);
        }
        if (before.size() < at && before.ends_with("GCC")) {
            return "#pragma GCC dependency";
        }
    }
    return {};
}

} // namespace

FileHash hash_file_locally(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
        return status_only(errno == ENOENT || errno == ENOTDIR ? FileStatus::not_found
                                                               : FileStatus::unreadable);
    }
    if (!S_ISREG(st.st_mode)) {
        return status_only(FileStatus::not_regular);
    }
    if (static_cast<std::uint64_t>(st.st_size) > (2ull << 30)) {
        return status_only(FileStatus::too_large);
    }
    MappedFile file(path);
    if (!file.ok()) {
        return status_only(FileStatus::unreadable);
    }
    FileHash hash;
    hash.status = FileStatus::ok;
    hash.size = file.bytes().size();
    hash.hash = digest_of(file.bytes());
    return hash;
}

std::optional<SearchList> Launcher::search_list() {
    const auto probe = search_probe_args(m_compiler.path, m_args, m_invocation);
    const auto result = run_captured(m_compiler.path, probe);
    if (!result.started || result.exit_code != 0) {
        return std::nullopt;
    }
    auto list = parse_search_list(result.err);
    if (list) {
        for (auto* dirs : {&list->quoted, &list->bracket, &list->absent}) {
            for (auto& dir : *dirs) {
                dir = absolute_path(dir, m_cwd);
            }
        }
    }
    return list;
}

Variant Launcher::record_inputs(const std::vector<std::string>& deps,
                                const std::vector<std::string>& candidates, bool& cacheable) {
    std::vector<std::string> paths;
    // The output is never an input (a header's own .gch is the output of its
    // precompilation).
    std::unordered_set<std::string> seen{absolute_path(m_invocation.output_path, m_cwd)};
    const auto add = [&](const std::string& path) {
        if (seen.insert(path).second) {
            paths.push_back(path);
        }
    };
    for (const auto& dep : deps) {
        const auto path = absolute_path(dep, m_cwd);
        add(path);
        add(path + ".gch"); // GCC's dependency output never names a .gch it used
    }
    for (const auto& include : m_invocation.includes) {
        const auto path = absolute_path(include, m_cwd);
        add(path);
        add(path + ".gch");
    }
    for (const auto& program : m_programs) {
        add(absolute_path(program, m_cwd));
    }
    if (m_invocation.kind == Kind::shared_object) {
        const auto dirs = library_dirs(*m_facts);
        for (const auto& input : m_invocation.link_inputs) {
            const auto path = absolute_path(input, m_cwd);
            add(path);
            std::vector<std::string> named;
            if (!follow_link_file(path, dirs, named)) {
                cacheable = false;
            }
            for (const auto& file : named) {
                add(file);
            }
        }
        for (const auto& path : m_facts->start_files) {
            add(absolute_path(path, m_cwd));
        }
        for (const auto& path : library_candidates(dirs, cacheable)) {
            add(path);
        }
    }
    // Shadowing candidates last: whatever their status, it is recorded (a
    // directory named like a header is passed over by the compiler as long
    // as it stays one).
    const std::size_t first_candidate = paths.size();
    for (const auto& path : candidates) {
        add(path);
    }
    const auto hashes = hash_files(paths);
    Variant variant;
    variant.reserve(paths.size());
    for (std::size_t i = 0; i < paths.size(); ++i) {
        const auto& hash = hashes[i];
        const bool pch_directory =
            paths[i].ends_with(".gch") && hash.status == FileStatus::not_regular;
        if (pch_directory || (i < first_candidate && hash.status != FileStatus::ok &&
                              hash.status != FileStatus::not_found)) {
            // A directory of precompiled headers, an unreadable header...:
            // what the compiler used cannot be pinned down.
            log(fmt::format("not stored: input {} is not a readable file", paths[i]));
            cacheable = false;
        }
        InputRecord input;
        input.path = m_rewriter.rewrite(paths[i]);
        input.status = hash.status;
        input.size = hash.size;
        input.hash = hash.hash;
        variant.push_back(std::move(input));
    }
    return variant;
}

bool Launcher::mark_preprocessed_names(std::vector<bool>& named) {
    // What the precompiled header holds apart from its debug information
    // and its own path: the header preprocessed, without line markers. A
    // __FILE__ expanded there is a string naming the directory.
    auto text_path = temp_dir() + "/pt2cache-cxx-XXXXXX";
    const int fd = ::mkstemp(text_path.data());
    if (fd < 0) {
        return false;
    }
    ::close(fd);
    std::vector<std::string> argv;
    argv.reserve(m_args.size() + 3);
    argv.push_back(m_compiler.path);
    argv.insert(argv.end(), m_args.begin(), m_args.end());
    auto& output = argv[m_invocation.output + 1];
    output = output == m_invocation.output_path ? text_path : "-o" + text_path;
    argv.emplace_back("-E");
    argv.emplace_back("-P");
    const auto result = run_captured(m_compiler.path, argv);
    bool ok = result.started && result.exit_code == 0;
    if (ok) {
        MappedFile text(text_path);
        ok = text.ok();
        mark_named(proto::as_text(text.bytes()), m_rewriter.rules(), named);
    }
    ::unlink(text_path.c_str());
    return ok;
}

void Launcher::store(const RunResult& result, const std::string& deps_path, std::int64_t start_ns) {
    std::string deps_text;
    {
        MappedFile deps(deps_path);
        if (!deps.ok()) {
            log("not stored: no dependency output");
            return;
        }
        deps_text.assign(proto::as_text(deps.bytes()));
    }
    const auto deps = parse_make_deps(deps_text);
    if (deps.empty()) {
        log("not stored: empty dependency output");
        return;
    }
    // Where a header created later would be taken instead of one this
    // build used (docs/cxx.md, "Shadowing candidates").
    auto search = search_list();
    if (!search) {
        log("not stored: the compiler did not print its include search list");
        return;
    }
    // Every directory the invocation names for the search, as given too: the
    // compiler drops one that is a file or the duplicate of another, and
    // either may change.
    for (const auto& dir : m_invocation.include_dirs) {
        search->absent.push_back(absolute_path(dir, m_cwd));
    }
    for (const auto* variable : {"CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH"}) {
        const char* value = std::getenv(variable);
        for (std::string_view rest = value != nullptr ? value : ""; !rest.empty();) {
            const auto colon = rest.find(':');
            // An empty entry is the working directory.
            search->absent.push_back(absolute_path(rest.substr(0, colon), m_cwd));
            rest = colon == std::string_view::npos ? std::string_view() : rest.substr(colon + 1);
        }
    }
    ShadowCandidates shadows(std::move(*search), absolute_path(m_invocation.source_path, m_cwd));
    // A header that names a rewritten directory itself (`#include
    // "/tmp/x/v.h"`) makes the compiler open that very path wherever it
    // runs, not the file the placeholder expands to there; an output that
    // names one (__FILE__, an assert message, a RUNPATH) carries it into
    // every hit. Either way the build is pinned to that directory (docs/cxx.md,
    // "Directory pins"): its variant matches only where the placeholder
    // expands to it again.
    const auto& rules = m_rewriter.rules();
    std::vector<bool> named(rules.size(), false);
    struct Text {
        std::string path;
        std::unique_ptr<MappedFile> file;
        std::string clean;     // without comments
        std::string synthetic; // the text when it is not the file's
    };
    std::vector<Text> texts;
    for (const auto& dep : deps) {
        auto path = absolute_path(dep, m_cwd);
        shadows.add_dependency(path);
        if (path.ends_with(".gch")) {
            continue; // an input hashed whole: its content pins what it names
        }
        auto file = std::make_unique<MappedFile>(path);
        const auto text = proto::as_text(file->bytes());
        mark_named(text, rules, named, Occurrences::but_quoted_alone);
        auto clean = without_comments(text);
        texts.push_back(Text{std::move(path), std::move(file), std::move(clean), {}});
    }
    // And the -D macros, as if the source defined them (`-DCONFIG="c.h"`
    // with `#include CONFIG`): a quoted name is looked for beside it.
    {
        std::string defines;
        for (std::size_t i = 0; i < m_args.size(); ++i) {
            std::string_view define = m_args[i];
            if (define == "-D" && i + 1 < m_args.size()) {
                define = m_args[++i];
            } else if (define.starts_with("-D")) {
                define.remove_prefix(2);
            } else {
                continue;
            }
            const auto equals = define.find('=');
            defines +=
                fmt::format("#define {} {}\n", define.substr(0, equals),
                            equals == std::string_view::npos ? "1" : define.substr(equals + 1));
        }
        auto file = std::make_unique<MappedFile>("");
        texts.push_back(Text{absolute_path(m_invocation.source_path, m_cwd), std::move(file),
                             defines, defines});
    }
    // The macros that name headers may be defined in any of them.
    std::vector<std::string_view> clean_texts;
    for (const auto& text : texts) {
        if (const auto uses = time_dependence(text.clean); !uses.empty()) {
            log(fmt::format("not stored: {} uses {}", text.path, uses));
            return;
        }
        clean_texts.push_back(text.clean);
    }
    const auto macros = include_macros(clean_texts);
    for (const auto& text : texts) {
        const auto raw =
            text.file->ok() ? proto::as_text(text.file->bytes()) : std::string_view(text.synthetic);
        shadows.add_names(text.path, include_names(raw, text.clean, macros));
    }
    for (const auto& include : m_invocation.includes) {
        shadows.add_forced_include(include, m_cwd, true);
    }
    for (const auto& file : m_invocation.macro_files) {
        shadows.add_forced_include(file, m_cwd, false);
    }
    bool cacheable = true;
    auto variant = record_inputs(deps, shadows.paths(), cacheable);
    if (!cacheable) {
        return;
    }
    // An input changed after this launcher started: the hash may not be
    // what the compiler read.
    for (const auto& input : variant) {
        if (input.status != FileStatus::ok) {
            continue;
        }
        struct stat st {};
        const auto path = m_rewriter.expand(input.path);
        if (::stat(path.c_str(), &st) != 0 || to_ns(st.st_mtim) >= start_ns ||
            to_ns(st.st_ctim) >= start_ns) {
            log("not stored: " + path + " changed during the build");
            return;
        }
    }
    // The output this build wrote, not a file left by an earlier one (gas
    // given only --version exits 0 and writes nothing).
    struct stat written {};
    if (::stat(m_invocation.output_path.c_str(), &written) != 0 ||
        to_ns(written.st_ctim) < start_ns) {
        log("not stored: the build did not write its output");
        return;
    }
    MappedFile output(m_invocation.output_path);
    if (!output.ok()) {
        log("not stored: the output cannot be read");
        return;
    }
    if (!mark_output_names(output.bytes(), rules, named)) {
        log("not stored: the output's ELF section table cannot be read");
        return;
    }
    if (m_invocation.kind == Kind::precompiled_header && !mark_preprocessed_names(named)) {
        log("not stored: the header could not be preprocessed");
        return;
    }
    for (std::size_t r = 0; r < rules.size(); ++r) {
        if (named[r]) {
            log(fmt::format("pinned to {}: the build's output or a header names it",
                            rules[r].directory));
            variant.push_back(proto::cxx::pin_record({rules[r].placeholder, rules[r].directory}));
        }
    }
    BuildRecord record;
    record.build_ms = static_cast<std::uint64_t>(result.wall.count());
    record.mode = (output.mode() & 0111) != 0 ? 0777 : 0666;
    record.out = m_rewriter.rewrite(result.out);
    record.err = m_rewriter.rewrite(result.err);
    const auto value = encode_result(record, output.bytes());
    if (value.empty() || (m_client.max_value() != 0 && value.size() > m_client.max_value())) {
        log(fmt::format("not stored: a value of {} bytes", value.size()));
        return;
    }
    const auto key = result_key(m_common_key, variant);
    if (auto put = m_client.put(wire::k_namespace, key, value); !put) {
        log("not stored: " + put.error().message);
        return;
    }
    const auto manifest_key = std::string(wire::k_manifest_prefix) + m_common_key;
    // Joins the manifest the lookup saw (not read again: each manifest GET
    // counts as a lookup); a concurrent writer may win, costing a later miss.
    m_manifest.add(std::move(variant));
    const auto encoded = m_manifest.encode();
    if (auto put = m_client.put(wire::k_namespace, manifest_key, encoded); !put) {
        log("manifest not stored: " + put.error().message);
        return;
    }
    log(fmt::format("stored {} ({} bytes, built in {} ms)", key, value.size(), record.build_ms));
}

void Launcher::build_and_store() {
    const auto start_ns = now_ns();
    auto deps_path = temp_dir() + "/pt2cache-cxx-XXXXXX";
    const int deps_fd = ::mkstemp(deps_path.data());
    if (deps_fd < 0) {
        log("no temporary file for the dependency output; not caching");
        pass_through();
    }
    ::close(deps_fd);
    std::vector<std::string> argv;
    argv.reserve(m_args.size() + 6);
    argv.push_back(m_compiler.path);
    argv.insert(argv.end(), m_args.begin(), m_args.end());
    for (const auto* extra : {"-MD", "-MF"}) {
        argv.emplace_back(extra);
    }
    argv.push_back(deps_path);
    if (m_facts->version.find("clang") == std::string::npos) {
        argv.emplace_back("-fpch-deps"); // GCC only: the headers behind a used PCH
    }
    auto result = run_captured(m_compiler.path, argv);
    if (!result.started) {
        ::unlink(deps_path.c_str());
        pass_through();
    }
    write_all(STDOUT_FILENO, result.out);
    write_all(STDERR_FILENO, result.err);
    if (result.exit_code == 0 && m_daemon_ok) {
        store(result, deps_path, start_ns);
    }
    ::unlink(deps_path.c_str());
    exit_like(result);
}

} // namespace pt2cache::client::cxx
