// SPDX-License-Identifier: MIT
// The bundle record (docs/protocol.md, "Bundles"): Inductor's JSON object
// `{"<basename>": best_config, ...}` of AutotuneCacheBundler, as stored in
// namespace `autotune-bundle`. Pure functions over text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <tl/expected.hpp>

namespace pt2cache::proto::autotune {

// One restorable entry of a bundle.
struct BundleEntry {
    std::string basename;    // "<64 hex>.best_config"
    std::string best_config; // json.dumps of the entry's object
    // Its time_taken_ms when that is a non-negative integer, else 0.
    std::uint64_t time_taken_ms = 0;

    bool operator==(const BundleEntry&) const = default;
};

struct DecodedBundle {
    // The entries whose basename is a local best-config key and whose value
    // is a JSON object, in the bundle's order (a basename given twice keeps
    // its first place and its last value, as Python's json.loads does).
    std::vector<BundleEntry> entries;
    // Members skipped: another kind of key, or a value that is not an object.
    std::size_t skipped = 0;
};

// Reads a bundle record. Text that is not a JSON object fails with a reason.
tl::expected<DecodedBundle, std::string> decode_bundle(std::string_view text);

// `json.dumps({basename: best_config, ...})` for entries whose best_config is
// already json.dumps text of an object: the texts are joined, not re-encoded.
std::string encode_bundle(std::span<const std::pair<std::string, std::string>> entries);

} // namespace pt2cache::proto::autotune
