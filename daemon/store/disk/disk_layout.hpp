// SPDX-License-Identifier: MIT
// Where the disk tier keeps an entry: root/v1/<ns>/<h[0:2]>/<h>, where h is
// the 32 hex digits of XXH3-128(ns '\0' key). File names come from the hash,
// never from key text. Temporary files are ".<h>.<pid>.<counter>.tmp" beside
// the final name.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "daemon/store/xxh3.hpp"

namespace pt2cache::daemon::store {

// The protocol's namespace grammar, [a-z0-9-]{1,32}: safe as a path component.
bool is_valid_namespace(std::string_view ns);

// XXH3-128 of ns '\0' key.
Hash128 entry_hash(std::string_view ns, std::string_view key);

// The hash an entry file name stands for: 32 lowercase hex digits, else none.
std::optional<Hash128> parse_entry_name(std::string_view name);

// ".<name>.<pid>.<counter>.tmp"
std::string temp_name(std::string_view name, long pid, std::uint64_t counter);

// True for names that look like `temp_name`; `pid` receives the writer's pid
// (0 when it cannot be read).
bool is_temp_name(std::string_view name, long& pid, std::uint64_t* counter = nullptr);

class DiskLayout {
public:
    explicit DiskLayout(const std::filesystem::path& root);

    const std::string& root() const { return m_root; }
    // root/v1
    const std::string& versioned() const { return m_versioned; }
    // root/v1/<ns>
    std::string ns_dir(std::string_view ns) const;
    // root/v1/<ns>/<hex[0:2]>
    std::string shard_dir(std::string_view ns, std::string_view hex) const;
    // root/v1/<ns>/<hex[0:2]>/<hex>
    std::string entry_path(std::string_view ns, std::string_view hex) const;

private:
    std::string m_root;
    std::string m_versioned;
};

} // namespace pt2cache::daemon::store
