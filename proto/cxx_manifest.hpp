// SPDX-License-Identifier: MIT
//
// pt2cache-cxx manifests (docs/cxx.md, "Stored values"): the inputs each
// recorded build read, the result key of a set of inputs, and the matching of
// a manifest against the inputs' current hashes. Shared by the launcher and
// the daemon's CXX_LOOKUP (docs/protocol.md, "Compile-cache lookup"), so that
// both derive the same key from the same inputs. Pure: no I/O.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "proto/hash_files.hpp"

namespace pt2cache::proto::cxx {

using Digest = FileDigest;

// XXH3-128 of `bytes`, canonical byte order.
Digest digest_of(std::span<const std::byte> bytes);

// Builds a key from named fields: XXH3-128 over "<name>\0<length:u64><bytes>"
// for each field in order.
class KeyHasher {
public:
    KeyHasher();
    ~KeyHasher();
    KeyHasher(const KeyHasher&) = delete;
    KeyHasher& operator=(const KeyHasher&) = delete;

    void field(std::string_view name, std::string_view value);
    void field(std::string_view name, std::span<const std::byte> value);
    // 32 lower-case hex digits.
    std::string hex_digest() const;

private:
    void* m_state;
};

// One file a build read, as recorded in a manifest: its path with machine
// directories rewritten to placeholders, and what HASH_FILES answered.
struct InputRecord {
    std::string path;
    FileStatus status = FileStatus::not_found;
    std::uint64_t size = 0;
    Digest hash{};

    friend bool operator==(const InputRecord&, const InputRecord&) = default;
};

using Variant = std::vector<InputRecord>;

struct Manifest {
    static constexpr std::size_t k_max_variants = 16;
    std::vector<Variant> variants; // most recent first

    std::vector<std::byte> encode() const;
    // nullopt: not a manifest, or a corrupt one (bad checksum or grammar).
    static std::optional<Manifest> decode(std::span<const std::byte> value);

    // Puts `variant` first (dropping an equal older one), keeping at most
    // k_max_variants.
    void add(Variant variant);
};

// "r-" + the XXH3-128 of `common_key` and the variant's inputs as recorded.
std::string result_key(std::string_view common_key, const Variant& variant);

// A placeholder and the directory it stands for (docs/cxx.md, "Path
// rewriting").
struct PlaceholderRule {
    std::string placeholder;
    std::string directory;
};

// `text` with every rule's placeholder replaced by its directory, rule by
// rule in order.
std::string expand_placeholders(std::string_view text, std::span<const PlaceholderRule> rules);
// The same, or nothing once the text would pass `limit` bytes: rules whose
// directories hold other placeholders grow a text geometrically, and the
// work stays linear in `limit` per rule.
std::optional<std::string> expand_placeholders_within(std::string_view text,
                                                      std::span<const PlaceholderRule> rules,
                                                      std::size_t limit);

// The mark every placeholder starts with: an expanded path that still holds
// it names a directory the invocation does not have.
inline constexpr std::string_view k_placeholder_mark = "@PT2_";

// A directory pin: an input record whose path is a bare placeholder
// ("@PT2_SRCDIR@") stands for the directory that placeholder expanded to when
// the build ran, not for a file. A build whose output or headers name a
// rewritten directory records one, so that its variant matches only where the
// placeholder expands to that same directory (docs/cxx.md, "Directory
// pins"). Its status is OK, its size the directory's length and its hash
// `pin_digest` of the directory.
Digest pin_digest(std::string_view directory);
InputRecord pin_record(const PlaceholderRule& rule);
// The current state of a recorded path that is a directory pin, under this
// invocation's `rules`: OK with the digest of the directory the placeholder
// expands to, or unreadable when no rule has that placeholder (it can never
// match). nullopt: `path` is not a pin (hash the file it names).
std::optional<FileHash> pin_state(std::string_view path, std::span<const PlaceholderRule> rules);

// The distinct recorded paths of a manifest's variants, in first-seen order,
// and where each variant's inputs are in that list.
struct ManifestPaths {
    std::vector<std::string_view> paths;         // views into the manifest
    std::vector<std::vector<std::size_t>> index; // [variant][input] -> path
};
ManifestPaths manifest_paths(const Manifest& manifest);

// Whether every input of variant `v` has its recorded status and, when OK,
// its recorded hash in `now` (one entry per ManifestPaths::paths).
bool variant_matches(const Manifest& manifest, const ManifestPaths& paths, std::size_t v,
                     std::span<const FileHash> now);

} // namespace pt2cache::proto::cxx
