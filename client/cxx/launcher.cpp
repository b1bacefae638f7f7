// SPDX-License-Identifier: MIT
#include "client/cxx/launcher.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

#include "proto/bytes.hpp"
#include "proto/cxx_lookup.hpp"
#include "proto/cxx_value.hpp"
#include "proto/frame.hpp"
#include "proto/hash_files.hpp"

#include <climits>
#include <fmt/format.h>

namespace pt2cache::client::cxx {

namespace wire = proto::cxx;

namespace {

std::string current_directory() {
    char buffer[PATH_MAX];
    return ::getcwd(buffer, sizeof buffer) != nullptr ? std::string(buffer) : std::string();
}

// Reads a regular file whole. Anything else is not opened at all: opening a
// FIFO blocks until a writer comes, and a reader that opens and closes it
// can cost that writer a SIGPIPE before the compiler reads it.
bool read_file(const std::string& path, std::string& out) {
    struct stat named {};
    if (::stat(path.c_str(), &named) != 0 || !S_ISREG(named.st_mode)) {
        return false;
    }
    // O_NONBLOCK: were it replaced by a FIFO since, the open must not wait.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        return false;
    }
    struct stat st {};
    bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    if (ok) {
        out.resize(static_cast<std::size_t>(st.st_size));
        std::size_t done = 0;
        while (done < out.size()) {
            const auto n = ::read(fd, out.data() + done, out.size() - done);
            if (n < 0 && errno == EINTR) {
                continue;
            }
            if (n <= 0) {
                break;
            }
            done += static_cast<std::size_t>(n);
        }
        ok = done == out.size();
    }
    ::close(fd);
    return ok;
}

std::string part_hash(std::string_view value) {
    return hex(digest_of(proto::as_bytes(value)));
}

// Whether a path argument or a search path of the environment is relative (an
// empty search path entry is the working directory).
bool names_relative_paths(const std::vector<std::string>& args, const Invocation& invocation) {
    constexpr std::string_view k_joined[] = {"-isystem", "-idirafter", "-iquote", "-include",
                                             "-I",       "-L",         "-o"};
    for (const auto i : invocation.path_args) {
        std::string_view path = args[i];
        if (path.starts_with('-')) {
            for (const auto option : k_joined) {
                if (path.starts_with(option)) {
                    path.remove_prefix(option.size());
                    break;
                }
            }
        }
        if (!path.starts_with('/')) {
            return true;
        }
    }
    for (const auto name : k_path_environment) {
        const char* value = std::getenv(std::string(name).c_str());
        if (value == nullptr) {
            continue;
        }
        std::string_view rest = value;
        for (;;) {
            const auto colon = rest.find(':');
            if (!rest.substr(0, colon).starts_with('/')) {
                return true;
            }
            if (colon == std::string_view::npos) {
                break;
            }
            rest.remove_prefix(colon + 1);
        }
    }
    return false;
}

mode_t current_umask() {
    const mode_t mask = ::umask(0);
    ::umask(mask);
    return mask;
}

} // namespace

namespace {

Options client_options(const LauncherOptions& options) {
    Options client;
    client.socket_path = options.socket_path;
    client.connect_timeout = options.connect_timeout;
    client.io_timeout = options.io_timeout;
    client.retry_after = std::chrono::hours(1); // one failure: no daemon for this run
    client.client_name = "pt2cache-cxx";
    return client;
}

} // namespace

Launcher::Launcher(RealCompiler compiler, std::vector<std::string> args, Invocation invocation,
                   LauncherOptions options)
    : m_compiler(std::move(compiler))
    , m_args(std::move(args))
    , m_invocation(std::move(invocation))
    , m_options(std::move(options))
    , m_client(client_options(m_options)) {}

void Launcher::log(std::string_view message) const {
    m_options.log(message);
}

std::int64_t Launcher::elapsed_ms() const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                 m_started)
        .count();
}

void Launcher::pass_through() {
    std::vector<std::string> argv;
    argv.reserve(m_args.size() + 1);
    argv.push_back(m_compiler.path);
    argv.insert(argv.end(), m_args.begin(), m_args.end());
    exec_program(m_compiler.path, argv);
    write_all(STDERR_FILENO, fmt::format("pt2cache-cxx: cannot run {}: {}\n", m_compiler.path,
                                         std::strerror(errno)));
    std::_Exit(127);
}

