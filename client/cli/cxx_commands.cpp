// SPDX-License-Identifier: MIT
//
// `pt2cache cxx --explain -- ARGS…`: what pt2cache-cxx would key a compile on.
#include <cstdio>

#include "client/cli/commands.hpp"
#include "client/cxx/args.hpp"
#include "client/cxx/compiler.hpp"
#include "client/cxx/launcher.hpp"

#include <fmt/format.h>

namespace pt2cache::client::cli {

int run_cxx_explain(const Globals& globals, const std::vector<std::string>& args) {
    if (args.empty()) {
        fmt::print(stderr, "pt2cache: cxx --explain needs a compiler command line after --\n");
        return exit_status::usage;
    }
    // ARGS may start with the compiler's name (as in a logged command line).
    std::vector<std::string> rest = args;
    std::string argv0 = "pt2cache-cxx";
    if (!rest.front().starts_with('-') &&
        (rest.front().ends_with("g++") || rest.front().ends_with("c++") ||
         rest.front().ends_with("clang++") || rest.front().ends_with("pt2cache-cxx"))) {
        argv0 = rest.front();
        rest.erase(rest.begin());
    }
    auto compiler = cxx::find_real_compiler(argv0);
    if (!compiler) {
        fmt::print(stderr, "pt2cache: {}\n", compiler.error());
        return exit_status::usage;
    }
    auto classification = cxx::classify(rest);
    if (!classification.invocation) {
        fmt::print("not cacheable: {} (pt2cache-cxx runs {} unchanged)\n",
                   classification.why.reason, compiler->path);
        return exit_status::ok;
    }
    auto options = cxx::LauncherOptions::from_environment();
    if (!globals.socket.empty()) {
        options.socket_path = globals.socket;
    }
    if (globals.timeout_ms) {
        options.io_timeout = std::chrono::milliseconds(*globals.timeout_ms);
    }
    cxx::Launcher launcher(std::move(*compiler), std::move(rest),
                           std::move(*classification.invocation), options);
    fmt::print("{}", launcher.explain());
    return exit_status::ok;
}

} // namespace pt2cache::client::cli
