// SPDX-License-Identifier: MIT
//
// The path side of args.hpp: rewriting machine-specific directories into
// placeholders, absolute paths, and the dependency output's Make rules.
#include <algorithm>

#include "client/cxx/args.hpp"

namespace pt2cache::client::cxx {

PathRewriter::PathRewriter(std::vector<Rule> rules) {
    for (auto& rule : rules) {
        while (rule.directory.size() > 1 && rule.directory.back() == '/') {
            rule.directory.pop_back();
        }
        if (rule.directory.empty() || rule.directory == "/" || rule.directory.front() != '/') {
            continue;
        }
        const bool known = std::any_of(m_rules.begin(), m_rules.end(), [&](const Rule& r) {
            return r.directory == rule.directory;
        });
        if (!known) {
            m_rules.push_back(std::move(rule));
        }
    }
    std::stable_sort(m_rules.begin(), m_rules.end(), [](const Rule& a, const Rule& b) {
        return a.directory.size() > b.directory.size();
    });
    for (const auto& rule : m_rules) {
        m_expansions.push_back({rule.placeholder, rule.directory});
    }
}

std::string PathRewriter::nesting() const {
    std::vector<std::string> lines;
    for (const auto& inner : m_rules) {
        for (const auto& outer : m_rules) {
            const auto& dir = outer.directory;
            if (&inner == &outer || !inner.directory.starts_with(dir) ||
                inner.directory.size() <= dir.size() || inner.directory[dir.size()] != '/') {
                continue;
            }
            // Below TMPDIR lie per-user names (/tmp/torchinductor_<user>):
            // keying them would keep a team from sharing builds, and no
            // compile reaches a file relative to TMPDIR itself.
            if (outer.placeholder == "@PT2_TMPDIR@") {
                lines.push_back(inner.placeholder + " in " + outer.placeholder);
            } else {
                lines.push_back(inner.placeholder + " = " + outer.placeholder +
                                inner.directory.substr(dir.size()));
            }
        }
    }
    std::sort(lines.begin(), lines.end());
    std::string out;
    for (const auto& line : lines) {
        out += line;
        out += '\n';
    }
    return out;
}

std::string PathRewriter::rewrite(std::string_view text) const {
    std::string out;
    out.reserve(text.size());
    std::size_t i = 0;
    while (i < text.size()) {
        bool replaced = false;
        for (const auto& rule : m_rules) {
            const auto& dir = rule.directory;
            if (text.substr(i).starts_with(dir) &&
                (i + dir.size() == text.size() || text[i + dir.size()] == '/')) {
                out += rule.placeholder;
                i += dir.size();
                replaced = true;
                break;
            }
        }
        if (!replaced) {
            out += text[i++];
        }
    }
    return out;
}

std::string PathRewriter::expand(std::string_view text) const {
    return proto::cxx::expand_placeholders(text, m_expansions);
}

std::string absolute_path(std::string_view path, std::string_view cwd) {
    std::string joined;
    if (!path.starts_with('/')) {
        joined.assign(cwd);
        joined += '/';
    }
    joined += path;
    std::vector<std::string_view> parts;
    std::string_view rest = joined;
    while (!rest.empty()) {
        const auto slash = rest.find('/');
        const auto part = rest.substr(0, slash);
        rest = slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
        if (part.empty() || part == ".") {
            continue;
        }
        // ".." stays: the kernel resolves it after any symbolic link before it.
        parts.push_back(part);
    }
    std::string out;
    for (const auto part : parts) {
        out += '/';
        out += part;
    }
    return out.empty() ? "/" : out;
}

namespace {

std::string parent_of(const std::string& path) {
    const auto slash = path.rfind('/');
    return slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
}

} // namespace

PathRewriter make_rewriter(const Invocation& invocation, std::string_view cwd,
                           std::string_view cache_dir, std::string_view tmp_dir) {
    std::vector<PathRewriter::Rule> rules;
    rules.push_back({parent_of(absolute_path(invocation.source_path, cwd)), "@PT2_SRCDIR@"});
    rules.push_back({parent_of(absolute_path(invocation.output_path, cwd)), "@PT2_OUTDIR@"});
    if (!cache_dir.empty()) {
        rules.push_back({absolute_path(cache_dir, cwd), "@PT2_CACHEDIR@"});
    }
    rules.push_back({absolute_path(tmp_dir.empty() ? "/tmp" : tmp_dir, cwd), "@PT2_TMPDIR@"});
    return PathRewriter(std::move(rules));
}

std::vector<std::string> parse_make_deps(std::string_view text) {
    std::vector<std::string> deps;
    std::string token;
    bool in_prerequisites = false;
    const auto finish = [&] {
        if (token.empty()) {
            return;
        }
        if (!in_prerequisites && token.back() == ':') {
            in_prerequisites = true;
        } else if (in_prerequisites) {
            deps.push_back(token);
        }
        token.clear();
    };
    for (std::size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (c == '\\' && i + 1 < text.size()) {
            const char next = text[i + 1];
            if (next == '\n') {
                finish();
                ++i;
                continue;
            }
            if (next == ' ' || next == '#' || next == '\\') {
                token += next;
                ++i;
                continue;
            }
        }
        if (c == '$' && i + 1 < text.size() && text[i + 1] == '$') {
            token += '$';
            ++i;
            continue;
        }
        if (c == '\n') {
            finish();
            in_prerequisites = false;
            continue;
        }
        if (c == ' ' || c == '\t' || c == '\r') {
            finish();
            continue;
        }
        if (c == ':' && !in_prerequisites &&
            (i + 1 == text.size() || text[i + 1] == ' ' || text[i + 1] == '\n' ||
             text[i + 1] == '\t')) {
            token += c;
            finish();
            continue;
        }
        token += c;
    }
    finish();
    return deps;
}

} // namespace pt2cache::client::cxx
