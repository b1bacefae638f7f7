// SPDX-License-Identifier: MIT
#include "client/cxx/search_list.hpp"

#include <algorithm>
#include <array>

namespace pt2cache::client::cxx {

namespace {

// The path of GCC's "cc1plus: warning: PATH: not a directory" (a search
// directory that is a file, dropped), or empty.
std::string_view not_a_directory(std::string_view line) {
    constexpr std::string_view k_warning = "warning: ";
    constexpr std::string_view k_not = ": not a directory";
    const auto warning = line.find(k_warning);
    if (warning == std::string_view::npos || !line.ends_with(k_not)) {
        return {};
    }
    const auto from = warning + k_warning.size();
    const auto to = line.size() - k_not.size();
    return to > from ? line.substr(from, to - from) : std::string_view();
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
    // -Wno-error: an option for C only must not fail the probe under
    // -Werror; warnings stay on, since one names a search directory that is
    // a file (dropped).
    for (const auto* arg :
         {"-E", "-v", "-Wno-error", "-x", "c++", "/dev/null", "-o", "/dev/null"}) {
        probe.emplace_back(arg);
    }
    return probe;
}

std::optional<SearchList> parse_search_list(std::string_view verbose_output) {
    SearchList list;
    std::vector<std::string>* in_list = nullptr;
    bool complete = false;
    constexpr std::array<std::string_view, 2> k_left_out = {"ignoring nonexistent directory \"",
                                                            "ignoring duplicate directory \""};
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
        } else if (const auto file = not_a_directory(line); !file.empty()) {
            list.absent.emplace_back(file);
        } else if (in_list == nullptr) {
            for (const auto prefix : k_left_out) {
                if (!line.starts_with(prefix)) {
                    continue;
                }
                const auto rest = line.substr(prefix.size());
                if (const auto close = rest.rfind('"');
                    close != std::string_view::npos && close > 0) {
                    list.absent.emplace_back(rest.substr(0, close));
                }
            }
        }
    }
    if (!complete) {
        return std::nullopt;
    }
    return list;
}

} // namespace pt2cache::client::cxx