std::optional<CompilerFacts> Launcher::compiler_facts() {
    const auto stamp = stamp_compiler(m_compiler.realpath);
    if (!stamp) {
        return std::nullopt;
    }
    KeyHasher memo;
    memo.field("realpath", m_compiler.realpath);
    memo.field("stamp", fmt::format("{} {} {} {} {}", stamp->size, stamp->mtime_ns, stamp->ctime_ns,
                                    stamp->inode, stamp->device));
    memo.field("machine", machine_fingerprint());
    // What the compiler's search directories depend on.
    for (const auto* name : {"LIBRARY_PATH", "COMPILER_PATH", "GCC_EXEC_PREFIX"}) {
        memo.field(name, env_or(name, "\x01unset"));
    }
    const auto key = std::string(wire::k_compiler_prefix) + memo.hex_digest();
    if (m_daemon_ok) {
        auto found = m_client.get(wire::k_namespace, key);
        if (found && *found) {
            if (auto facts = CompilerFacts::decode(proto::as_text(**found))) {
                return facts;
            }
        } else if (!found) {
            m_daemon_ok = false;
            log("daemon unavailable: " + found.error().message);
            return std::nullopt; // nothing could be stored: not worth asking the compiler
        }
    }
    auto facts = query_compiler(m_compiler);
    if (facts && m_daemon_ok) {
        const auto text = facts->encode();
        if (!m_client.put(wire::k_namespace, key, proto::as_bytes(text))) {
            m_daemon_ok = false;
        }
    }
    return facts;
}

