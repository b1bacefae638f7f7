// SPDX-License-Identifier: MIT
// Directory pins' text search (client/cxx/pins.hpp).
#include <string>
#include <vector>

#include "client/cxx/pins.hpp"

#include <catch2/catch.hpp>

using namespace pt2cache::client::cxx;

namespace {

bool names_tmp(std::string_view text, Occurrences which) {
    const std::vector<PathRewriter::Rule> rules{{"/tmp", "@PT2_TMPDIR@"}};
    std::vector<bool> named(rules.size(), false);
    mark_named(text, rules, named, which);
    return named[0];
}

} // namespace

TEST_CASE("a quoted directory alone does not name it in a header's text", "[cxx][pins]") {
    const auto header = Occurrences::but_quoted_alone;
    CHECK_FALSE(names_tmp("# define P_tmpdir\t\"/tmp\"\n/* finally \"/tmp\". */", header));
    CHECK_FALSE(names_tmp("#define _PATH_TMP \"/tmp/\"\n", header));
    CHECK(names_tmp("#include \"/tmp/x/v.h\"\n", header));
    CHECK(names_tmp("#define D /tmp\n", header));
    CHECK(names_tmp("\"/tmp\" and then /tmp/x", header)); // one alone, one not
    // An output keeps every occurrence: there "/tmp" is the directory.
    CHECK(names_tmp(std::string("\0\"/tmp\"", 7), Occurrences::all));
    // UTF-16: the same rule, in code units.
    const std::string wide = std::string("\"\0/\0t\0m\0p\0\"\0", 12);
    CHECK_FALSE(names_tmp(wide, header));
    CHECK(names_tmp(wide, Occurrences::all));
}
