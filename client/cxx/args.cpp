// SPDX-License-Identifier: MIT
#include "client/cxx/args.hpp"

#include <algorithm>
#include <array>

namespace pt2cache::client::cxx {

namespace {

bool starts_with_any(std::string_view text, std::span<const std::string_view> prefixes) {
    return std::any_of(prefixes.begin(), prefixes.end(),
                       [&](std::string_view p) { return text.starts_with(p); });
}

bool ends_with_any(std::string_view text, std::span<const std::string_view> suffixes) {
    return std::any_of(suffixes.begin(), suffixes.end(),
                       [&](std::string_view s) { return text.ends_with(s); });
}

// Options that never give a cacheable invocation: they preprocess, print,
// write side files, or read files the dependency output does not name.
constexpr std::array<std::string_view, 27> k_uncacheable_exact = {"-E",
                                                                  "-S",
                                                                  "-v",
                                                                  "--version",
                                                                  "-dumpversion",
                                                                  "-dumpfullversion",
                                                                  "-dumpmachine",
                                                                  "-dumpspecs",
                                                                  "-###",
                                                                  "-Xpreprocessor",
                                                                  "-Xassembler",
                                                                  "-wrapper",
                                                                  "-aux-info",
                                                                  "-fsyntax-only",
                                                                  "-H",
                                                                  "-Q",
                                                                  "-time",
                                                                  "-pass-exit-codes",
                                                                  "-T",
                                                                  "-undef",
                                                                  "-C",
                                                                  "-CC",
                                                                  "-P",
                                                                  "-traditional-cpp",
                                                                  "-trigraphs",
                                                                  "-remap",
                                                                  "-no-integrated-cpp"};

constexpr std::array<std::string_view, 35> k_uncacheable_prefixes = {
    "-M", "--help", "-print-", "-save-temps", "-dump", "-fdump-", "-fprofile", "-fauto-profile",
    "-fplugin", "-fstack-usage", "-fcallgraph-info", "-fsave-optimization-record", "-fcoverage",
    "--coverage", "-ftest-coverage", "-fcompare-debug", "-specs", "-B", "-Wp,", "-gsplit-dwarf",
    "-flto", "-fopt-info", "-d", "-time=", "-fdiagnostics-format=", "--target-help",
    // Reads a .gcda the dependencies do not name.
    "-fbranch-probabilities",
    // Map directories that the key rewrites.
    "-fmacro-prefix-map", "-ffile-prefix-map", "-fdebug-prefix-map",
    // C++20 modules: .gcm files.
    "-fmodule", "-fdeps-",
    // Assembler options may read or write files of their own.
    "-Wa,",
    // Fails on a directory that is gone, which nothing keys.
    "-Wmissing-include-dirs", "-Werror=missing-include-dirs"};

// Options known to change only what the compiler and linker produce into the
// one output (or their diagnostics), checked after the cases above.
constexpr std::array<std::string_view, 27> k_flag_prefixes = {"-D",
                                                              "-U",
                                                              "-I",
                                                              "-O",
                                                              "-f",
                                                              "-m",
                                                              "-W",
                                                              "-w",
                                                              "-std=",
                                                              "-g",
                                                              "-pedantic",
                                                              "-ansi",
                                                              "-pthread",
                                                              "-shared",
                                                              "-static",
                                                              "-rdynamic",
                                                              "-nostdinc",
                                                              "-nostdlib",
                                                              "-nodefaultlibs",
                                                              "-nostartfiles",
                                                              "-pipe",
                                                              "-isystem",
                                                              "-iquote",
                                                              "-idirafter",
                                                              "-pie",
                                                              "-no-pie",
                                                              "--sysroot="};

// Options whose operand is the next argument when not joined.
constexpr std::array<std::string_view, 17> k_separate_operand = {
    "-I",        "-D",        "-U",       "-isystem",     "-idirafter",
    "-iquote",   "-imacros",  "-iprefix", "-iwithprefix", "-iwithprefixbefore",
    "-isysroot", "--sysroot", "--param",  "-u",           "-z",
    "-e",        "-Xlinker"};

// Options whose operand (joined or the next argument) is a directory or file
// the compiler reads: their directories are rewritten (docs/cxx.md, "Path
// rewriting").
// Options whose operand is a directory of the include search.
constexpr std::array<std::string_view, 4> k_search_dir_operand = {"-I", "-isystem", "-iquote",
                                                                  "-idirafter"};

constexpr std::array<std::string_view, 8> k_path_operand = {
    "-I",       "-isystem", "-idirafter",   "-iquote",
    "-imacros", "-iprefix", "-iwithprefix", "-iwithprefixbefore"};

constexpr std::array<std::string_view, 10> k_source_suffixes = {
    ".cpp", ".cc", ".cxx", ".c++", ".cp", ".C", ".CPP", ".c", ".ii", ".i"};
constexpr std::array<std::string_view, 7> k_header_suffixes = {".h", ".hh",  ".hpp", ".hxx",
                                                               ".H", ".h++", ".tcc"};
constexpr std::array<std::string_view, 3> k_link_suffixes = {".o", ".a", ".so"};

// Linker options that read or write files of their own (-c and --mri-script
// read a script of inputs, -o and --output name another output).
constexpr std::array<std::string_view, 16> k_linker_files = {"-Map",
                                                             "--Map",
                                                             "--out-implib",
                                                             "--dependency-file",
                                                             "-plugin",
                                                             "--plugin",
                                                             "--version-script",
                                                             "--dynamic-list",
                                                             "-T",
                                                             "--script",
                                                             "@",
                                                             "-c",
                                                             "--mri-script",
                                                             "-o",
                                                             "--output",
                                                             "--error-handling-script"};

// Linker options that add inputs or change which file a -l takes, which the
// launcher does not follow (docs/cxx.md, "Cacheable invocations").
constexpr std::array<std::string_view, 14> k_linker_inputs = {"-L",
                                                              "-l",
                                                              "--library",
                                                              "-R",
                                                              "--just-symbols",
                                                              "-Y",
                                                              "-dT",
                                                              "--default-script",
                                                              "--retain-symbols-file",
                                                              "--sysroot",
                                                              "--format",
                                                              "--export-dynamic-symbol-list",
                                                              "--section-ordering-file",
                                                              "-static"};
constexpr std::array<std::string_view, 4> k_linker_inputs_exact = {"-Bstatic", "-dn", "-non_shared",
                                                                   "-b"};

// Linker options whose operand is the next item (of -Wl, or -Xlinker).
constexpr std::array<std::string_view, 12> k_linker_operand = {
    "-rpath",      "-rpath-link", "-soname",        "-h", "-z", "-e", "--entry", "-u",
    "--undefined", "-y",          "--trace-symbol", "-m"};

template <std::size_t N>
bool is_one_of(std::string_view text, const std::array<std::string_view, N>& list) {
    return std::find(list.begin(), list.end(), text) != list.end();
}

// Checks the items passed to the linker, in order. An item that is neither an
// option nor the operand of one is a file the key would not name.
class LinkerItems {
public:
    bool ok(std::string_view item) {
        if (m_operand) {
            m_operand = false;
            return true;
        }
        if (!item.starts_with('-') || starts_with_any(item, k_linker_files) ||
            starts_with_any(item, k_linker_inputs) || is_one_of(item, k_linker_inputs_exact)) {
            return false;
        }
        m_operand = is_one_of(item, k_linker_operand);
        return true;
    }

private:
    bool m_operand = false;
};

bool is_link_input(std::string_view path) {
    if (ends_with_any(path, k_link_suffixes)) {
        return true;
    }
    const auto so = path.rfind(".so.");
    return so != std::string_view::npos &&
           path.find_first_not_of("0123456789.", so + 4) == std::string_view::npos;
}

Classification no(std::string reason) {
    return Classification{std::nullopt, Uncacheable{std::move(reason)}};
}

} // namespace

std::string_view kind_name(Kind kind) {
    switch (kind) {
    case Kind::shared_object:
        return "shared-object";
    case Kind::object:
        return "object";
    case Kind::precompiled_header:
        return "precompiled-header";
    }
    return "unknown";
}

bool prints_for_tools(std::span<const std::string> args) {
    static constexpr std::string_view exact[] = {
        "-E",           "-v",         "--version", "-###", "-dumpversion", "-dumpfullversion",
        "-dumpmachine", "-dumpspecs", "-M",        "-MM",  "--target-help"};
    static constexpr std::string_view prefixes[] = {"-print-", "--help"};
    return std::ranges::any_of(args, [](std::string_view a) {
        return std::ranges::find(exact, a) != std::end(exact) || starts_with_any(a, prefixes);
    });
}

Classification classify(std::span<const std::string> args) {
    Invocation inv;
    std::optional<std::size_t> source;
    bool source_is_header = false;
    bool compile_only = false;
    bool shared = false;
    std::optional<std::size_t> output;
    std::string language = "none";
    LinkerItems linker;
    bool sysroot = false;
    bool static_runtime = false;
    bool other_link = false; // another linker or multilib: other directories

    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string_view a = args[i];
        const bool has_next = i + 1 < args.size();
        if (a.empty()) {
            return no("an empty argument");
        }
        if (a.find(k_placeholder_mark) != std::string_view::npos) {
            return no(std::string("an argument containing ") + std::string(k_placeholder_mark));
        }
        if (a.front() == '@') {
            return no("a response file (" + std::string(a) + ")");
        }
        if (a == "-") {
            return no("input from stdin");
        }
        if (a.front() != '-') {
            const bool header = language == "c++-header" ||
                                (language == "none" && ends_with_any(a, k_header_suffixes));
            const bool source_file =
                language == "c++" || (language == "none" && ends_with_any(a, k_source_suffixes));
            if (header || source_file) {
                if (source) {
                    return no("several sources");
                }
                source = i;
                source_is_header = header;
                inv.path_args.push_back(i);
                inv.not_for_probe.push_back(i);
            } else if (language == "none" && is_link_input(a)) {
                inv.link_inputs.emplace_back(a);
                inv.path_args.push_back(i);
                inv.not_for_probe.push_back(i);
            } else {
                return no("an input of unknown kind (" + std::string(a) + ")");
            }
            continue;
        }
        if (std::find(k_uncacheable_exact.begin(), k_uncacheable_exact.end(), a) !=
                k_uncacheable_exact.end() ||
            starts_with_any(a, k_uncacheable_prefixes)) {
            return no("option " + std::string(a));
        }
        if (a == "-o" || (a.starts_with("-o") && a.size() > 2)) {
            if (output) {
                return no("several -o");
            }
            inv.not_for_probe.push_back(i);
            if (a == "-o") {
                if (!has_next) {
                    return no("-o without a file");
                }
                output = ++i;
                inv.not_for_probe.push_back(i);
                inv.output_path = args[i];
            } else {
                output = i;
                inv.output_path = std::string(a.substr(2));
            }
            inv.path_args.push_back(i);
            continue;
        }
        if (a == "-x" || (a.starts_with("-x") && a.size() > 2)) {
            if (a == "-x") {
                if (!has_next) {
                    return no("-x without a language");
                }
                language = args[++i];
            } else {
                language = std::string(a.substr(2));
            }
            if (language != "c++" && language != "c++-header" && language != "none") {
                return no("language " + language);
            }
            continue;
        }
        if (a == "-c") {
            inv.not_for_probe.push_back(i);
            compile_only = true;
            continue;
        }
        if (a == "-shared") {
            shared = true;
            continue;
        }
        // Options whose operand is joined ("-lfoo") or the next argument.
        bool operand_missing = false;
        bool taken = false;
        for (auto& [option, list] : {std::pair{std::string_view("-include"), &inv.includes},
                                     std::pair{std::string_view("-L"), &inv.library_dirs},
                                     std::pair{std::string_view("-l"), &inv.libraries}}) {
            if (!a.starts_with(option)) {
                continue;
            }
            if (option == "-include") {
                inv.not_for_probe.push_back(i);
            }
            if (a.size() > option.size()) {
                list->emplace_back(a.substr(option.size()));
            } else if (has_next) {
                list->push_back(args[++i]);
            } else {
                operand_missing = true;
            }
            if (option != "-l") {
                inv.path_args.push_back(i);
            }
            if (option == "-include") {
                inv.not_for_probe.push_back(i); // the operand (or the joined option again)
            }
            taken = true;
            break;
        }
        if (operand_missing) {
            return no(std::string(a) + " without an operand");
        }
        if (taken) {
            if (a.starts_with("-L") && (inv.library_dirs.back().starts_with('=') ||
                                        inv.library_dirs.back().starts_with("$SYSROOT"))) {
                return no("a library directory in the sysroot (" + std::string(a) + ")");
            }
            continue;
        }
        if (a.starts_with("-Wl,")) {
            std::string_view rest = a.substr(4);
            while (!rest.empty()) {
                const auto comma = rest.find(',');
                if (!linker.ok(rest.substr(0, comma))) {
                    return no("linker option " + std::string(a));
                }
                rest =
                    comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
            }
            continue;
        }
        if (std::find(k_separate_operand.begin(), k_separate_operand.end(), a) !=
            k_separate_operand.end()) {
            if (!has_next) {
                return no(std::string(a) + " without an operand");
            }
            if (a == "-Xlinker" && !linker.ok(args[i + 1])) {
                return no("linker option " + args[i + 1]);
            }
            if (is_one_of(a, k_path_operand)) {
                inv.path_args.push_back(i + 1);
            }
            if (a.starts_with("-iprefix") || a.starts_with("-iwithprefix")) {
                return no("option " + std::string(a));
            }
            if (is_one_of(a, k_search_dir_operand)) {
                inv.include_dirs.push_back(args[i + 1]);
            } else if (a == "-imacros") {
                inv.macro_files.push_back(args[i + 1]);
            }
            sysroot = sysroot || a == "--sysroot";
            ++i;
            continue;
        }
        if (a == "-I-") {
            // Deprecated: splits the search and drops the includer's own
            // directory, which the shadowing candidates do not follow.
            return no("option -I-");
        }
        if (a.starts_with("-iprefix") || a.starts_with("-iwithprefix")) {
            // Search directories built from a prefix: not followed either.
            return no("option " + std::string(a));
        }
        if (a == "-march=native" || a == "-mtune=native" || a == "-mcpu=native") {
            inv.uses_native = true;
            continue;
        }
        if (a.starts_with("-g") && a != "-g0") {
            inv.debug_info = true;
        }
        if (a == "-static") {
            inv.static_link = true;
        }
        static_runtime = static_runtime || a.starts_with("-static-");
        other_link =
            other_link || a.starts_with("-fuse-ld=") || a == "-m32" || a == "-mx32" || a == "-m16";
        sysroot = sysroot || a.starts_with("--sysroot=");
        if (std::any_of(k_path_operand.begin(), k_path_operand.end(), [&](std::string_view p) {
                return a.starts_with(p) && a.size() > p.size();
            })) {
            inv.path_args.push_back(i);
        }
        for (const auto option : k_search_dir_operand) {
            if (a.starts_with(option) && a.size() > option.size()) {
                inv.include_dirs.emplace_back(a.substr(option.size()));
                break;
            }
        }
        if (a != "-s" && !starts_with_any(a, k_flag_prefixes)) {
            return no("unknown option " + std::string(a));
        }
    }

