// SPDX-License-Identifier: MIT
//
// The files that would shadow the headers a build used: where the compiler
// looks for a header name before it finds the file it takes (docs/cxx.md,
// "Shadowing candidates"). They are recorded with the build's inputs, absent
// ones as absent, so that a header created there later changes the key.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "client/cxx/includes.hpp"
#include "client/cxx/search_list.hpp"

namespace pt2cache::client::cxx {

class ShadowCandidates {
public:
    // `search`: the invocation's search list, every directory absolute, with
    // in `absent` also every directory the invocation names for the search
    // (the compiler drops one that is a file without saying so under -w).
    // `source`: the main file (absolute), whose includes may take a
    // precompiled header (`name.gch`, looked for before `name` in each
    // directory).
    ShadowCandidates(SearchList search, std::string source);

    // A file the build read (absolute): for each search directory it lies
    // under, the same relative name in every directory searched before it.
    // This covers a header whose name a macro computed.
    void add_dependency(const std::string& path);
    // The header names `file` (absolute) asks for, looked at in paths().
    void add_names(const std::string& file, std::vector<IncludeName> names);
    // An -include (`pch`) or -imacros operand: looked for in `cwd` first,
    // then as a quoted name.
    void add_forced_include(std::string_view name, const std::string& cwd, bool pch);

    // The paths to record, each checked on disk: for a candidate whose
    // directory (or a directory on its way) is missing, that missing
    // directory, which stands for every name under it; otherwise the
    // candidate itself.
    //
    // An #include's name adds the directories of its search chain (a quoted
    // one from the asking file's directory) before the regular file the
    // compiler takes, and only when that file is a dependency: one that
    // resolves to no dependency was in a branch the preprocessor skipped,
    // which only a change to a recorded input can make it take. An
    // include_next adds its whole chain (where it starts is not known
    // here). A __has_include adds its chain up to and with the file found,
    // or all of it: its answer matters either way.
    std::vector<std::string> paths();

private:
    enum class Kind { missing, directory, regular, other };
    struct Identity {
        dev_t device = 0;
        ino_t inode = 0;
        bool operator==(const Identity&) const = default;
    };
    struct IdentityHash {
        std::size_t operator()(const Identity& id) const {
            return std::hash<ino_t>()(id.inode) * 31 + std::hash<dev_t>()(id.device);
        }
    };
    struct Known {
        Kind kind = Kind::other;
        Identity identity;
    };
    struct Asked {
        std::string here; // the asking file's directory
        IncludeName include;
        bool pch = false; // the main file's: a name.gch may stand for it
    };
    const Known& look_at(const std::string& path);
    Kind kind_of(const std::string& path) { return look_at(path).kind; }
    // The first directory of `chain` holding `name` as a regular file (or,
    // with `pch`, anything named `name`.gch).
    std::optional<std::size_t> resolve(std::span<const std::string> chain, std::string_view name,
                                       bool pch);
    bool has_pch(std::string_view dir, std::string_view name);
    // Adds `name` (and with `pch` `name`.gch) in chain[0, until).
    void add_chain(std::span<const std::string> chain, std::size_t until, std::string_view name,
                   bool pch);
    bool is_dependency(const std::string& path);
    void add_asked(const Asked& asked);
    void add(std::string_view dir, std::string_view name);
    std::string recorded_path(std::string_view dir, std::string_view name);

    // The quoted-only directories, then the bracket ones.
    std::vector<std::string> m_chain;
    // m_chain's directories with symbolic links and ".." resolved (empty
    // where that fails): the compiler names system headers so in its
    // dependency output.
    std::vector<std::string> m_canonical;
    std::size_t m_bracket_from = 0;
    std::string m_source;
    std::vector<std::string> m_absent;
    // (directory, name) pairs, as "dir\0name".
    std::unordered_set<std::string> m_candidates;
    std::unordered_map<std::string, Known> m_known;
    std::unordered_set<Identity, IdentityHash> m_dependencies;
    std::vector<Asked> m_asked;
};

} // namespace pt2cache::client::cxx
