// SPDX-License-Identifier: MIT
//
// What pt2cache-cxx makes of a compiler command line (docs/cxx.md,
// "Cacheable invocations"): one source to one output, as a shared object, an
// object file or a precompiled header; anything else runs the real compiler
// unchanged. Pure functions: no I/O.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "proto/cxx_manifest.hpp"

namespace pt2cache::client::cxx {

enum class Kind { shared_object, object, precompiled_header };

std::string_view kind_name(Kind kind);

struct Invocation {
    Kind kind = Kind::object;
    std::size_t source = 0; // index into the arguments
    std::size_t output = 0; // index of the -o operand (or of "-oFILE")
    std::string source_path;
    std::string output_path;
    // -include operands, in order.
    std::vector<std::string> includes;
    // -imacros operands, in order.
    std::vector<std::string> macro_files;
    // -I, -isystem, -iquote and -idirafter operands, in order.
    std::vector<std::string> include_dirs;
    // -L directories and -l names (without "-l"), in order; "-l:file" keeps ':'.
    std::vector<std::string> library_dirs;
    std::vector<std::string> libraries;
    // Object files and archives linked into a shared object.
    std::vector<std::string> link_inputs;
    // Indices of the arguments that name input or output locations (the
    // source, the -o operand, include and library directories, -include and
    // -imacros files, link inputs): the only ones whose directories are
    // rewritten. Any other argument (a -D string, -Wl,-rpath) is keyed as
    // given: its text can end up in the output.
    std::vector<std::size_t> path_args;
    // Indices of the arguments the include-search probe leaves out (the
    // source, -o and its operand, -c, -include and its operand, link inputs):
    // see search_probe_args() (search_list.hpp).
    std::vector<std::size_t> not_for_probe;
    bool uses_native = false; // -march=native, -mtune=native or -mcpu=native
    bool debug_info = false;  // -g other than -g0: paths are kept as they are
    bool static_link = false; // -static
};

struct Uncacheable {
    std::string reason;
};

// `args` excludes argv[0].
struct Classification {
    std::optional<Invocation> invocation;
    Uncacheable why; // when !invocation
};

Classification classify(std::span<const std::string> args);

// Whether an invocation is a query whose printed output tools parse
// (`--version`, `-v`, `-E`, `-###`, `-dump…`, `-print-…`, `--help`, `-M`,
// `-MM`): the launcher adds nothing to its stdout or stderr. Inductor names its
// precompiled header and ISA checks after `--version` and `-E` output, CMake
// reads `-v`'s search list.
bool prints_for_tools(std::span<const std::string> args);

// The machine-specific directories of an invocation, each replaced by a
// placeholder in every key input (docs/cxx.md, "Path rewriting").
class PathRewriter {
public:
    struct Rule {
        std::string directory; // absolute, no trailing slash
        std::string placeholder;
    };

    PathRewriter() = default;
    // Rules are applied longest directory first; empty or "/" directories are
    // ignored, and a directory already named by a rule keeps that rule.
    explicit PathRewriter(std::vector<Rule> rules);

    // Every occurrence of a rule's directory that is followed by '/' or by the
    // end of `text` becomes its placeholder.
    std::string rewrite(std::string_view text) const;
    // The inverse, for paths recorded in a manifest.
    std::string expand(std::string_view text) const;

    const std::vector<Rule>& rules() const { return m_rules; }
    // How the rules' directories nest, one line per nested pair, sorted:
    // "@INNER@ = @OUTER@/relative" (with TMPDIR as the outer one, only
    // "@INNER@ in @OUTER@"), empty when none nests. A path is rewritten by
    // the longest directory holding it, so it names the same file in
    // another invocation only where the directories nest the same way: the
    // launcher keys this (docs/cxx.md, "Path rewriting").
    std::string nesting() const;
    // The rules as `expand` applies them (the daemon's CXX_LOOKUP expands the
    // same way).
    const std::vector<proto::cxx::PlaceholderRule>& expansions() const { return m_expansions; }

private:
    std::vector<Rule> m_rules;
    std::vector<proto::cxx::PlaceholderRule> m_expansions;
};

using proto::cxx::k_placeholder_mark;

// The rewriter for an invocation: SRCDIR, OUTDIR, CACHEDIR
// (TORCHINDUCTOR_CACHE_DIR) and TMPDIR ($TMPDIR, else /tmp). `cwd` makes
// relative source and output paths absolute.
PathRewriter make_rewriter(const Invocation& invocation, std::string_view cwd,
                           std::string_view cache_dir, std::string_view tmp_dir);

// `path` made absolute against `cwd`, with "." segments and repeated slashes
// removed. ".." segments stay: "a/link/../h.h" is not "a/h.h" when `link` is
// a symbolic link, and "@PT2_SRCDIR@/../x" must expand to the file the
// compiler opens in the other directory.
std::string absolute_path(std::string_view path, std::string_view cwd);

// The prerequisites of a Make rule file written by -MD -MF (escaped spaces,
// line continuations, several rules); the targets are left out.
std::vector<std::string> parse_make_deps(std::string_view text);

} // namespace pt2cache::client::cxx
