// SPDX-License-Identifier: MIT
// Runs python3 as the reference: the tests hand a script and a JSON input to
// CPython and compare its output with what proto/ computes.
#pragma once

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

namespace pt2cache::tests {

// Runs `script` with python3; the script reads JSON from the file named by
// sys.argv[1] and prints one JSON document, which is returned parsed.
inline nlohmann::ordered_json run_python(const std::string& script,
                                         const nlohmann::ordered_json& input) {
    namespace fs = std::filesystem;
    std::string dir_template = (fs::temp_directory_path() / "pt2py-XXXXXX").string();
    if (::mkdtemp(dir_template.data()) == nullptr) {
        throw std::runtime_error("mkdtemp failed");
    }
    const fs::path dir = dir_template;
    std::ofstream(dir / "oracle.py") << script;
    // The input stays ASCII so that no locale can get in the way.
    std::ofstream(dir / "input.json") << input.dump(-1, ' ', true);
    const std::string command =
        "python3 '" + (dir / "oracle.py").string() + "' '" + (dir / "input.json").string() + "'";
    FILE* pipe = ::popen(command.c_str(), "r");
    if (pipe == nullptr) {
        fs::remove_all(dir);
        throw std::runtime_error("cannot run python3");
    }
    std::string output;
    std::array<char, 4096> buffer{};
    std::size_t got = 0;
    while ((got = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) {
        output.append(buffer.data(), got);
    }
    const int status = ::pclose(pipe);
    fs::remove_all(dir);
    if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        throw std::runtime_error("python3 failed (is python3 installed?): " + output);
    }
    return nlohmann::ordered_json::parse(output);
}

} // namespace pt2cache::tests
