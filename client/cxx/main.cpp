// SPDX-License-Identifier: MIT
//
// pt2cache-cxx: a C++ compiler launcher that caches builds in pt2cached
// (docs/cxx.md). Use as CXX=pt2cache-cxx, or through a symlink named g++,
// c++ or clang++ in a directory put first on PATH.
#include <string>
#include <unistd.h>
#include <vector>

#include "client/cxx/args.hpp"
#include "client/cxx/compiler.hpp"
#include "client/cxx/launcher.hpp"
#include "client/cxx/process.hpp"

#include <fmt/format.h>

int main(int argc, char** argv) {
    using namespace pt2cache::client::cxx;
    const std::string argv0 = argc > 0 ? argv[0] : "pt2cache-cxx";
    auto compiler = find_real_compiler(argv0);
    if (!compiler) {
        write_all(STDERR_FILENO, fmt::format("pt2cache-cxx: {}\n", compiler.error()));
        return 127;
    }
    std::vector<std::string> args(argv + (argc > 0 ? 1 : 0), argv + argc);
    auto classification = classify(args);
    auto options = LauncherOptions::from_environment();
    if (!classification.invocation) {
        // Not cacheable: the real compiler, with the same arguments.
        // On stderr, a query's output stays the compiler's own.
        if (options.log_fd != STDERR_FILENO || !prints_for_tools(args)) {
            options.log(fmt::format("not cached: {}", classification.why.reason));
        }
        args.insert(args.begin(), compiler->path);
        exec_program(compiler->path, args);
        write_all(STDERR_FILENO, fmt::format("pt2cache-cxx: cannot run {}\n", compiler->path));
        return 127;
    }
    Launcher launcher(std::move(*compiler), std::move(args), std::move(*classification.invocation),
                      std::move(options));
    launcher.run();
}