bool Launcher::prepare() {
    for (const auto name : k_uncacheable_environment) {
        if (std::getenv(std::string(name).c_str()) != nullptr) {
            m_why = fmt::format("{} is set", name);
            return false;
        }
    }
    m_cwd = current_directory();
    if (m_cwd.empty()) {
        m_why = "no current directory";
        return false;
    }
    // Debug information records the directories (DW_AT_comp_dir, file
    // names); they change no machine code, so by default -g builds are
    // rewritten too (Inductor always passes -g1). PT2CACHE_CXX_HASH_DIR=1
    // keys them as they are.
    m_exact_paths = m_invocation.debug_info && m_options.hash_dir;
    if (m_exact_paths) {
        m_rewriter = PathRewriter();
    } else {
        m_rewriter = make_rewriter(m_invocation, m_cwd, env_or("TORCHINDUCTOR_CACHE_DIR"),
                                   env_or("TMPDIR", "/tmp"));
    }
    m_facts = compiler_facts();
    if (!m_daemon_ok) {
        m_why = "no daemon (nothing could be looked up or stored)";
        return false;
    }
    if (!m_facts) {
        m_why = "the compiler's --version or -march=native expansion could not be learnt";
        return false;
    }
    struct stat output {};
    if (::lstat(m_invocation.output_path.c_str(), &output) == 0 && S_ISLNK(output.st_mode)) {
        // g++ writes through it; a hit would replace the link with a file.
        m_why = "the output is a symbolic link";
        return false;
    }
    std::string source;
    if (!read_file(m_invocation.source_path, source)) {
        m_why = "the source cannot be read as a regular file";
        return false;
    }
    for (const auto macro : {"__DATE__", "__TIME__", "__TIMESTAMP__"}) {
        if (source.find(macro) != std::string::npos) {
            m_why = fmt::format("the source uses {}", macro);
            return false;
        }
    }
    // A directory the source names itself (`#include "/tmp/x/h.h"`) is what
    // the compiler opens wherever the build runs: it is not rewritten.
    if (!m_exact_paths) {
        std::vector<PathRewriter::Rule> kept;
        for (const auto& rule : m_rewriter.rules()) {
            if (source.find(rule.directory) == std::string::npos) {
                kept.push_back(rule);
            } else {
                log(fmt::format("{} is not rewritten: the source names it", rule.directory));
            }
        }
        m_rewriter = PathRewriter(std::move(kept));
    }

    KeyHasher key;
    const auto add = [&](std::string name, std::string shown, std::string_view bytes) {
        key.field(name, bytes);
        m_parts.push_back({std::move(name), std::move(shown), part_hash(bytes)});
    };
    add("format", "pt2cache-cxx key v2", "pt2cache-cxx key v2");
    add("compiler.path", m_compiler.realpath, m_compiler.realpath);
    const auto stamp = stamp_compiler(m_compiler.realpath);
    const auto stamp_text =
        fmt::format("size {} mtime_ns {}", stamp ? stamp->size : 0, stamp ? stamp->mtime_ns : 0);
    add("compiler.stat", stamp_text, stamp_text);
    const auto first_line = m_facts->version.substr(0, m_facts->version.find('\n'));
    add("compiler.version", first_line, m_facts->version);
    // cc1plus, as and ld are not the driver: found beside it, in
    // COMPILER_PATH or on PATH. Where they are is keyed; their content is an
    // input of the build.
    std::string programs;
    m_programs.clear();
    for (const auto& program : m_facts->programs) {
        auto found = find_program(program);
        programs += fmt::format("{} -> {}\n", program, found.empty() ? "(not found)" : found);
        if (!found.empty()) {
            m_programs.push_back(std::move(found));
        }
    }
    add("compiler.programs", fmt::format("{} programs and files", m_facts->programs.size()),
        programs);
    // The driver itself, beyond its path, size, mtime and --version.
    m_programs.push_back(m_compiler.path);
    if (m_invocation.uses_native) {
        add("native", "-march=native/-mtune=native expansion (-Q --help=target --help=params)",
            m_facts->native);
    }
    add("kind", std::string(kind_name(m_invocation.kind)), kind_name(m_invocation.kind));
    // The output directory inside the source's, say: a path under both is
    // rewritten by the inner one, and names the same file elsewhere only
    // where they nest the same way.
    if (const auto nesting = m_rewriter.nesting(); !nesting.empty()) {
        add("rules.nesting",
            fmt::format("{} nested directories", std::count(nesting.begin(), nesting.end(), '\n')),
            nesting);
    }
    const auto is_path_env = [](std::string_view name) {
        return std::find(std::begin(k_path_environment), std::end(k_path_environment), name) !=
               std::end(k_path_environment);
    };
    if (m_exact_paths) {
        add("cwd", m_cwd + " (-g and PT2CACHE_CXX_HASH_DIR: paths are not rewritten)", m_cwd);
    } else if (names_relative_paths(m_args, m_invocation)) {
        // A relative path (or an empty entry of a search path) is found from
        // the working directory.
        const auto cwd = m_rewriter.rewrite(m_cwd);
        add("cwd", cwd + " (relative paths)", cwd);
    }
    for (std::size_t i = 0; i < m_args.size(); ++i) {
        const bool path = std::find(m_invocation.path_args.begin(), m_invocation.path_args.end(),
                                    i) != m_invocation.path_args.end();
        const auto keyed = path ? m_rewriter.rewrite(m_args[i]) : m_args[i];
        add(fmt::format("arg[{}]", i + 1), keyed, keyed);
    }
    for (const auto name : k_key_environment) {
        const auto value = env_or(std::string(name).c_str(), "\x01unset");
        const auto keyed = is_path_env(name) ? m_rewriter.rewrite(value) : value;
        add(fmt::format("env.{}", name), value == "\x01unset" ? "(unset)" : keyed, keyed);
    }
    add("source", fmt::format("{} bytes", source.size()), source);
    m_common_key = key.hex_digest();
    return true;
}

