// SPDX-License-Identifier: MIT
#include "client/cxx/pins.hpp"

#include <cstdint>
#include <cstring>
#include <string>

#include "proto/bytes.hpp"

namespace pt2cache::client::cxx {

namespace {

// `text` as UTF-16LE (2) or UTF-32LE (4) code units: what u"", L"" and U""
// make of an ASCII path such as __FILE__'s.
std::string widened(std::string_view text, std::size_t width) {
    std::string out;
    out.reserve(text.size() * width);
    for (const char c : text) {
        out.push_back(c);
        out.append(width - 1, '\0');
    }
    return out;
}

// Whether `bytes` hold `dir` (already widened to the code units looked
// for, `width` bytes each) as `which` counts.
bool holds(std::string_view bytes, std::string_view dir, std::size_t width, Occurrences which) {
    if (which == Occurrences::all) {
        return bytes.find(dir) != std::string_view::npos;
    }
    const std::string quote = widened("\"", width);
    const std::string slash_quote = widened("/\"", width);
    for (auto at = bytes.find(dir); at != std::string_view::npos; at = bytes.find(dir, at + 1)) {
        const auto after = bytes.substr(at + dir.size());
        const bool alone = at >= width && bytes.substr(at - width, width) == quote &&
                           (after.starts_with(quote) || after.starts_with(slash_quote));
        if (!alone) {
            return true;
        }
    }
    return false;
}

} // namespace

void mark_named(std::string_view bytes, const std::vector<PathRewriter::Rule>& rules,
                std::vector<bool>& named, Occurrences which) {
    // A directory as wide code units holds NUL bytes: text without
    // any (every header in practice) is searched once per directory.
    const bool narrow_only = bytes.find('\0') == std::string_view::npos;
    for (std::size_t r = 0; r < rules.size(); ++r) {
        for (const std::size_t width : {1, 2, 4}) {
            if (named[r] || (width > 1 && narrow_only)) {
                break;
            }
            const auto& dir = rules[r].directory;
            named[r] = holds(bytes, width == 1 ? dir : widened(dir, width), width, which);
        }
    }
}

bool mark_output_names(std::span<const std::byte> file,
                       const std::vector<PathRewriter::Rule>& rules, std::vector<bool>& named) {
    const auto u16 = [&](std::size_t at) {
        std::uint16_t v = 0;
        std::memcpy(&v, file.data() + at, sizeof v);
        return v;
    };
    const auto u32 = [&](std::size_t at) {
        std::uint32_t v = 0;
        std::memcpy(&v, file.data() + at, sizeof v);
        return v;
    };
    const auto u64 = [&](std::size_t at) {
        std::uint64_t v = 0;
        std::memcpy(&v, file.data() + at, sizeof v);
        return v;
    };
    const auto text = proto::as_text(file);
    if (!text.starts_with("\x7f"
                          "ELF")) {
        return true;
    }
    if (file.size() < 64 ||
        !text.starts_with("\x7f"
                          "ELF\x02\x01") ||
        u16(58) != 64) {
        return false; // not the 64-bit little-endian ELF this reads
    }
    const auto shoff = u64(40);
    const std::uint64_t count = u16(60);
    const std::uint64_t names = u16(62);
    if (names >= count || shoff > file.size() || count * 64 > file.size() - shoff) {
        return false;
    }
    const auto section = [&](std::uint64_t i) { return static_cast<std::size_t>(shoff + i * 64); };
    const auto strings_at = u64(section(names) + 24);
    const auto strings_size = u64(section(names) + 32);
    if (strings_at > file.size() || strings_size > file.size() - strings_at) {
        return false;
    }
    const auto strings = text.substr(strings_at, strings_size);
    for (std::uint64_t i = 0; i < count; ++i) {
        const auto at = section(i);
        constexpr std::uint32_t k_nobits = 8;
        const auto name_at = u32(at);
        const auto name = name_at < strings.size()
                              ? strings.substr(name_at, strings.find('\0', name_at) - name_at)
                              : std::string_view();
        if (u32(at + 4) == k_nobits || name.starts_with(".debug") || name.starts_with(".zdebug") ||
            name.starts_with(".rela.debug")) {
            continue;
        }
        const auto offset = u64(at + 24);
        const auto size = u64(at + 32);
        if (offset > file.size() || size > file.size() - offset) {
            return false;
        }
        mark_named(text.substr(offset, size), rules, named);
    }
    return true;
}

} // namespace pt2cache::client::cxx