    if (!source) {
        return no("no source file");
    }
    if (!output) {
        return no("no -o");
    }
    if (inv.output_path.empty() || inv.output_path == "-") {
        return no("output to stdout");
    }
    for (const auto& dir : inv.include_dirs) {
        if (dir.starts_with('=') || dir.starts_with("$SYSROOT")) {
            return no("an include directory in the sysroot (" + dir + ")");
        }
    }
    inv.source = *source;
    inv.output = *output;
    inv.source_path = args[*source];
    if (inv.source_path == inv.output_path) {
        return no("the output is the source");
    }
    if (source_is_header) {
        inv.kind = Kind::precompiled_header;
    } else if (compile_only) {
        inv.kind = Kind::object;
    } else if (shared) {
        inv.kind = Kind::shared_object;
    } else {
        return no("links an executable");
    }
    if (inv.kind != Kind::shared_object && !inv.link_inputs.empty()) {
        return no("link inputs without linking");
    }
    // The libraries a link takes are searched for as g++ passes them to the
    // linker; a sysroot or a statically linked runtime changes that search.
    if (inv.kind == Kind::shared_object && sysroot) {
        return no("a shared object linked in a sysroot");
    }
    if (inv.kind == Kind::shared_object && static_runtime) {
        return no("a shared object with a static runtime library (-static-...)");
    }
    if (inv.kind == Kind::shared_object && other_link) {
        return no("a shared object linked by another linker or for another multilib");
    }
    return Classification{std::move(inv), {}};
}

} // namespace pt2cache::client::cxx
