// SPDX-License-Identifier: MIT
#include "client/cxx/includes.hpp"

#include <algorithm>
#include <array>
#include <unordered_map>
#include <unordered_set>

namespace pt2cache::client::cxx {

namespace {

constexpr std::string_view k_blanks = " \t\f\v";

std::string_view skip_blanks(std::string_view text) {
    const auto at = text.find_first_not_of(k_blanks);
    return at == std::string_view::npos ? std::string_view() : text.substr(at);
}

// The header name at the start of `text` ("name" or <name>), if any.
std::optional<IncludeName> name_at(std::string_view text) {
    if (text.empty() || (text.front() != '"' && text.front() != '<')) {
        return std::nullopt;
    }
    const bool quoted = text.front() == '"';
    const auto end = text.find(quoted ? '"' : '>', 1);
    if (end == std::string_view::npos || end == 1) {
        return std::nullopt;
    }
    const auto name = text.substr(1, end - 1);
    if (name.find('\0') != std::string_view::npos) {
        return std::nullopt;
    }
    return IncludeName{std::string(name), quoted};
}

// A directive's header name: `line` after the '#'.
std::optional<IncludeName> directive_name(std::string_view line) {
    line = skip_blanks(line);
    for (const std::string_view keyword : {"include_next", "include", "import"}) {
        if (line.starts_with(keyword)) {
            auto name = name_at(skip_blanks(line.substr(keyword.size())));
            if (name) {
                name->next = keyword == "include_next";
            }
            return name;
        }
    }
    return std::nullopt;
}

void add_has_include_names(std::string_view line, std::vector<IncludeName>& out) {
    constexpr std::string_view k_has = "__has_include";
    for (auto at = line.find(k_has); at != std::string_view::npos; at = line.find(k_has, at + 1)) {
        auto rest = line.substr(at + k_has.size());
        const bool next = rest.starts_with("_next");
        if (next) {
            rest.remove_prefix(5);
        }
        rest = skip_blanks(rest);
        if (!rest.starts_with('(')) {
            continue;
        }
        if (auto name = name_at(skip_blanks(rest.substr(1)))) {
            name->next = next;
            name->asks = true;
            out.push_back(std::move(*name));
        }
    }
}

bool is_identifier_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// The directive of `line` (what follows '#' or "%:"), or nullopt.
std::optional<std::string_view> directive_of(std::string_view line) {
    const auto code = skip_blanks(line);
    if (code.starts_with('#')) {
        return skip_blanks(code.substr(1));
    }
    // The digraph, and the trigraph (-trigraphs, C++ before 17).
    for (const std::string_view hash : {"%:", "?\?="}) {
        if (code.starts_with(hash)) {
            return skip_blanks(code.substr(hash.size()));
        }
    }
    return std::nullopt;
}

// Calls `each` with every line of `text`; a line ends at "\n", "\r\n" or a
// lone "\r", as the preprocessor reads them.
template <typename Each>
void for_each_line(std::string_view text, Each&& each) {
    // The next '\r' is looked for once per '\r', not once per line: most
    // files have none.
    std::size_t cr = text.find('\r');
    std::size_t at = 0;
    while (at < text.size()) {
        if (cr != std::string_view::npos && cr < at) {
            cr = text.find('\r', at);
        }
        const auto end = std::min(text.find('\n', at), cr);
        each(text.substr(at, end == std::string_view::npos ? std::string_view::npos : end - at));
        if (end == std::string_view::npos) {
            break;
        }
        const bool crlf = text[end] == '\r' && end + 1 < text.size() && text[end + 1] == '\n';
        at = end + (crlf ? 2 : 1);
    }
}

bool is_hex_digit(char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

// The length of the line splice at `at` (a backslash, blanks, a newline),
// or 0.
std::size_t splice_at(std::string_view text, std::size_t at) {
    if (text[at] != '\\') {
        return 0;
    }
    auto end = at + 1;
    while (end < text.size() &&
           (text[end] == ' ' || text[end] == '\t' || text[end] == '\f' || text[end] == '\v')) {
        ++end;
    }
    if (end >= text.size() || (text[end] != '\n' && text[end] != '\r')) {
        return 0;
    }
    if (text[end] == '\r' && end + 1 < text.size() && text[end + 1] == '\n') {
        ++end;
    }
    return end + 1 - at;
}

// Where the raw string literal whose '"' is at `quote` ends (one past its
// closing '"'), or 0 when `quote` opens no raw string (R"delim( ... )delim").
std::size_t raw_string_end(std::string_view text, std::size_t quote) {
    if (quote == 0 || text[quote - 1] != 'R') {
        return 0;
    }
    // R, or LR, uR, UR, u8R, starting an identifier of its own.
    std::size_t start = quote - 1;
    for (const std::string_view prefix : {"u8R", "LR", "uR", "UR", "R"}) {
        if (quote >= prefix.size() && text.substr(quote - prefix.size(), prefix.size()) == prefix) {
            start = quote - prefix.size();
            break;
        }
    }
    if (start > 0 && is_identifier_char(text[start - 1])) {
        return 0;
    }
    const auto open = text.find('(', quote + 1);
    if (open == std::string_view::npos || open - quote - 1 > 16) {
        return 0;
    }
    const auto delimiter = text.substr(quote + 1, open - quote - 1);
    if (delimiter.find_first_of(" \\)\t\n\r\f\v") != std::string_view::npos) {
        return 0;
    }
    const std::string close = ")" + std::string(delimiter) + "\"";
    const auto end = text.find(close, open + 1);
    return end == std::string_view::npos ? text.size() : end + close.size();
}

// The argument text of the call whose '(' starts `text`: up to the matching
// ')', or the end of the line.
std::string_view call_arguments(std::string_view text) {
    int depth = 0;
    for (std::size_t i = 0; i < text.size(); ++i) {
        if (text[i] == '(') {
            ++depth;
        } else if (text[i] == ')' && --depth == 0) {
            return text.substr(1, i - 1);
        }
    }
    return text.empty() ? text : text.substr(1);
}

// Calls `each` with the argument text of every call of `macro` in `line`
// (`macro` standing as an identifier of its own, then '(').
template <typename Each>
void for_each_call(std::string_view line, std::string_view macro, Each&& each) {
    for (auto at = line.find(macro); at != std::string_view::npos; at = line.find(macro, at + 1)) {
        const auto after = at + macro.size();
        if ((at > 0 && is_identifier_char(line[at - 1])) ||
            (after < line.size() && is_identifier_char(line[after]))) {
            continue;
        }
        const auto rest = skip_blanks(line.substr(after));
        if (rest.starts_with('(')) {
            each(call_arguments(rest));
        }
    }
}

// Every header name ("name" or <name>) in `text`.
template <typename Each>
void for_each_name(std::string_view text, Each&& each) {
    for (std::size_t at = 0; at < text.size(); ++at) {
        if (text[at] == '"' || text[at] == '<') {
            if (auto name = name_at(text.substr(at))) {
                at += name->name.size() + 1;
                each(std::move(*name));
            }
        }
    }
}

// Every identifier in `text`, outside header names and strings.
template <typename Each>
void for_each_identifier(std::string_view text, Each&& each) {
    for (std::size_t at = 0; at < text.size();) {
        if (text[at] == '"' || text[at] == '<') {
            const auto name = name_at(text.substr(at));
            if (name && (text[at] == '"' || name->name.find(' ') == std::string::npos)) {
                at += name->name.size() + 2;
                continue;
            }
        }
        if (!is_identifier_char(text[at])) {
            ++at;
            continue;
        }
        auto end = at;
        while (end < text.size() && is_identifier_char(text[end])) {
            ++end;
        }
        if (text[at] < '0' || text[at] > '9') {
            each(text.substr(at, end - at));
        }
        at = end;
    }
}

// A macro definition's name, parameters (nullopt: object-like) and body.
struct Definition {
    std::string_view name;
    bool function_like = false;
    std::string_view body;
};

std::optional<Definition> definition_of(std::string_view line) {
    auto directive = directive_of(line);
    if (!directive || !directive->starts_with("define")) {
        return std::nullopt;
    }
    auto rest = directive->substr(6);
    if (rest.empty() || is_identifier_char(rest.front())) {
        return std::nullopt; // "defined..." or no name
    }
    rest = skip_blanks(rest);
    std::size_t length = 0;
    while (length < rest.size() && is_identifier_char(rest[length])) {
        ++length;
    }
    if (length == 0) {
        return std::nullopt;
    }
    Definition definition{rest.substr(0, length)};
    rest = rest.substr(length);
    if (rest.starts_with('(')) {
        definition.function_like = true;
        const auto close = rest.find(')');
        rest = close == std::string_view::npos ? std::string_view() : rest.substr(close + 1);
    }
    definition.body = skip_blanks(rest);
    return definition;
}

void scan_directives(std::string_view text, std::vector<IncludeName>& out) {
    for_each_line(text, [&](std::string_view line) {
        if (line.find("include") == std::string_view::npos &&
            line.find("import") == std::string_view::npos) {
            return; // the usual line, at the cost of a search
        }
        if (const auto directive = directive_of(line)) {
            if (auto name = directive_name(*directive)) {
                out.push_back(std::move(*name));
            }
        }
        add_has_include_names(line, out);
    });
}

// `names`, and what the object-like ones among them are defined as
// (`#define CONFIG BOOST_CONFIG`), and so on: each name once, in the order
// first reached.
std::vector<std::string>
alias_closure(std::span<const std::string_view> names, const std::vector<Definition>& definitions,
              const std::unordered_map<std::string_view, std::vector<std::size_t>>& defined_by) {
    std::vector<std::string_view> queue;
    std::unordered_set<std::string_view> seen;
    const auto add = [&](std::string_view name) {
        if (!name.empty() && seen.insert(name).second) {
            queue.push_back(name);
        }
    };
    for (const auto name : names) {
        add(name);
    }
    for (std::size_t next = 0; next < queue.size(); ++next) {
        const auto found = defined_by.find(queue[next]);
        if (found == defined_by.end()) {
            continue;
        }
        for (const auto i : found->second) {
            if (!definitions[i].function_like) {
                for_each_identifier(definitions[i].body, add);
            }
        }
    }
    return {queue.begin(), queue.end()};
}

} // namespace

std::string without_comments(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    if (text.starts_with("\xEF\xBB\xBF")) {
        text.remove_prefix(3); // a byte order mark
    }
    enum class State { code, line_comment, block_comment, string, character };
    // Per state, the bytes the loop below looks at; a run of others is
    // copied (code, a literal) or dropped (a comment) whole, as the loop
    // would one byte at a time. A backslash may start a line splice in any.
    using Bytes = std::array<bool, 256>;
    const auto of = [](std::string_view chars) {
        Bytes set{};
        for (const char c : chars) {
            set[static_cast<unsigned char>(c)] = true;
        }
        return set;
    };
    // In State's order.
    static const std::array<Bytes, 5> k_stops = {of("\\/\"'"), of("\\\n\r"), of("\\*"),
                                                 of("\\\n\r\""), of("\\\n\r'")};
    auto state = State::code;
    for (std::size_t i = 0; i < text.size(); ++i) {
        const auto& stops = k_stops[static_cast<std::size_t>(state)];
        auto run_end = i;
        while (run_end < text.size() && !stops[static_cast<unsigned char>(text[run_end])]) {
            ++run_end;
        }
        if (run_end > i) {
            if (state != State::line_comment && state != State::block_comment) {
                out.append(text.substr(i, run_end - i));
            }
            i = run_end;
            if (i == text.size()) {
                break;
            }
        }
        // A line splice (a backslash, maybe blanks, a newline) joins lines
        // before anything else looks.
        if (const auto splice = splice_at(text, i); splice > 0) {
            i += splice - 1;
            continue;
        }
        const char c = text[i];
        const char next = i + 1 < text.size() ? text[i + 1] : '\0';
        const bool newline = c == '\n' || c == '\r';
        switch (state) {
        case State::code:
            if (c == '/' && next == '/') {
                state = State::line_comment;
                out.push_back(' ');
                ++i;
            } else if (c == '/' && next == '*') {
                state = State::block_comment;
                out.push_back(' ');
                ++i;
            } else if (const auto raw_end = c == '"' ? raw_string_end(text, i) : 0; raw_end > 0) {
                out.append(text.substr(i, raw_end - i));
                i = raw_end - 1;
            } else {
                if (c == '"') {
                    state = State::string;
                } else if (c == '\'' && !(!out.empty() && is_hex_digit(out.back()) &&
                                          is_identifier_char(next))) {
                    state = State::character; // not a digit separator (1'000)
                }
                out.push_back(c);
            }
            break;
        case State::line_comment:
            if (newline) {
                state = State::code;
                out.push_back(c);
            }
            break;
        case State::block_comment:
            // One space for the whole comment, even across lines: a
            // directive goes on after it.
            if (c == '*' && next == '/') {
                state = State::code;
                ++i;
            }
            break;
        case State::string:
        case State::character:
            out.push_back(c);
            if (c == '\\' && next != '\0' && next != '\n' && next != '\r') {
                out.push_back(next);
                ++i;
            } else if (newline || c == (state == State::string ? '"' : '\'')) {
                state = State::code; // a newline ends an unterminated one
            }
            break;
        }
    }
    return out;
}

IncludeMacros include_macros(std::span<const std::string_view> texts) {
    std::vector<Definition> definitions;
    // What #include, #include_next and #import are given, and the lines
    // that may call __has_include or a wrapper of it.
    std::vector<std::string_view> included;
    std::vector<std::string_view> lines;
    for (const auto text : texts) {
        for_each_line(text, [&](std::string_view line) {
            if (line.find("define") != std::string_view::npos) {
                if (auto definition = definition_of(line)) {
                    definitions.push_back(*definition);
                    return;
                }
            }
            if (const auto directive = directive_of(line)) {
                for (const std::string_view keyword : {"include_next", "include", "import"}) {
                    if (directive->starts_with(keyword)) {
                        included.push_back(skip_blanks(directive->substr(keyword.size())));
                        break;
                    }
                }
            }
            if (line.find('(') != std::string_view::npos) {
                lines.push_back(line);
            }
        });
    }
    IncludeMacros macros;
    // Which definitions each identifier's name is defined by, and which
    // bodies name it: the closures below walk these once (no rescans of
    // every definition, which a long chain of macros would make quadratic).
    std::unordered_map<std::string_view, std::vector<std::size_t>> defined_by;
    std::unordered_map<std::string_view, std::vector<std::size_t>> named_by;
    for (std::size_t i = 0; i < definitions.size(); ++i) {
        defined_by[definitions[i].name].push_back(i);
        for_each_identifier(definitions[i].body,
                            [&](std::string_view name) { named_by[name].push_back(i); });
    }
    // __has_include, and every macro whose body names one of these (a
    // wrapper, or an alias: `#define HAS_INC __has_include`).
    std::vector<std::string> askers{"__has_include", "__has_include_next"};
    std::unordered_set<std::string_view> is_asker{"__has_include", "__has_include_next"};
    for (std::size_t next = 0; next < askers.size(); ++next) {
        const auto found = named_by.find(askers[next]);
        if (found == named_by.end()) {
            continue;
        }
        for (const auto i : found->second) {
            if (is_asker.insert(definitions[i].name).second) {
                askers.emplace_back(definitions[i].name);
            }
        }
    }
    // Every identifier given to #include, #include_next or #import, or to
    // an asker in any argument.
    std::vector<std::string_view> included_names;
    for (const auto operand : included) {
        for_each_identifier(operand,
                            [&](std::string_view name) { included_names.push_back(name); });
    }
    std::vector<std::string_view> asked_names;
    for (const auto line : lines) {
        for (const auto& asker : askers) {
            for_each_call(line, asker, [&](std::string_view arguments) {
                for_each_identifier(arguments,
                                    [&](std::string_view name) { asked_names.push_back(name); });
            });
        }
    }
    macros.included = alias_closure(included_names, definitions, defined_by);
    macros.asked = alias_closure(asked_names, definitions, defined_by);
    askers.erase(askers.begin(), askers.begin() + 2);
    macros.wrappers = std::move(askers);
    return macros;
}

std::vector<IncludeName> include_names(std::string_view raw, std::string_view clean,
                                       const IncludeMacros& macros) {
    const auto& wrappers = macros.wrappers;
    std::vector<IncludeName> out;
    scan_directives(raw, out);
    scan_directives(clean, out);
    for_each_line(clean, [&](std::string_view line) {
        if (auto definition = definition_of(line); definition && !definition->function_like) {
            const auto is_in = [&](const std::vector<std::string>& operands) {
                return std::find(operands.begin(), operands.end(), definition->name) !=
                       operands.end();
            };
            for (const bool asks : {false, true}) {
                if (!is_in(asks ? macros.asked : macros.included)) {
                    continue;
                }
                if (auto name = name_at(definition->body)) {
                    name->asks = asks;
                    out.push_back(std::move(*name));
                }
            }
        }
        // A wrapper's header names, in any of its arguments.
        for (const auto& wrapper : wrappers) {
            for_each_call(line, wrapper, [&](std::string_view arguments) {
                for_each_name(arguments, [&](IncludeName name) {
                    name.asks = true;
                    out.push_back(std::move(name));
                });
            });
        }
    });
    // Each once, in the order first seen.
    std::vector<IncludeName> unique;
    unique.reserve(out.size());
    std::unordered_set<std::string> seen;
    for (auto& name : out) {
        const char flags[] = {char('0' + name.quoted), char('0' + name.next),
                              char('0' + name.asks)};
        if (seen.insert(std::string(flags, 3) + name.name).second) {
            unique.push_back(std::move(name));
        }
    }
    return unique;
}

std::vector<IncludeName> include_names(std::string_view text) {
    const auto clean = without_comments(text);
    const std::array<std::string_view, 1> texts{clean};
    return include_names(text, clean, include_macros(texts));
}

} // namespace pt2cache::client::cxx
