// SPDX-License-Identifier: MIT
#include <string>
#include <vector>

#include "client/cxx/args.hpp"

#include <catch2/catch.hpp>

using namespace pt2cache::client::cxx;

namespace {

Classification of(std::vector<std::string> args) {
    return classify(args);
}

} // namespace

TEST_CASE("Inductor's three kinds of command lines are cacheable", "[cxx][args]") {
    const auto shared = of({"/tmp/t/ab/cabc.cpp",
                            "-D",
                            "TORCH_INDUCTOR_CPP_WRAPPER",
                            "-I/usr/x",
                            "-shared",
                            "-fPIC",
                            "-O3",
                            "-DNDEBUG",
                            "-fno-finite-math-only",
                            "-march=native",
                            "-fopenmp",
                            "-Wall",
                            "-std=c++17",
                            "-include",
                            "/tmp/t/pch/h.h",
                            "-L/usr/lib",
                            "-lgomp",
                            "-lc10",
                            "-Wl,-rpath,/x",
                            "-o",
                            "/tmp/t/ab/cabc.so"});
    REQUIRE(shared.invocation);
    CHECK(shared.invocation->kind == Kind::shared_object);
    CHECK(shared.invocation->source_path == "/tmp/t/ab/cabc.cpp");
    CHECK(shared.invocation->output_path == "/tmp/t/ab/cabc.so");
    CHECK(shared.invocation->uses_native);
    CHECK(shared.invocation->includes == std::vector<std::string>{"/tmp/t/pch/h.h"});
    CHECK(shared.invocation->libraries == std::vector<std::string>{"gomp", "c10"});
    CHECK(shared.invocation->library_dirs == std::vector<std::string>{"/usr/lib"});
    CHECK_FALSE(shared.invocation->debug_info);

    const auto object = of({"-c", "k.cpp", "-O2", "-o", "k.o"});
    REQUIRE(object.invocation);
    CHECK(object.invocation->kind == Kind::object);
    CHECK(object.invocation->output == 4);

    const auto pch = of({"-x", "c++-header", "/tmp/p/h.h", "-O3", "-o", "/tmp/p/h.h.gch"});
    REQUIRE(pch.invocation);
    CHECK(pch.invocation->kind == Kind::precompiled_header);
    CHECK(of({"h.hpp", "-ok.gch"}).invocation->kind == Kind::precompiled_header);
}

TEST_CASE("everything else runs the real compiler unchanged", "[cxx][args]") {
    const std::vector<std::vector<std::string>> uncacheable = {
        {"--version"},
        {"-v"},
        {"-dumpversion"},
        {"-E", "a.cpp", "-o", "a.i"},
        {"-c", "a.cpp", "b.cpp", "-o", "x.o"},             // several sources
        {"-c", "-", "-o", "a.o"},                          // stdin
        {"-c", "a.cpp", "-Ia", "-I-", "-Ib", "-o", "a.o"}, // a split search
        {"-c", "a.cpp", "-iprefix", "/p/", "-iwithprefixbefore", "d", "-o", "a.o"},
        {"-c", "a.cpp", "-I=/file", "-o", "a.o"}, // in the sysroot
        {"-c", "a.cpp", "-isystem", "=/file", "-o", "a.o"},
        {"-x", "c++", "-c", "-", "-o", "a.o"},        // stdin
        {"-c", "a.cpp"},                              // no -o
        {"-c", "a.cpp", "-o", "-"},                   // stdout
        {"-c", "a.cpp", "-o", "a.o", "--frobnicate"}, // unknown option
        {"-c", "a.cpp", "-o", "a.o", "-MD"},
        {"-c", "a.cpp", "-o", "a.o", "-MF", "x.d"},
        {"a.cpp", "-o", "a"},                  // an executable
        {"-c", "a.cpp", "-o", "a.o", "@opts"}, // response file
        {"-S", "a.cpp", "-o", "a.s"},
        {"-c", "a.cpp", "-o", "a.o", "-fprofile-generate"},
        {"-c", "a.cpp", "-o", "a.o", "-save-temps"},
        {"-c", "a.cpp", "-o", "a.o", "-B/opt/x"},
        {"-c", "a.cpp", "-o", "a.o", "-Wp,-MD,x.d"},
        {"a.cpp", "-shared", "-o", "a.so", "-Wl,-Map,out.map"},
        {"a.cpp", "-shared", "-o", "a.so", "-Xlinker", "--version-script=v"},
        {"-x", "c", "-c", "a.c", "-o", "a.o"}, // another language
        {"-c", "a.f90", "-o", "a.o"},          // unknown input
        {"-c", "a.cpp", "-o", "a.o", "-o", "b.o"},
        {"-c", "a.cpp", "-o", "a.o", "-I@PT2_TMPDIR@"},
        {"-c", "a.cpp", "-o", "a.cpp"},
        {"-c", "a.cpp", "x.o", "-o", "a.o"}, // link input without linking
        {"-c", "a.cpp", "-o", "a.o", "-print-file-name=libc.so"},
        {"-c", "a.cpp", "-o", "a.o", "-###"},
        {"-c", "a.cpp", "-o", ""},
        // Linker inputs and library searches the key does not follow.
        {"a.cpp", "-shared", "-o", "a.so", "-Wl,-L/x", "-lfoo"},
        {"a.cpp", "-shared", "-o", "a.so", "-Wl,-lfoo"},
        {"a.cpp", "-shared", "-o", "a.so", "-Wl,/x/libfoo.so"},
        {"a.cpp", "-shared", "-o", "a.so", "-Xlinker", "/x/libfoo.so"},
        {"a.cpp", "-shared", "-o", "a.so", "-Wl,-Bstatic", "-lfoo"},
        {"a.cpp", "-shared", "-o", "a.so", "-Wl,--just-symbols=x.o"},
        {"a.cpp", "-shared", "-o", "a.so", "-Wl,-rpath,/x,y.o"},
        {"a.cpp", "-shared", "-o", "a.so", "-L=/x", "-lfoo"},
        {"a.cpp", "-shared", "-o", "a.so", "--sysroot=/s"},
        {"a.cpp", "-shared", "-o", "a.so", "--sysroot", "/s"},
        {"a.cpp", "-shared", "-o", "a.so", "-static-libstdc++"},
        {"a.cpp", "-shared", "-o", "a.so", "-fuse-ld=gold"},
        {"a.cpp", "-shared", "-o", "a.so", "-m32"},
    };
    for (const auto& args : uncacheable) {
        INFO(args.back());
        const auto c = of(args);
        CHECK_FALSE(c.invocation);
        CHECK_FALSE(c.why.reason.empty());
    }
}

