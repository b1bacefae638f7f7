// SPDX-License-Identifier: MIT
#include "client/cxx/shadowing.hpp"

#include <algorithm>
#include <cerrno>
#include <sys/stat.h>

#include "client/cxx/args.hpp"

namespace pt2cache::client::cxx {

namespace {

std::string_view directory_of(std::string_view path) {
    const auto slash = path.rfind('/');
    return slash == 0 || slash == std::string_view::npos ? std::string_view("/")
                                                         : path.substr(0, slash);
}

void strip_trailing_slashes(std::vector<std::string>& dirs) {
    for (auto& dir : dirs) {
        while (dir.size() > 1 && dir.ends_with('/')) {
            dir.pop_back();
        }
    }
}

} // namespace

ShadowCandidates::ShadowCandidates(SearchList search) {
    strip_trailing_slashes(search.quoted);
    strip_trailing_slashes(search.bracket);
    strip_trailing_slashes(search.absent);
    m_chain = std::move(search.quoted);
    m_bracket_from = m_chain.size();
    m_chain.insert(m_chain.end(), search.bracket.begin(), search.bracket.end());
    m_absent = std::move(search.absent);
}

void ShadowCandidates::add(std::string_view dir, std::string_view name) {
    std::string key(dir);
    key.push_back('\0');
    key.append(name);
    m_candidates.insert(std::move(key));
}

std::optional<std::size_t> ShadowCandidates::resolve(std::span<const std::string> chain,
                                                     std::string_view name) {
    for (std::size_t at = 0; at < chain.size(); ++at) {
        // The compiler passes over anything but a file (a directory named
        // like the header) and goes on searching.
        if (kind_of(absolute_path(name, chain[at])) == Kind::regular) {
            return at;
        }
    }
    return std::nullopt;
}

bool ShadowCandidates::is_dependency(const std::string& path) {
    const auto& known = look_at(path);
    return known.kind == Kind::regular && m_dependencies.contains(known.identity);
}

void ShadowCandidates::add_dependency(const std::string& path) {
    if (const auto& known = look_at(path); known.kind == Kind::regular) {
        m_dependencies.insert(known.identity);
    }
    for (std::size_t at = 0; at < m_chain.size(); ++at) {
        const auto& under = m_chain[at];
        if (under == "/" || !path.starts_with(under) || path.size() <= under.size() + 1 ||
            path[under.size()] != '/') {
            continue;
        }
        const auto relative = std::string_view(path).substr(under.size() + 1);
        for (std::size_t before = 0; before < at; ++before) {
            add(m_chain[before], relative);
        }
        for (const auto& dir : m_absent) {
            add(dir, relative);
        }
    }
}

void ShadowCandidates::add_names(const std::string& file, std::vector<IncludeName> names) {
    const std::string here(directory_of(file));
    for (auto& include : names) {
        if (!include.name.starts_with('/')) { // opened as it is: a dependency
            m_asked.push_back(Asked{here, std::move(include)});
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
    } else if (const auto found = resolve(chain, name)) {
        if (include.asks) {
            until = *found + 1;
        } else if (is_dependency(absolute_path(name, chain[*found]))) {
            until = *found; // the file itself is recorded as a dependency
        } else {
            return; // a directive the preprocessor skipped
        }
    } else if (!include.asks) {
        return; // not found, yet the build succeeded: skipped too
    }
    for (std::size_t at = 0; at < until; ++at) {
        add(chain[at], name);
    }
    for (const auto& dir : m_absent) {
        add(dir, name);
    }
}

void ShadowCandidates::add_forced_include(std::string_view name, const std::string& cwd) {
    if (name.starts_with('/')) {
        return;
    }
    for (const auto& dir : m_absent) {
        add(dir, name);
    }
    // The working directory first, then the quoted chain, up to the file.
    add(cwd, name);
    if (kind_of(absolute_path(name, cwd)) == Kind::regular) {
        return;
    }
    const auto found = resolve(m_chain, name);
    for (std::size_t at = 0; at < found.value_or(m_chain.size()); ++at) {
        add(m_chain[at], name);
    }
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
