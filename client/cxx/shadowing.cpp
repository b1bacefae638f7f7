// SPDX-License-Identifier: MIT
#include "client/cxx/shadowing.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <sys/stat.h>

#include "client/cxx/args.hpp"

namespace pt2cache::client::cxx {

namespace {

std::string_view directory_of(std::string_view path) {
    const auto slash = path.rfind('/');
    return slash == 0 || slash == std::string_view::npos ? std::string_view("/")
                                                         : path.substr(0, slash);
}

std::string canonical_path(const std::string& path) {
    char* resolved = ::realpath(path.c_str(), nullptr);
    if (resolved == nullptr) {
        return {};
    }
    std::string out(resolved);
    std::free(resolved);
    return out;
}

// The part of `path` under `dir`, or empty.
std::string_view under(std::string_view path, std::string_view dir) {
    if (dir.empty() || dir == "/" || !path.starts_with(dir) || path.size() <= dir.size() + 1 ||
        path[dir.size()] != '/') {
        return {};
    }
    return path.substr(dir.size() + 1);
}

void strip_trailing_slashes(std::vector<std::string>& dirs) {
    for (auto& dir : dirs) {
        while (dir.size() > 1 && dir.ends_with('/')) {
            dir.pop_back();
        }
    }
}

} // namespace

ShadowCandidates::ShadowCandidates(SearchList search, std::string source)
    : m_source(std::move(source)) {
    strip_trailing_slashes(search.quoted);
    strip_trailing_slashes(search.bracket);
    strip_trailing_slashes(search.absent);
    m_chain = std::move(search.quoted);
    m_bracket_from = m_chain.size();
    m_chain.insert(m_chain.end(), search.bracket.begin(), search.bracket.end());
    for (auto& dir : search.absent) {
        const bool listed = std::find(m_chain.begin(), m_chain.end(), dir) != m_chain.end() ||
                            std::find(m_absent.begin(), m_absent.end(), dir) != m_absent.end();
        if (!listed) {
            m_absent.push_back(std::move(dir));
        }
    }
    for (const auto& dir : m_chain) {
        m_canonical.push_back(canonical_path(dir));
    }
}

void ShadowCandidates::add(std::string_view dir, std::string_view name) {
    std::string key(dir);
    key.push_back('\0');
    key.append(name);
    m_candidates.insert(std::move(key));
}

bool ShadowCandidates::has_pch(std::string_view dir, std::string_view name) {
    return kind_of(absolute_path(std::string(name) + ".gch", dir)) != Kind::missing;
}

std::optional<std::size_t> ShadowCandidates::resolve(std::span<const std::string> chain,
                                                     std::string_view name, bool pch) {
    for (std::size_t at = 0; at < chain.size(); ++at) {
        // The compiler passes over anything but a file (a directory named
        // like the header) and goes on searching.
        if ((pch && has_pch(chain[at], name)) ||
            kind_of(absolute_path(name, chain[at])) == Kind::regular) {
            return at;
        }
    }
    return std::nullopt;
}

void ShadowCandidates::add_chain(std::span<const std::string> chain, std::size_t until,
                                 std::string_view name, bool pch) {
    for (std::size_t at = 0; at < until && at < chain.size(); ++at) {
        add(chain[at], name);
        if (pch) {
            add(chain[at], std::string(name) + ".gch");
        }
    }
}

bool ShadowCandidates::is_dependency(const std::string& path) {
    const auto& known = look_at(path);
    return known.kind == Kind::regular && m_dependencies.contains(known.identity);
}

void ShadowCandidates::add_dependency(const std::string& path) {
    if (const auto& known = look_at(path); known.kind == Kind::regular) {
        m_dependencies.insert(known.identity);
    }
    // By its text and by its real path: the compiler writes a system
    // header's path shortened (-fcanonical-system-headers).
    const auto real = canonical_path(path);
    for (std::size_t at = 0; at < m_chain.size(); ++at) {
        for (const auto relative : {under(path, m_chain[at]), under(real, m_canonical[at])}) {
            if (relative.empty()) {
                continue;
            }
            add_chain(m_chain, at, relative, false);
            for (const auto& dir : m_absent) {
                add(dir, relative);
            }
        }
    }
}

void ShadowCandidates::add_names(const std::string& file, std::vector<IncludeName> names) {
    const std::string here(directory_of(file));
    const bool main = file == m_source;
    for (auto& include : names) {
        if (!include.name.starts_with('/')) { // opened as it is: a dependency
            const bool pch = main && !include.next && !include.asks;
            m_asked.push_back(Asked{here, std::move(include), pch});
        }
    }
}

void ShadowCandidates::add_asked(const Asked& asked) {
    const auto& include = asked.include;
    const std::string_view name = include.name;
    std::vector<std::string> chain;
    if (include.quoted) {
        chain.push_back(asked.here);
        chain.insert(chain.end(), m_chain.begin(), m_chain.end());
    } else {
        chain.assign(m_chain.begin() + static_cast<std::ptrdiff_t>(m_bracket_from), m_chain.end());
    }
    std::size_t until = chain.size(); // candidates: chain[0, until)
    if (include.next) {
        // Searched from after the asking file's directory, wherever that
        // is in the chain: all of it, when it took a dependency.
        bool took = false;
        for (const auto& dir : chain) {
            took = took || is_dependency(absolute_path(name, dir));
        }
        if (!took && !include.asks) {
            return;
        }
    } else if (const auto found = resolve(chain, name, asked.pch)) {
        // A precompiled header taken leaves no dependency (without
        // -fpch-deps when it was built), so one found counts as taken.
        const bool taken = (asked.pch && has_pch(chain[*found], name)) ||
                           is_dependency(absolute_path(name, chain[*found]));
        if (!taken && !include.asks) {
            return; // a directive the preprocessor skipped
        }
        // Up to and with the file taken, under the path it was looked up by
        // (a symbolic link there may be pointed elsewhere later).
        until = *found + 1;
    } else if (!include.asks) {
        return; // not found, yet the build succeeded: skipped too
    }
    add_chain(chain, until, name, asked.pch);
    for (const auto& dir : m_absent) {
        add(dir, name);
    }
}

void ShadowCandidates::add_forced_include(std::string_view name, const std::string& cwd, bool pch) {
    if (name.starts_with('/')) {
        return;
    }
    for (const auto& dir : m_absent) {
        add(dir, name);
    }
    // The working directory first, then the quoted chain, up to the file.
    std::vector<std::string> chain{cwd};
    chain.insert(chain.end(), m_chain.begin(), m_chain.end());
    const auto found = resolve(chain, name, pch);
    add_chain(chain, found ? *found + 1 : chain.size(), name, pch);
}

const ShadowCandidates::Known& ShadowCandidates::look_at(const std::string& path) {
    if (const auto known = m_known.find(path); known != m_known.end()) {
        return known->second;
    }
    struct stat st {};
    Known known;
    if (::stat(path.c_str(), &st) != 0) {
        known.kind = errno == ENOENT ? Kind::missing : Kind::other;
    } else {
        known.kind = S_ISDIR(st.st_mode)   ? Kind::directory
                     : S_ISREG(st.st_mode) ? Kind::regular
                                           : Kind::other;
        known.identity = Identity{st.st_dev, st.st_ino};
    }
    return m_known.emplace(path, known).first->second;
}

std::string ShadowCandidates::recorded_path(std::string_view dir, std::string_view name) {
    auto full = absolute_path(name, dir);
    std::string path(dir);
    auto kind = kind_of(path);
    if (kind == Kind::regular || kind == Kind::other) {
        return path; // a search directory that is not one: recorded itself
    }
    std::string_view rest = name;
    // Down the name's directories: the first one missing stands for every
    // file under it. Anything else in the way (a file, a directory that
    // cannot be searched) leaves the candidate itself to be recorded, whose
    // status then says it.
    while (kind == Kind::directory) {
        const auto slash = rest.find('/');
        if (slash == std::string_view::npos) {
            return full;
        }
        const auto component = rest.substr(0, slash);
        rest = rest.substr(slash + 1);
        if (component.empty() || component == ".") {
            continue;
        }
        if (path != "/") {
            path.push_back('/');
        }
        path.append(component);
        kind = kind_of(path);
    }
    return kind == Kind::missing ? path : full;
}

std::vector<std::string> ShadowCandidates::paths() {
    for (const auto& asked : m_asked) {
        add_asked(asked);
    }
    m_asked.clear();
    // Sorted: the same build records the same variant.
    std::vector<std::string_view> candidates(m_candidates.begin(), m_candidates.end());
    std::sort(candidates.begin(), candidates.end());
    std::unordered_set<std::string> seen;
    std::vector<std::string> out;
    for (const auto candidate : candidates) {
        const auto zero = candidate.find('\0');
        auto path = recorded_path(candidate.substr(0, zero), candidate.substr(zero + 1));
        if (seen.insert(path).second) {
            out.push_back(std::move(path));
        }
    }
    return out;
}

} // namespace pt2cache::client::cxx
