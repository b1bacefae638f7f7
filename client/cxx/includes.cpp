// SPDX-License-Identifier: MIT
#include "client/cxx/includes.hpp"

#include <algorithm>

namespace pt2cache::client::cxx {

namespace {

constexpr std::string_view k_blanks = " \t";

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

std::string trim(std::string_view text) {
    const auto first = text.find_first_not_of(" \t\r");
    if (first == std::string_view::npos) {
        return {};
    }
    const auto last = text.find_last_not_of(" \t\r");
    return std::string(text.substr(first, last - first + 1));
}

} // namespace

std::vector<IncludeName> include_names(std::string_view text) {
    std::vector<IncludeName> out;
    while (!text.empty()) {
        const auto end = text.find('\n');
        const auto line = text.substr(0, end);
        text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
        if (line.find("include") == std::string_view::npos &&
            line.find("import") == std::string_view::npos) {
            continue; // the usual line, at the cost of a search
        }
        if (const auto code = skip_blanks(line); code.starts_with('#')) {
            if (auto name = directive_name(code.substr(1))) {
                out.push_back(std::move(*name));
            }
        }
        add_has_include_names(line, out);
    }
    return out;
}

std::vector<std::string> search_probe_args(const std::string& compiler,
                                           std::span<const std::string> args,
                                           const Invocation& invocation) {
    std::vector<std::string> probe{compiler};
    for (std::size_t i = 0; i < args.size(); ++i) {
        const auto& skip = invocation.not_for_probe;
        if (std::find(skip.begin(), skip.end(), i) == skip.end()) {
            probe.push_back(args[i]);
        }
    }
    // -w: an option for C only must not fail the probe under -Werror.
    for (const auto* arg : {"-E", "-v", "-w", "-x", "c++", "/dev/null", "-o", "/dev/null"}) {
        probe.emplace_back(arg);
    }
    return probe;
}

std::optional<SearchList> parse_search_list(std::string_view verbose_output) {
    SearchList list;
    std::vector<std::string>* in_list = nullptr;
    bool complete = false;
    constexpr std::string_view k_absent = "ignoring nonexistent directory \"";
    while (!verbose_output.empty() && !complete) {
        const auto end = verbose_output.find('\n');
        const auto line = verbose_output.substr(0, end);
        verbose_output =
            end == std::string_view::npos ? std::string_view() : verbose_output.substr(end + 1);
        if (line.starts_with("#include \"...\" search starts here:")) {
            in_list = &list.quoted;
        } else if (line.starts_with("#include <...> search starts here:")) {
            in_list = &list.bracket;
        } else if (line.starts_with("End of search list.")) {
            complete = in_list == &list.bracket;
        } else if (in_list != nullptr && line.starts_with(' ')) {
            auto dir = trim(line);
            // Clang marks macOS framework directories; their layout is not
            // the plain one this follows, but the directory still counts.
            constexpr std::string_view k_framework = " (framework directory)";
            if (dir.ends_with(k_framework)) {
                dir.resize(dir.size() - k_framework.size());
            }
            if (!dir.empty()) {
                in_list->push_back(std::move(dir));
            }
        } else if (in_list == nullptr && line.starts_with(k_absent)) {
            // A duplicate is left out for being in the list already.
            const auto rest = line.substr(k_absent.size());
            if (const auto close = rest.rfind('"'); close != std::string_view::npos && close > 0) {
                list.absent.emplace_back(rest.substr(0, close));
            }
        }
    }
    if (!complete) {
        return std::nullopt;
    }
    return list;
}

} // namespace pt2cache::client::cxx
