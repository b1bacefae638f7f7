// SPDX-License-Identifier: MIT
//
// pt2cache-cxx on a miss: the files a link reads beyond its inputs, found as
// the linker finds them (docs/cxx.md, "The key": library candidates).
#include <algorithm>
#include <sys/stat.h>

#include "client/cxx/launcher.hpp"
#include "client/cxx/link_inputs.hpp"
#include "client/cxx/mapped_file.hpp"
#include "proto/bytes.hpp"

#include <fmt/format.h>

namespace pt2cache::client::cxx {

namespace {

// A linker script larger than this is not read.
constexpr std::size_t k_max_link_script = 64 * 1024;

// The first regular file `dir/name` along `dirs` (each dir, each name in
// turn); every path tried is appended to `tried`.
std::optional<std::string> first_file(const std::vector<std::string>& dirs,
                                      const std::vector<std::string>& names,
                                      std::vector<std::string>& tried) {
    for (const auto& dir : dirs) {
        for (const auto& name : names) {
            auto path = dir + "/" + name;
            tried.push_back(path);
            struct stat st {};
            if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
                return path;
            }
        }
    }
    return std::nullopt;
}

} // namespace

std::vector<std::string> Launcher::library_dirs(const CompilerFacts& facts) const {
    // The linker searches the -L directories in order: the invocation's, then
    // the compiler's (LIBRARY_PATH's among them, where g++ puts them), then
    // its own built-in ones, which are not known here.
    std::vector<std::string> dirs;
    for (const auto& dir : m_invocation.library_dirs) {
        dirs.push_back(absolute_path(dir, m_cwd));
    }
    for (const auto& dir : facts.library_dirs) {
        dirs.push_back(absolute_path(dir, m_cwd));
    }
    return dirs;
}

std::optional<std::string> Launcher::find_library(std::string_view name,
                                                  const std::vector<std::string>& dirs,
                                                  std::vector<std::string>& tried) const {
    std::vector<std::string> names;
    if (name.starts_with(':')) {
        names.emplace_back(name.substr(1));
    } else {
        if (!m_invocation.static_link) {
            names.push_back(fmt::format("lib{}.so", name));
        }
        names.push_back(fmt::format("lib{}.a", name));
    }
    return first_file(dirs, names, tried);
}

bool Launcher::follow_link_file(const std::string& path, const std::vector<std::string>& dirs,
                                std::vector<std::string>& inputs, int depth) const {
    MappedFile file(path);
    if (!file.ok()) {
        return true; // left to its recorded status
    }
    const auto text = proto::as_text(file.bytes());
    switch (link_file_kind(text.substr(0, 8))) {
    case LinkFileKind::elf:
    case LinkFileKind::archive:
        return true;
    case LinkFileKind::thin_archive:
        log(fmt::format("not stored: {} is a thin archive (its members are not in it)", path));
        return false;
    case LinkFileKind::script:
        break;
    }
    // A linker script (glibc's libc.so, GCC's libgcc_s.so): ld reads the
    // files it names, found as ld finds them.
    auto items =
        text.size() <= k_max_link_script && depth < 2 ? linker_script_inputs(text) : std::nullopt;
    if (!items) {
        log(fmt::format("not stored: {} is a linker script that is not followed", path));
        return false;
    }
    for (const auto& item : *items) {
        std::optional<std::string> taken;
        if (item.starts_with("-l")) {
            taken = find_library(std::string_view(item).substr(2), dirs, inputs);
        } else if (item.starts_with('/')) {
            inputs.push_back(item);
            taken = item;
        } else {
            // As GNU ld (2.35 and later) looks: the script's own directory,
            // the working directory, then the library search.
            std::vector<std::string> places{path.substr(0, path.rfind('/')), m_cwd};
            places.insert(places.end(), dirs.begin(), dirs.end());
            taken = first_file(places, {item}, inputs);
        }
        if (!taken) {
            log(fmt::format("not stored: {} names {}, in none of the known directories", path,
                            item));
            return false;
        }
        if (!follow_link_file(*taken, dirs, inputs, depth + 1)) {
            return false;
        }
    }
    return true;
}

std::vector<std::string> Launcher::library_candidates(const std::vector<std::string>& dirs,
                                                      bool& cacheable) const {
    // The libraries as the driver passes them to the linker: the
    // invocation's, and those its specs add (stdc++, m, gcc_s, gcc, c; gomp
    // and pthread for -fopenmp, asan for -fsanitize=address, itm for
    // -fgnu-tm, ...).
    const auto linked = linked_libraries(m_compiler, m_args);
    if (!linked) {
        log("not stored: the libraries of the link could not be learnt (-###)");
        cacheable = false;
        return {};
    }
    std::vector<std::string> libraries;
    for (const auto& library : *linked) {
        if (std::find(libraries.begin(), libraries.end(), library) == libraries.end()) {
            libraries.push_back(library);
        }
    }
    // Every file the linker would try, in its order, up to the one it takes:
    // a library appearing earlier in the search later changes the link.
    std::vector<std::string> candidates;
    for (const auto& library : libraries) {
        const auto taken = find_library(library, dirs, candidates);
        if (!taken) {
            // Taken from a directory of the linker's own (or not at all):
            // what it read is not known here.
            log(fmt::format("not stored: library {} is in none of the known directories", library));
            cacheable = false;
        } else if (!follow_link_file(*taken, dirs, candidates)) {
            cacheable = false;
        }
    }
    return candidates;
}

} // namespace pt2cache::client::cxx