TEST_CASE("linker options that name no input are cacheable", "[cxx][args]") {
    for (const auto& extra :
         std::vector<std::vector<std::string>>{{"-Wl,-rpath,/x"},
                                               {"-Wl,-rpath", "-Wl,/x"},
                                               {"-Xlinker", "-rpath", "-Xlinker", "/x"},
                                               {"-Wl,-soname,libk.so,-z,now"},
                                               {"-Wl,--as-needed,-O1"},
                                               {"-Wl,-Bsymbolic"}}) {
        std::vector<std::string> args = {"a.cpp", "-shared", "-o", "a.so"};
        args.insert(args.end(), extra.begin(), extra.end());
        INFO(extra.back());
        CHECK(of(args).invocation);
    }
    // A sysroot only moves the headers of a compile, which it records.
    CHECK(of({"-c", "a.cpp", "--sysroot=/s", "-o", "a.o"}).invocation);
}

TEST_CASE("only path arguments are rewritten", "[cxx][args]") {
    const auto c =
        of({"/s/k.cpp", "-DP=\"/s/x\"", "-I/s/i", "-isystem", "/s/j", "-include", "/s/h.h",
            "-L/s/l", "-lfoo", "-Wl,-rpath,/s/l", "x.o", "-shared", "-o", "/s/k.so"});
    REQUIRE(c.invocation);
    CHECK(c.invocation->path_args == std::vector<std::size_t>{0, 2, 4, 6, 7, 10, 13});
}

TEST_CASE("-g keeps paths; object inputs join a shared link", "[cxx][args]") {
    const auto debug = of({"-c", "a.cpp", "-g", "-o", "a.o"});
    REQUIRE(debug.invocation);
    CHECK(debug.invocation->debug_info);
    CHECK_FALSE(of({"-c", "a.cpp", "-g0", "-o", "a.o"}).invocation->debug_info);
    const auto link = of({"a.cpp", "x.o", "libz.a", "libq.so.1.2", "-shared", "-o", "a.so"});
    REQUIRE(link.invocation);
    CHECK(link.invocation->link_inputs == std::vector<std::string>{"x.o", "libz.a", "libq.so.1.2"});
}

