// SPDX-License-Identifier: MIT
#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "client/cxx/args.hpp"
#include "client/cxx/includes.hpp"
#include "client/cxx/search_list.hpp"

#include <catch2/catch.hpp>

using namespace pt2cache::client::cxx;

TEST_CASE("include_names finds every literal header name", "[cxx][includes]") {
    const auto names =
        include_names("#include <vector>\n"
                      "  #  include   \"a/b.h\" // trailing\n"
                      "#include_next <stdlib.h>\n"
                      "#import \"m.h\"\n"
                      "#if __has_include(<opt.h>) && __has_include_next ( \"n.h\" )\n"
                      "#include MACRO\n"
                      "#include <>\n"
                      "#include \"unterminated\n"
                      "int include = 0; // not a directive\n"
                      "#define X \"#include <no.h>\"\n");
    const std::vector<IncludeName> expected = {
        {"vector", false, false, false},  {"a/b.h", true, false, false},
        {"stdlib.h", false, true, false}, {"m.h", true, false, false},
        {"opt.h", false, false, true},    {"n.h", true, true, true},
    };
    CHECK(names == expected);
    CHECK(include_names("").empty());
    CHECK(include_names("#include").empty());
    CHECK(include_names(std::string("#include \"a\0b\"\n", 15)).empty());
}

TEST_CASE("include_names sees through comments, line splices and digraphs", "[cxx][includes]") {
    const auto names = include_names("#include /**/ \"a.h\"\n"
                                     "#/* x */include \"b.h\"\n"
                                     "%:include \"c.h\"\n"
                                     "#include \\\n\"d.h\"\n"
                                     "# \\\ninclude \"e.h\"\n"
                                     "#include \"f\\\n.h\"\n"
                                     "const char* s = \"/*\"; \n#include <g.h>\n"
                                     "int n = 1'000; char c = '\"';\n#include <h.h>\n");
    std::vector<std::string> seen;
    for (const auto& name : names) {
        seen.push_back(name.name);
    }
    for (const auto* want : {"a.h", "b.h", "c.h", "d.h", "e.h", "f.h", "g.h", "h.h"}) {
        INFO(want);
        CHECK(std::find(seen.begin(), seen.end(), want) != seen.end());
    }
    CHECK(without_comments("a/* x\ny */b // c\nd") == "a b  \nd");
    CHECK(without_comments("\"// not\" x") == "\"// not\" x");
}

TEST_CASE("__has_include through macros", "[cxx][includes]") {
    const std::string fmt = "#ifdef __has_include\n"
                            "#  define MY_HAS_INCLUDE(x) __has_include(x)\n"
                            "#endif\n"
                            "#define OUTER(y) MY_HAS_INCLUDE(y) && 1\n"
                            "#define OPT <opt.h>\n"
                            "#if MY_HAS_INCLUDE(<a.h>) || OUTER(\"b.h\") || __has_include(OPT)\n"
                            "#endif\n"
                            "#define NOT_MY_HAS_INCLUDE(x) 0\n";
    const auto clean = without_comments(fmt);
    const std::array<std::string_view, 1> texts{clean};
    const auto macros = include_macros(texts);
    CHECK(macros.wrappers == std::vector<std::string>{"MY_HAS_INCLUDE", "OUTER"});
    CHECK(macros.asked == std::vector<std::string>{"OPT"});
    CHECK(macros.included.empty());
    const auto names = include_names(fmt, clean, macros);
    const std::vector<IncludeName> expected = {
        {"opt.h", false, false, true}, {"a.h", false, false, true}, {"b.h", true, false, true}};
    CHECK(names == expected);
}

TEST_CASE("parse_search_list reads GCC's -v output", "[cxx][includes]") {
    const std::string gcc =
        "Using built-in specs.\n"
        "ignoring duplicate directory \"/usr/include/x86_64-linux-gnu/c++/12\"\n"
        "ignoring nonexistent directory \"nonex\"\n"
        "ignoring nonexistent directory \"/usr/local/include/x86_64-linux-gnu\"\n"
        "cc1plus: warning: /tmp/afile: not a directory\n"
        "#include \"...\" search starts here:\n"
        " q\n"
        "#include <...> search starts here:\n"
        " inc\n"
        " /usr/include/c++/12\n"
        " /System/Library/Frameworks (framework directory)\n"
        " /usr/include\n"
        "End of search list.\n"
        " /not/a/dir\n";
    const auto list = parse_search_list(gcc);
    REQUIRE(list);
    CHECK(list->quoted == std::vector<std::string>{"q"});
    CHECK(list->bracket == std::vector<std::string>{"inc", "/usr/include/c++/12",
                                                    "/System/Library/Frameworks", "/usr/include"});
    CHECK(list->absent == std::vector<std::string>{"/usr/include/x86_64-linux-gnu/c++/12", "nonex",
                                                   "/usr/local/include/x86_64-linux-gnu",
                                                   "/tmp/afile"});

    CHECK_FALSE(parse_search_list(""));
    CHECK_FALSE(parse_search_list("#include <...> search starts here:\n /usr/include\n"));
    CHECK_FALSE(parse_search_list("#include \"...\" search starts here:\nEnd of search list.\n"));
}

TEST_CASE("search_probe_args keeps the options and drops inputs and outputs", "[cxx][includes]") {
    const std::vector<std::string> args = {"-c",  "k.cpp",    "-Iinc",   "-isystem",
                                           "sys", "-include", "pch.h",   "-O2",
                                           "-o",  "k.o",      "-Werror", "-std=c++17"};
    const auto classified = classify(args);
    REQUIRE(classified.invocation);
    const auto probe = search_probe_args("/usr/bin/g++", args, *classified.invocation);
    const std::vector<std::string> expected = {
        "/usr/bin/g++", "-Iinc",      "-isystem", "sys", "-O2",       "-Werror", "-std=c++17", "-E",
        "-v",           "-Wno-error", "-x",       "c++", "/dev/null", "-o",      "/dev/null"};
    CHECK(probe == expected);

    const std::vector<std::string> shared = {"a.cpp",       "x.o",    "-shared",
                                             "-includeh.h", "-oa.so", "-lm"};
    const auto linked = classify(shared);
    REQUIRE(linked.invocation);
    CHECK(search_probe_args("g++", shared, *linked.invocation) ==
          std::vector<std::string>{"g++", "-shared", "-lm", "-E", "-v", "-Wno-error", "-x", "c++",
                                   "/dev/null", "-o", "/dev/null"});
}

TEST_CASE("header names in the macros given to #include", "[cxx][includes]") {
    const std::string config = "#define BOOST_CFG \"boost/cfg.h\"\n"
                               "#define CFG BOOST_CFG\n"
                               "#define NOT_AN_OPERAND \"-m64\"\n"
                               "#include CFG\n";
    const auto clean = without_comments(config);
    const std::array<std::string_view, 1> texts{clean};
    const auto macros = include_macros(texts);
    CHECK(macros.included == std::vector<std::string>{"CFG", "BOOST_CFG"});
    CHECK(macros.asked.empty());
    const std::vector<IncludeName> expected = {{"boost/cfg.h", true, false, false}};
    CHECK(include_names(config, clean, macros) == expected);
}
