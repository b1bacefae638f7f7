// SPDX-License-Identifier: MIT
// Signed remote entries (opt-in, remote.signing_key_file; the format and the
// threat model are in docs/remote.md, "Signed entries"): each value written to
// Redis gets an HMAC-SHA256 over a domain-separated encoding of its Redis key
// and value, stored beside it under `pt2sig:{<key>}`; the value itself stays
// byte-identical. The first key of the file signs; every key verifies
// (rotation). Pure functions over bytes: no I/O but `load`.
#pragma once

#include <array>
#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <tl/expected.hpp>

namespace pt2cache::daemon::store {

// The companion key of an entry: "pt2sig:{" + redis_key + "}".
std::string signature_key(std::string_view redis_key);

// Whether the companion hashes to the entry's Redis Cluster slot: true when
// the entry key has no '}' (the companion's hash tag is then the whole entry
// key, and the entry key has no tag of its own). Otherwise a cluster client
// must fetch the two keys separately.
bool signature_shares_slot(std::string_view redis_key);

class EntrySigner {
public:
    static constexpr std::size_t k_min_key_bytes = 32;
    static constexpr std::size_t k_max_key_bytes = 128;
    static constexpr std::size_t k_max_keys = 16;
    // "v1:" + 8 hex digits of key id + ":" + 64 hex digits of HMAC.
    static constexpr std::size_t k_signature_size = 76;

    // Reads the key file. It must be a regular file owned by this process's
    // effective user, with no permission bits for group or others (0600 or
    // 0400); otherwise, or when a line is not a key, the error says why.
    static tl::expected<EntrySigner, std::string> load(const std::filesystem::path& file);
    // The keys of a file's text; `origin` names it in errors.
    static tl::expected<EntrySigner, std::string> parse(std::string_view text,
                                                        std::string_view origin);

    // The companion's value for `value` stored under `redis_key`, signed with
    // the first key.
    std::string sign(std::string_view redis_key, std::string_view value) const;
    // Whether `signature` is a well-formed signature of (redis_key, value) by
    // one of the keys. Constant-time in the MAC comparison.
    bool verify(std::string_view redis_key, std::string_view value,
                std::string_view signature) const;

    std::size_t key_count() const { return m_keys.size(); }
    // The signing key's id (8 hex digits), for logs.
    const std::string& signing_key_id() const { return m_keys.front().id; }

private:
    struct Key {
        std::string id; // 8 lowercase hex digits
        std::vector<unsigned char> secret;
    };
    using Mac = std::array<unsigned char, 32>;

    explicit EntrySigner(std::vector<Key> keys)
        : m_keys(std::move(keys)) {}
    static Mac mac(const Key& key, std::string_view redis_key, std::string_view value);

    std::vector<Key> m_keys;
};

} // namespace pt2cache::daemon::store