TEST_CASE("path rewriting replaces machine directories at path boundaries", "[cxx][args]") {
    const auto c = of({"/tmp/run1/ab/k.cpp", "-shared", "-I/tmp/run1/ab/inc", "-I/home/u/cache/x",
                       "-o", "/tmp/run1/out/k.so"});
    REQUIRE(c.invocation);
    const auto rewriter = make_rewriter(*c.invocation, "/work", "/home/u/cache", "/tmp/run1");
    CHECK(rewriter.rewrite("/tmp/run1/ab/k.cpp") == "@PT2_SRCDIR@/k.cpp");
    CHECK(rewriter.rewrite("-I/tmp/run1/ab/inc") == "-I@PT2_SRCDIR@/inc");
    CHECK(rewriter.rewrite("/tmp/run1/out/k.so") == "@PT2_OUTDIR@/k.so");
    CHECK(rewriter.rewrite("-I/home/u/cache/x") == "-I@PT2_CACHEDIR@/x");
    CHECK(rewriter.rewrite("/tmp/run1/other") == "@PT2_TMPDIR@/other");
    CHECK(rewriter.rewrite("/tmp/run1") == "@PT2_TMPDIR@");
    // Not at a path boundary: unchanged.
    CHECK(rewriter.rewrite("/tmp/run10/x") == "/tmp/run10/x");
    CHECK(rewriter.rewrite("/usr/include/stdio.h") == "/usr/include/stdio.h");
    for (const auto* path : {"/tmp/run1/ab/k.cpp", "-I/home/u/cache/x", "/tmp/run1/out/k.so"}) {
        CHECK(rewriter.expand(rewriter.rewrite(path)) == path);
    }

    // Another machine's directories give the same rewritten text.
    const auto c2 = of({"/scratch/t9/ab/k.cpp", "-shared", "-I/scratch/t9/ab/inc",
                        "-I/data/cache/x", "-o", "/scratch/t9/out/k.so"});
    const auto rewriter2 = make_rewriter(*c2.invocation, "/", "/data/cache", "/scratch/t9");
    CHECK(rewriter2.rewrite("-I/scratch/t9/ab/inc") == rewriter.rewrite("-I/tmp/run1/ab/inc"));
    CHECK(rewriter2.rewrite("/scratch/t9/out/k.so") == rewriter.rewrite("/tmp/run1/out/k.so"));

    // Relative paths resolve against the working directory.
    const auto rel = of({"-c", "src/k.cpp", "-o", "k.o"});
    const auto rewriter3 = make_rewriter(*rel.invocation, "/w/proj", "", "/tmp");
    CHECK(rewriter3.rewrite("/w/proj/src/k.h") == "@PT2_SRCDIR@/k.h");
    CHECK(rewriter3.rewrite("/w/proj/k.o") == "@PT2_OUTDIR@/k.o");
}

TEST_CASE("absolute_path keeps .. segments", "[cxx][args]") {
    // "b" may be a symbolic link: "b/.." is not necessarily "a".
    CHECK(absolute_path("a/./b/../c.h", "/w") == "/w/a/b/../c.h");
    CHECK(absolute_path("/x//y/", "/w") == "/x/y");
    CHECK(absolute_path("../h.h", "/w") == "/w/../h.h");
    CHECK(absolute_path(".", "/") == "/");
}

TEST_CASE("make dependency files are parsed like make does", "[cxx][args]") {
    const auto deps = parse_make_deps("k.o: k.cpp /usr/include/stdc-predef.h \\\n"
                                      " /a\\ b/h.h /c/$$d.h \\\n  last.h\n");
    CHECK(deps == std::vector<std::string>{"k.cpp", "/usr/include/stdc-predef.h", "/a b/h.h",
                                           "/c/$d.h", "last.h"});
    CHECK(parse_make_deps("x.o y.o: a.h\nb.h:\n") == std::vector<std::string>{"a.h"});
    CHECK(parse_make_deps("").empty());
}

TEST_CASE("include directories and -imacros files are collected", "[cxx][args]") {
    const auto c = of({"-c", "a.cpp", "-Ia", "-I", "b", "-isystemc", "-iquote", "d", "-idirafter/e",
                       "-imacros", "m.h", "-o", "a.o"});
    REQUIRE(c.invocation);
    CHECK(c.invocation->include_dirs == std::vector<std::string>{"a", "b", "c", "d", "/e"});
    CHECK(c.invocation->macro_files == std::vector<std::string>{"m.h"});
}

TEST_CASE("how rewritten directories nest is part of the key", "[cxx][args]") {
    const PathRewriter flat({{"/a/src", "@PT2_SRCDIR@"}, {"/b/out", "@PT2_OUTDIR@"}});
    CHECK(flat.nesting().empty());
    const PathRewriter nested({{"/a/src", "@PT2_SRCDIR@"},
                               {"/a/src/build", "@PT2_OUTDIR@"},
                               {"/tmp/torchinductor_alice", "@PT2_CACHEDIR@"},
                               {"/tmp", "@PT2_TMPDIR@"}});
    CHECK(nested.nesting() == "@PT2_CACHEDIR@ in @PT2_TMPDIR@\n"
                              "@PT2_OUTDIR@ = @PT2_SRCDIR@/build\n");
}
