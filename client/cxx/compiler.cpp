// SPDX-License-Identifier: MIT
#include "client/cxx/compiler.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "client/cxx/process.hpp"

#include <climits>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace pt2cache::client::cxx {

namespace {

std::string real_path(const std::string& path) {
    char buffer[PATH_MAX];
    if (::realpath(path.c_str(), buffer) == nullptr) {
        return {};
    }
    return buffer;
}

bool executable(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
           ::access(path.c_str(), X_OK) == 0;
}

std::string self_path() {
    return real_path("/proc/self/exe");
}

std::string basename_of(std::string_view path) {
    const auto slash = path.rfind('/');
    return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

// Every executable called `name` on PATH, in order.
std::vector<std::string> on_path(const std::string& name) {
    std::vector<std::string> found;
    const char* path = std::getenv("PATH");
    std::string_view rest = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
    while (true) {
        const auto colon = rest.find(':');
        std::string dir(rest.substr(0, colon));
        if (dir.empty()) {
            dir = ".";
        }
        const auto candidate = dir + "/" + name;
        if (executable(candidate)) {
            found.push_back(candidate);
        }
        if (colon == std::string_view::npos) {
            break;
        }
        rest.remove_prefix(colon + 1);
    }
    return found;
}

std::int64_t to_ns(const struct timespec& t) {
    return static_cast<std::int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

std::string trim_line(std::string text) {
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) {
        text.pop_back();
    }
    return text;
}

// The last line of -### output that names a program (it begins with a space).
std::string last_command(const std::string& text) {
    std::string last;
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
        if (line.starts_with(' ')) {
            last = line;
        }
    }
    return last;
}

// The words of a -### command line: separated by spaces, some in double
// quotes with backslash escapes.
std::vector<std::string> split_command(std::string_view line) {
    std::vector<std::string> words;
    std::string word;
    bool in_word = false;
    bool quoted = false;
    for (std::size_t i = 0; i < line.size(); ++i) {
        const char c = line[i];
        if (quoted) {
            if (c == '\\' && i + 1 < line.size()) {
                word += line[++i];
            } else if (c == '"') {
                quoted = false;
            } else {
                word += c;
            }
        } else if (c == '"') {
            quoted = true;
            in_word = true;
        } else if (c == ' ') {
            if (in_word) {
                words.push_back(std::move(word));
                word.clear();
                in_word = false;
            }
        } else {
            word += c;
            in_word = true;
        }
    }
    if (in_word) {
        words.push_back(std::move(word));
    }
    return words;
}

} // namespace

std::string find_program(const std::string& name) {
    if (name.find('/') != std::string::npos) {
        return name;
    }
    const auto found = on_path(name);
    return found.empty() ? std::string() : found.front();
}

tl::expected<RealCompiler, std::string> find_real_compiler(std::string_view argv0) {
    const auto self = self_path();
    if (const char* chosen = std::getenv("PT2CACHE_CXX"); chosen != nullptr && *chosen != '\0') {
        std::string path = chosen;
        if (path.find('/') == std::string::npos) {
            const auto found = on_path(path);
            if (found.empty()) {
                return tl::unexpected("PT2CACHE_CXX=" + path + ": not found on PATH");
            }
            path = found.front();
        }
        const auto resolved = real_path(path);
        if (resolved.empty() || !executable(resolved)) {
            return tl::unexpected("PT2CACHE_CXX=" + path + ": not an executable file");
        }
        if (resolved == self) {
            return tl::unexpected("PT2CACHE_CXX=" + path + " is pt2cache-cxx itself");
        }
        return RealCompiler{path, resolved};
    }
    auto name = basename_of(argv0);
    if (name.empty() || name.starts_with("pt2cache")) {
        name = "g++";
    }
    for (const auto& candidate : on_path(name)) {
        const auto resolved = real_path(candidate);
        if (!resolved.empty() && resolved != self && basename_of(resolved) != "pt2cache-cxx") {
            return RealCompiler{candidate, resolved};
        }
    }
    return tl::unexpected("no " + name + " on PATH other than pt2cache-cxx; set PT2CACHE_CXX");
}

