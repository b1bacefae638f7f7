// SPDX-License-Identifier: MIT
//
// `pt2cache export` and `pt2cache import` (docs/operations.md, "Export and
// import"; the archive format: docs/archive.md).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "client/cli/commands.hpp"

namespace CLI {
class App;
} // namespace CLI

namespace pt2cache::client::cli {

struct ArchiveArgs {
    // export
    std::vector<std::string> namespaces; // --ns; empty: all
    std::string since;                   // --since DURATION; empty: all
    std::string output = "-";            // -o; "-": stdout
    int level = 3;                       // --level: zstd level
    // import
    std::string input;      // FILE; "-": stdin
    bool overwrite = false; // --overwrite
};

struct ArchiveCommands {
    CLI::App* export_command = nullptr;
    CLI::App* import_command = nullptr;
    ArchiveArgs args;

    // The exit status when one of the two was given.
    std::optional<int> run(const Globals& globals) const;
};

// Adds `export` and `import` to `app`; `commands` must outlive parsing.
void add_archive_commands(CLI::App& app, ArchiveCommands& commands);

// "90s", "30m", "12h", "7d", "2w" or a number of seconds, in milliseconds.
std::optional<std::uint64_t> parse_duration_ms(std::string_view text);

int run_export(const Globals& globals, const ArchiveArgs& args);
int run_import(const Globals& globals, const ArchiveArgs& args);

} // namespace pt2cache::client::cli