std::vector<FileHash> Launcher::hash_files(const std::vector<std::string>& paths) {
    std::vector<FileHash> hashes(paths.size());
    std::vector<bool> done(paths.size(), false);
    // A path still holding a placeholder names a directory this invocation
    // does not have: it matches nothing recorded.
    for (std::size_t i = 0; i < paths.size(); ++i) {
        if (paths[i].find(k_placeholder_mark) != std::string::npos) {
            hashes[i].status = FileStatus::unreadable;
            done[i] = true;
        }
    }
    if (m_daemon_ok && (m_client.capabilities() & proto::capability::hash_files) != 0) {
        std::size_t from = 0;
        while (from < paths.size() && m_daemon_ok) {
            std::size_t to = from;
            std::size_t bytes = 2;
            while (to < paths.size() && to - from < proto::k_max_hash_files && !done[to] &&
                   bytes + 2 + paths[to].size() <= proto::k_max_hash_files_body &&
                   paths[to].size() <= proto::k_max_hash_path && paths[to].starts_with('/')) {
                bytes += 2 + paths[to].size();
                ++to;
            }
            if (to == from) {
                ++from; // hashed locally below
                continue;
            }
            std::vector<std::string> chunk(paths.begin() + static_cast<std::ptrdiff_t>(from),
                                           paths.begin() + static_cast<std::ptrdiff_t>(to));
            auto answered = m_client.hash_files(chunk);
            if (!answered) {
                log("HASH_FILES failed: " + answered.error().message);
                if (answered.error().kind != ErrorKind::server) {
                    m_daemon_ok = false;
                }
                break;
            }
            for (std::size_t i = 0; i < chunk.size(); ++i) {
                const auto& answer = (*answered)[i];
                if (answer.status != client::FileStatus::skipped) {
                    hashes[from + i] = {static_cast<FileStatus>(answer.status), answer.size,
                                        answer.hash};
                    done[from + i] = true;
                }
            }
            from = to;
        }
    }
    for (std::size_t i = 0; i < paths.size(); ++i) {
        if (!done[i]) {
            hashes[i] = hash_file_locally(paths[i]);
        }
    }
    return hashes;
}

bool Launcher::install(std::span<const std::byte> value) {
    const auto& output = m_invocation.output_path;
    const auto slash = output.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : output.substr(0, slash);
    const std::string base = slash == std::string::npos ? output : output.substr(slash + 1);
    const auto temp = fmt::format("{}/.{}.pt2cache-{}.tmp", dir, base, ::getpid());
    const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        log(fmt::format("cannot create {}: {}", temp, std::strerror(errno)));
        return false;
    }
    auto record = decode_result(value, fd);
    bool ok = record.has_value();
    if (!ok) {
        log("stored result unusable: " + record.error());
    }
    if (ok) {
        const mode_t mode = (record->mode & 0111) != 0 ? 0777 : 0666;
        ok = ::fchmod(fd, mode & ~current_umask()) == 0;
    }
    if (::close(fd) != 0) {
        ok = false;
    }
    if (ok && ::rename(temp.c_str(), output.c_str()) != 0) {
        log(fmt::format("cannot rename {} to {}: {}", temp, output, std::strerror(errno)));
        ok = false;
    }
    if (!ok) {
        ::unlink(temp.c_str());
        return false;
    }
    write_all(STDOUT_FILENO, m_rewriter.expand(record->out));
    write_all(STDERR_FILENO, m_rewriter.expand(record->err));
    return true;
}

std::optional<bool> Launcher::lookup_in_daemon() {
    std::vector<CxxRule> rules;
    for (const auto& rule : m_rewriter.expansions()) {
        rules.push_back({rule.placeholder, rule.directory});
    }
    const auto manifest_key = std::string(wire::k_manifest_prefix) + m_common_key;
    auto answer = m_client.cxx_lookup(m_common_key, rules);
    if (!answer) {
        if (answer.error().kind == ErrorKind::server) {
            log("CXX_LOOKUP refused: " + answer.error().message);
            return std::nullopt;
        }
        m_daemon_ok = false;
        log("daemon unavailable: " + answer.error().message);
        return false;
    }
    if (answer->outcome == CxxOutcome::no_manifest) {
        log("miss: no manifest " + manifest_key);
        return false;
    }
    auto manifest = Manifest::decode(answer->manifest());
    if (!manifest) {
        log("corrupt manifest " + manifest_key);
        return false;
    }
    m_manifest = std::move(*manifest);
    switch (answer->outcome) {
    case CxxOutcome::hit:
        if (install(answer->result())) {
            log(fmt::format("hit (CXX_LOOKUP) under {} in {} ms", manifest_key, elapsed_ms()));
            return true;
        }
        return false;
    case CxxOutcome::undecided:
        log("CXX_LOOKUP undecided: matching here");
        return match_manifest();
    case CxxOutcome::no_match:
    case CxxOutcome::no_manifest:
        break;
    }
    log("miss: no manifest variant matches the inputs");
    return false;
}