std::optional<CompilerStamp> stamp_compiler(const std::string& realpath) {
    struct stat st {};
    if (::stat(realpath.c_str(), &st) != 0) {
        return std::nullopt;
    }
    return CompilerStamp{static_cast<std::uint64_t>(st.st_size), to_ns(st.st_mtim),
                         to_ns(st.st_ctim), static_cast<std::uint64_t>(st.st_ino),
                         static_cast<std::uint64_t>(st.st_dev)};
}

namespace {

constexpr std::string_view k_facts_magic = "pt2cache-cxx compiler facts 4\n";

// "<decimal length>\n<bytes>" fields.
void put_field(std::string& out, std::string_view field) {
    out += std::to_string(field.size());
    out += '\n';
    out += field;
}

bool get_field(std::string_view& in, std::string& out) {
    const auto nl = in.find('\n');
    if (nl == std::string_view::npos || nl == 0 || nl > 12) {
        return false;
    }
    std::size_t length = 0;
    for (const char c : in.substr(0, nl)) {
        if (c < '0' || c > '9') {
            return false;
        }
        length = length * 10 + static_cast<std::size_t>(c - '0');
    }
    in.remove_prefix(nl + 1);
    if (length > in.size()) {
        return false;
    }
    out.assign(in.substr(0, length));
    in.remove_prefix(length);
    return true;
}

} // namespace

std::string CompilerFacts::encode() const {
    std::string out(k_facts_magic);
    put_field(out, version);
    put_field(out, native);
    for (const auto* list : {&library_dirs, &start_files, &programs}) {
        put_field(out, std::to_string(list->size()));
        for (const auto& item : *list) {
            put_field(out, item);
        }
    }
    return out;
}

std::optional<CompilerFacts> CompilerFacts::decode(std::string_view text) {
    if (!text.starts_with(k_facts_magic)) {
        return std::nullopt;
    }
    text.remove_prefix(k_facts_magic.size());
    CompilerFacts facts;
    if (!get_field(text, facts.version) || !get_field(text, facts.native)) {
        return std::nullopt;
    }
    for (auto* list : {&facts.library_dirs, &facts.start_files, &facts.programs}) {
        std::string count;
        if (!get_field(text, count) || count.empty() || count.size() > 5 ||
            count.find_first_not_of("0123456789") != std::string::npos) {
            return std::nullopt;
        }
        const auto n = std::stoul(count);
        for (std::size_t i = 0; i < n; ++i) {
            std::string item;
            if (!get_field(text, item)) {
                return std::nullopt;
            }
            list->push_back(std::move(item));
        }
    }
    if (!text.empty()) {
        return std::nullopt;
    }
    return facts;
}

