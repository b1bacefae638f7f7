// SPDX-License-Identifier: MIT
// Files handed to the linker (client/cxx/link_inputs.hpp).
#include <string>
#include <vector>

#include "client/cxx/link_inputs.hpp"

#include <catch2/catch.hpp>

using namespace pt2cache::client::cxx;

using Files = std::vector<std::string>;

TEST_CASE("a link file's kind comes from its first bytes", "[cxx][link]") {
    CHECK(link_file_kind("\x7f"
                         "ELF\x02\x01\x01") == LinkFileKind::elf);
    CHECK(link_file_kind("!<arch>\nmember/") == LinkFileKind::archive);
    CHECK(link_file_kind("!<thin>\nmember/") == LinkFileKind::thin_archive);
    CHECK(link_file_kind("/* GNU ld script") == LinkFileKind::script);
    CHECK(link_file_kind("INPUT(x.o)") == LinkFileKind::script);
    CHECK(link_file_kind("") == LinkFileKind::script);
}

TEST_CASE("glibc's libc.so and libm.so scripts name their files", "[cxx][link]") {
    const auto libc = linker_script_inputs(
        "/* GNU ld script\n   Use the shared library, but some functions are only in\n"
        "   the static library, so try that secondarily.  */\n"
        "OUTPUT_FORMAT(elf64-x86-64)\n"
        "GROUP ( /lib/x86_64-linux-gnu/libc.so.6 /usr/lib/x86_64-linux-gnu/libc_nonshared.a  "
        "AS_NEEDED ( /lib64/ld-linux-x86-64.so.2 ) )\n");
    REQUIRE(libc);
    CHECK(*libc == Files{"/lib/x86_64-linux-gnu/libc.so.6",
                         "/usr/lib/x86_64-linux-gnu/libc_nonshared.a",
                         "/lib64/ld-linux-x86-64.so.2"});
    const auto libm = linker_script_inputs(
        "/* GNU ld script\n*/\nOUTPUT_FORMAT(elf64-x86-64)\nGROUP ( /lib/x86_64-linux-gnu/libm.so.6"
        "  AS_NEEDED ( /lib/x86_64-linux-gnu/libmvec.so.1 ) )\n");
    REQUIRE(libm);
    CHECK(*libm == Files{"/lib/x86_64-linux-gnu/libm.so.6", "/lib/x86_64-linux-gnu/libmvec.so.1"});
    CHECK(linker_script_inputs("INPUT(/a/x.o,/a/y.o)") == Files{"/a/x.o", "/a/y.o"});
}

TEST_CASE("relative names and libraries are kept as written", "[cxx][link]") {
    // GCC's libgcc_s.so.
    CHECK(linker_script_inputs("/* GNU ld script\n   Use the shared library, but some functions "
                               "are only in\n   the static library.  */\n"
                               "GROUP ( libgcc_s.so.1 -lgcc )\n") ==
          Files{"libgcc_s.so.1", "-lgcc"});
    CHECK(linker_script_inputs("INPUT(impl.o, ../x/y.a)") == Files{"impl.o", "../x/y.a"});
}

TEST_CASE("a script naming files the key cannot follow is refused", "[cxx][link]") {
    CHECK_FALSE(linker_script_inputs("SEARCH_DIR(/x) INPUT(/a.o)"));
    CHECK_FALSE(linker_script_inputs("INCLUDE /x/more.ld"));
    CHECK_FALSE(linker_script_inputs("INPUT(\"/a b.o\")"));                  // quoted: not followed
    CHECK_FALSE(linker_script_inputs("INPUT(/a.o"));                         // unbalanced
    CHECK_FALSE(linker_script_inputs("/* never ends INPUT(/a.o)"));          // comment unterminated
    CHECK_FALSE(linker_script_inputs("INPUT(AS_NEEDED(/a.o) GROUP(/b.o))")); // GROUP nested
    CHECK_FALSE(linker_script_inputs("OUTPUT_FORMAT((x)) INPUT(/a.o)"));
    CHECK_FALSE(linker_script_inputs("SECTIONS { .text : { *(.text) } }"));
    CHECK(linker_script_inputs("/* only a comment */") == Files{});
}