bool Launcher::lookup() {
    if (!m_daemon_ok) {
        return false;
    }
    if ((m_client.capabilities() & proto::capability::cxx_lookup) != 0) {
        if (const auto decided = lookup_in_daemon()) {
            return *decided;
        }
    }
    const auto manifest_key = std::string(wire::k_manifest_prefix) + m_common_key;
    auto found = m_client.get(wire::k_namespace, manifest_key);
    if (!found) {
        m_daemon_ok = false;
        log("daemon unavailable: " + found.error().message);
        return false;
    }
    if (!*found) {
        log("miss: no manifest " + manifest_key);
        return false;
    }
    auto manifest = Manifest::decode(**found);
    if (!manifest) {
        log("corrupt manifest " + manifest_key);
        return false;
    }
    m_manifest = std::move(*manifest);
    return match_manifest();
}

std::vector<FileHash> Launcher::current_state(std::span<const std::string_view> recorded) {
    std::vector<FileHash> state(recorded.size());
    std::vector<std::string> paths;
    std::vector<std::size_t> slot;
    for (std::size_t i = 0; i < recorded.size(); ++i) {
        if (const auto pin = proto::cxx::pin_state(recorded[i], m_rewriter.expansions())) {
            state[i] = *pin; // a directory, not a file: nothing to hash
            continue;
        }
        paths.push_back(m_rewriter.expand(recorded[i]));
        slot.push_back(i);
    }
    const auto hashes = hash_files(paths);
    for (std::size_t j = 0; j < hashes.size(); ++j) {
        state[slot[j]] = hashes[j];
    }
    return state;
}

bool Launcher::match_manifest() {
    // Hash every path any variant names, once.
    const auto names = proto::cxx::manifest_paths(m_manifest);
    const auto hashes = current_state(names.paths);
    for (std::size_t v = 0; v < m_manifest.variants.size(); ++v) {
        if (!proto::cxx::variant_matches(m_manifest, names, v, hashes)) {
            continue;
        }
        const auto key = result_key(m_common_key, m_manifest.variants[v]);
        auto value = m_client.get(wire::k_namespace, key);
        if (!value) {
            m_daemon_ok = false;
            log("daemon unavailable: " + value.error().message);
            return false;
        }
        if (!*value) {
            log("manifest variant matches but result " + key + " is gone");
            continue;
        }
        if (install(**value)) {
            log(fmt::format("hit {} in {} ms", key, elapsed_ms()));
            return true;
        }
        return false;
    }
    log("miss: no manifest variant matches the inputs");
    return false;
}

void Launcher::run() {
    if (!prepare()) {
        log("not cached: " + m_why);
        pass_through();
    }
    if (lookup()) {
        std::_Exit(0);
    }
    // Collapse identical concurrent builds: the first takes the lock and
    // builds; the others wait (bounded), then look up again.
    if (m_daemon_ok) {
        const auto socket = m_client.socket_path();
        const auto dir = socket.substr(0, socket.rfind('/')) + "/cxx-locks";
        ::mkdir(dir.c_str(), 0700);
        const auto lock_path = dir + "/" + m_common_key;
        const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (fd >= 0 && ::flock(fd, LOCK_EX | LOCK_NB) != 0) {
            log("waiting for a concurrent identical build");
            const auto until = std::chrono::steady_clock::now() + m_options.collapse_wait;
            auto pause = std::chrono::milliseconds(5);
            bool locked = false;
            while (!locked && std::chrono::steady_clock::now() < until) {
                std::this_thread::sleep_for(pause);
                pause = std::min(pause * 2, std::chrono::milliseconds(100));
                locked = ::flock(fd, LOCK_EX | LOCK_NB) == 0;
            }
            if (lookup()) {
                std::_Exit(0);
            }
        }
        // The lock (if held) is released when this process ends.
    }
    build_and_store();
}

} // namespace pt2cache::client::cxx