std::optional<CompilerFacts> query_compiler(const RealCompiler& compiler) {
    CompilerFacts facts;
    const std::vector<std::string> version_args = {compiler.path, "--version"};
    auto version = run_captured(compiler.path, version_args);
    if (!version.started || version.exit_code != 0) {
        return std::nullopt;
    }
    facts.version = version.out;
    // The target options and tuning parameters -march=native and
    // -mtune=native select on this CPU.
    const std::vector<std::string> native_args = {compiler.path, "-march=native", "-mtune=native",
                                                  "-Q",          "--help=target", "--help=params"};
    auto native = run_captured(compiler.path, native_args);
    if (!native.started || native.exit_code != 0 || native.out.empty()) {
        return std::nullopt;
    }
    facts.native = native.out;
    // The linker's command line for a shared object (-### runs nothing): its
    // -L directories in the order the linker searches them (LIBRARY_PATH's
    // are not first), and its start files.
    const std::vector<std::string> link_args = {compiler.path, "-shared", "-x",        "c++",
                                                "/dev/null",   "-o",      "/dev/null", "-###"};
    auto link = run_captured(compiler.path, link_args);
    if (!link.started || link.exit_code != 0) {
        return std::nullopt;
    }
    const auto words = split_command(last_command(link.err));
    if (words.empty()) {
        return std::nullopt;
    }
    for (const auto& word : words) {
        if (word.starts_with("-L") && word.size() > 2) {
            facts.library_dirs.push_back(word.substr(2));
        } else if (word.starts_with('/') && word.ends_with(".o") &&
                   basename_of(word).starts_with("crt")) {
            facts.start_files.push_back(word);
        }
    }
    // The programs and files behind the driver, which its --version does not
    // identify.
    for (const auto* program : {"cc1plus", "collect2", "as", "ld"}) {
        const std::vector<std::string> args = {compiler.path,
                                               std::string("-print-prog-name=") + program};
        auto printed = run_captured(compiler.path, args);
        if (!printed.started || printed.exit_code != 0) {
            return std::nullopt;
        }
        facts.programs.push_back(trim_line(printed.out));
    }
    // The specs file GCC reads when present: the first "specs" in its
    // startfile directories (-print-search-dirs' "libraries").
    const std::vector<std::string> dirs_args = {compiler.path, "-print-search-dirs"};
    auto dirs = run_captured(compiler.path, dirs_args);
    if (!dirs.started || dirs.exit_code != 0) {
        return std::nullopt;
    }
    std::istringstream lines(dirs.out);
    for (std::string line; std::getline(lines, line);) {
        constexpr std::string_view k_prefix = "libraries: =";
        if (!line.starts_with(k_prefix)) {
            continue;
        }
        std::string_view rest = std::string_view(line).substr(k_prefix.size());
        while (!rest.empty()) {
            const auto colon = rest.find(':');
            if (auto dir = rest.substr(0, colon); dir.starts_with('/')) {
                while (dir.size() > 1 && dir.ends_with('/')) {
                    dir.remove_suffix(1);
                }
                facts.programs.push_back(std::string(dir) + "/specs");
                // -fopenmp, -fgnu-tm and -fsanitize= read these as specs
                // files too (how to link their runtime libraries).
                for (const auto* spec : {"libgomp.spec", "libitm.spec", "libsanitizer.spec"}) {
                    facts.programs.push_back(std::string(dir) + "/" + spec);
                }
            }
            rest = colon == std::string_view::npos ? std::string_view() : rest.substr(colon + 1);
        }
    }
    return facts;
}

std::optional<std::vector<std::string>> linked_libraries(const RealCompiler& compiler,
                                                         std::span<const std::string> args) {
    std::vector<std::string> argv;
    argv.reserve(args.size() + 2);
    argv.push_back(compiler.path);
    argv.insert(argv.end(), args.begin(), args.end());
    argv.emplace_back("-###");
    const auto printed = run_captured(compiler.path, argv);
    if (!printed.started || printed.exit_code != 0) {
        return std::nullopt;
    }
    const auto words = split_command(last_command(printed.err));
    if (words.empty()) {
        return std::nullopt;
    }
    std::vector<std::string> libraries;
    for (const auto& word : words) {
        if (word.starts_with("-l") && word.size() > 2) {
            libraries.push_back(word.substr(2));
        }
    }
    return libraries;
}

std::string machine_fingerprint() {
    std::string out;
    struct utsname names {};
    if (::uname(&names) == 0) {
        out += names.nodename;
        out += '\n';
        out += names.machine;
        out += '\n';
    }
#if defined(__x86_64__) || defined(__i386__)
    const auto leaf = [&](unsigned id, unsigned sub, bool mask_apic) {
        unsigned a = 0, b = 0, c = 0, d = 0;
        if (__get_cpuid_count(id, sub, &a, &b, &c, &d) == 0) {
            return;
        }
        if (mask_apic) {
            b &= 0xFFFFu; // APIC id and logical count vary by core
        }
        out += std::to_string(id) + ":" + std::to_string(a) + "," + std::to_string(b) + "," +
               std::to_string(c) + "," + std::to_string(d) + ";";
    };
    leaf(0, 0, false);
    leaf(1, 0, true);
    leaf(7, 0, false);
    leaf(7, 1, false);
    leaf(0xD, 1, false);
    leaf(0x80000001, 0, false);
    leaf(0x80000002, 0, false);
    leaf(0x80000003, 0, false);
    leaf(0x80000004, 0, false);
    leaf(0x80000006, 0, false);
#else
    std::ifstream cpuinfo("/proc/cpuinfo");
    std::string line;
    while (std::getline(cpuinfo, line)) {
        if (line.starts_with("processor") || line.starts_with("cpu MHz") ||
            line.starts_with("bogomips") || line.starts_with("BogoMIPS")) {
            continue;
        }
        out += line;
        out += '\n';
    }
#endif
    return out;
}

} // namespace pt2cache::client::cxx
