// SPDX-License-Identifier: MIT
// Fuzz target: what pt2cache-cxx reads out of header text and out of the
// compiler's -v output (client/cxx/includes.*, docs/cxx.md, "Shadowing
// candidates"). Both are any bytes a user's files or compiler may hold; a
// crash would fail the compile the launcher runs. Invariants: the text
// without comments is no longer than the text; every header name is
// non-empty, one line, without a NUL, and appears between its delimiters in
// the text or in the text without comments; every directory of a search list is non-empty and
// one line, and a list only parses when it ends.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "client/cxx/includes.hpp"
#include "client/cxx/search_list.hpp"
#include "tests/fuzz/fuzz_check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace pt2cache::client::cxx;
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    const auto clean = without_comments(text);
    FUZZ_CHECK(clean.size() <= text.size());
    for (const auto& include : include_names(text)) {
        FUZZ_CHECK(!include.name.empty());
        FUZZ_CHECK(include.name.find('\n') == std::string::npos);
        FUZZ_CHECK(include.name.find('\0') == std::string::npos);
        const std::string quoted =
            include.quoted ? "\"" + include.name + "\"" : "<" + include.name + ">";
        FUZZ_CHECK(text.find(quoted) != std::string_view::npos ||
                   clean.find(quoted) != std::string::npos);
        const auto says = [&](std::string_view word) {
            return text.find(word) != std::string_view::npos ||
                   clean.find(word) != std::string::npos;
        };
        FUZZ_CHECK(include.asks || says("include") || says("import"));
    }
    if (const auto list = parse_search_list(text)) {
        FUZZ_CHECK(text.find("End of search list.") != std::string_view::npos);
        for (const auto* dirs : {&list->quoted, &list->bracket, &list->absent}) {
            for (const auto& dir : *dirs) {
                FUZZ_CHECK(!dir.empty());
                FUZZ_CHECK(dir.find('\n') == std::string::npos);
            }
        }
    }
    return 0;
}
