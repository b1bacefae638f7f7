// SPDX-License-Identifier: MIT
#include "client/cxx/link_inputs.hpp"

#include <algorithm>
#include <array>

namespace pt2cache::client::cxx {

namespace {

// Commands whose parenthesised operands name no file: skipped whole.
constexpr std::array<std::string_view, 3> k_skipped_commands = {"OUTPUT_FORMAT", "OUTPUT_ARCH",
                                                                "TARGET"};
// Commands whose operands are files (or nested AS_NEEDED lists).
constexpr std::array<std::string_view, 3> k_file_commands = {"GROUP", "INPUT", "AS_NEEDED"};

bool is_separator(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' || c == ',';
}

template <std::size_t N>
bool is_one_of(std::string_view word, const std::array<std::string_view, N>& list) {
    return std::ranges::find(list, word) != list.end();
}

// `text` with /* comments */ replaced by a space; nullopt if one never ends.
std::optional<std::string> without_block_comments(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    for (std::size_t i = 0; i < text.size();) {
        if (text.substr(i).starts_with("/*")) {
            const auto end = text.find("*/", i + 2);
            if (end == std::string_view::npos) {
                return std::nullopt;
            }
            out += ' ';
            i = end + 2;
        } else {
            out += text[i++];
        }
    }
    return out;
}

} // namespace

LinkFileKind link_file_kind(std::string_view head) {
    if (head.starts_with("\x7f"
                         "ELF")) {
        return LinkFileKind::elf;
    }
    if (head.starts_with("!<arch>\n")) {
        return LinkFileKind::archive;
    }
    if (head.starts_with("!<thin>\n")) {
        return LinkFileKind::thin_archive;
    }
    return LinkFileKind::script;
}

std::optional<std::vector<std::string>> linker_script_inputs(std::string_view text) {
    const auto clean = without_block_comments(text);
    if (!clean) {
        return std::nullopt;
    }
    // Words and parentheses; a quoted file name is not followed.
    std::vector<std::string_view> words;
    const std::string_view all = *clean;
    for (std::size_t i = 0; i < all.size();) {
        const char c = all[i];
        if (is_separator(c)) {
            ++i;
        } else if (c == '(' || c == ')') {
            words.push_back(all.substr(i, 1));
            ++i;
        } else {
            const auto start = i;
            while (i < all.size() && !is_separator(all[i]) && all[i] != '(' && all[i] != ')') {
                ++i;
            }
            words.push_back(all.substr(start, i - start));
        }
    }
    std::vector<std::string> files;
    int depth = 0; // inside GROUP/INPUT/AS_NEEDED lists
    for (std::size_t i = 0; i < words.size(); ++i) {
        const auto word = words[i];
        const bool opens = i + 1 < words.size() && words[i + 1] == "(";
        if (opens && depth == 0 && is_one_of(word, k_skipped_commands)) {
            // Up to the matching ')': a name, no file.
            i += 2;
            while (i < words.size() && words[i] != ")") {
                if (words[i] == "(") {
                    return std::nullopt;
                }
                ++i;
            }
            if (i == words.size()) {
                return std::nullopt;
            }
        } else if (opens && is_one_of(word, k_file_commands) &&
                   (depth == 0 || word == "AS_NEEDED")) {
            ++depth;
            ++i;
        } else if (word == ")" && depth > 0) {
            --depth;
        } else if (depth > 0 && !word.starts_with('"') && word != "(") {
            files.emplace_back(word);
        } else {
            return std::nullopt;
        }
    }
    if (depth != 0) {
        return std::nullopt;
    }
    return files;
}

} // namespace pt2cache::client::cxx
