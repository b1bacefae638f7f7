// SPDX-License-Identifier: MIT
#include "daemon/store/disk/disk_layout.hpp"

#include <charconv>
#include <span>
#include <string>

#include <fmt/format.h>

namespace pt2cache::daemon::store {

namespace {

constexpr std::size_t k_max_namespace_size = 32;
constexpr std::size_t k_hash_hex_size = 32;
constexpr std::string_view k_temp_suffix = ".tmp";

int hex_value(char c) {
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    return -1;
}

} // namespace

bool is_valid_namespace(std::string_view ns) {
    if (ns.empty() || ns.size() > k_max_namespace_size) {
        return false;
    }
    for (const char c : ns) {
        const bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
        if (!ok) {
            return false;
        }
    }
    return true;
}

Hash128 entry_hash(std::string_view ns, std::string_view key) {
    // One shot over ns '\0' key, gathered in the thread's buffer: for keys
    // this short a streaming state costs more than the hashing.
    thread_local std::string text;
    text.assign(ns);
    text.push_back('\0');
    text.append(key);
    return Xxh3Hash128::of(std::as_bytes(std::span(text.data(), text.size())));
}

std::optional<Hash128> parse_entry_name(std::string_view name) {
    if (name.size() != k_hash_hex_size) {
        return std::nullopt;
    }
    Hash128 out;
    for (std::size_t i = 0; i < k_hash_hex_size; ++i) {
        const int digit = hex_value(name[i]);
        if (digit < 0) {
            return std::nullopt;
        }
        std::uint64_t& half = i < 16 ? out.high : out.low;
        half = (half << 4U) | static_cast<std::uint64_t>(digit);
    }
    return out;
}

std::string temp_name(std::string_view name, long pid, std::uint64_t counter) {
    return fmt::format(".{}.{}.{}{}", name, pid, counter, k_temp_suffix);
}

bool is_temp_name(std::string_view name, long& pid, std::uint64_t* counter) {
    pid = 0;
    if (counter != nullptr) {
        *counter = 0;
    }
    if (name.size() < 1 + k_temp_suffix.size() || name.front() != '.' ||
        !name.ends_with(k_temp_suffix)) {
        return false;
    }
    // ".<hex>.<pid>.<counter>.tmp": the pid follows the first '.' after the
    // hash.
    const std::string_view inner = name.substr(1, name.size() - 1 - k_temp_suffix.size());
    const auto first = inner.find('.');
    const auto second = first == std::string_view::npos ? first : inner.find('.', first + 1);
    if (second != std::string_view::npos) {
        const std::string_view digits = inner.substr(first + 1, second - first - 1);
        std::from_chars(digits.data(), digits.data() + digits.size(), pid);
        if (counter != nullptr) {
            const std::string_view rest = inner.substr(second + 1);
            std::from_chars(rest.data(), rest.data() + rest.size(), *counter);
        }
    }
    return true;
}

DiskLayout::DiskLayout(const std::filesystem::path& root)
    : m_root(root.string())
    , m_versioned((root / "v1").string()) {}

std::string DiskLayout::ns_dir(std::string_view ns) const {
    return fmt::format("{}/{}", m_versioned, ns);
}

std::string DiskLayout::shard_dir(std::string_view ns, std::string_view hex) const {
    return fmt::format("{}/{}/{}", m_versioned, ns, hex.substr(0, 2));
}

std::string DiskLayout::entry_path(std::string_view ns, std::string_view hex) const {
    return fmt::format("{}/{}/{}/{}", m_versioned, ns, hex.substr(0, 2), hex);
}

} // namespace pt2cache::daemon::store
