// SPDX-License-Identifier: MIT
// Fuzz target: pt2cache-cxx manifests (proto/cxx_manifest.*, docs/cxx.md,
// "Stored values"), which the daemon's CXX_LOOKUP parses from any tier. The
// input is a manifest without its checksum; the target appends a correct
// one, so that the fuzzer explores the grammar rather than the checksum.
// Invariants: a manifest that decodes has at most 16 variants, re-encodes to
// the same bytes (reserved bytes zero), lists each distinct path once with an
// index for every input, matches its own recorded state, and fails to decode
// once any byte of it changes under the old checksum.
#include <cstddef>
#include <cstdint>
#include <set>
#include <span>
#include <string_view>
#include <vector>

#include "proto/cxx_manifest.hpp"
#include "proto/cxx_value.hpp"
#include "tests/fuzz/fuzz_check.hpp"

namespace {

namespace cxx = pt2cache::proto::cxx;
using pt2cache::proto::FileHash;

void check(const cxx::Manifest& manifest, const std::vector<std::byte>& value) {
    FUZZ_CHECK(manifest.variants.size() <= cxx::Manifest::k_max_variants);
    const bool reserved_zero =
        value[5] == std::byte{0} && value[6] == std::byte{0} && value[7] == std::byte{0};
    if (reserved_zero) {
        FUZZ_CHECK(manifest.encode() == value);
    }
    const auto names = cxx::manifest_paths(manifest);
    FUZZ_CHECK(names.index.size() == manifest.variants.size());
    FUZZ_CHECK(std::set<std::string_view>(names.paths.begin(), names.paths.end()).size() ==
               names.paths.size());
    for (std::size_t v = 0; v < manifest.variants.size(); ++v) {
        const auto& variant = manifest.variants[v];
        FUZZ_CHECK(names.index[v].size() == variant.size());
        // The state each path has in this variant (the last record of a path
        // named twice wins).
        std::vector<FileHash> now(names.paths.size());
        bool consistent = true;
        for (std::size_t i = 0; i < variant.size(); ++i) {
            const auto at = names.index[v][i];
            FUZZ_CHECK(at < names.paths.size() && names.paths[at] == variant[i].path);
            for (std::size_t j = 0; j < i; ++j) {
                if (names.index[v][j] == at && variant[j] != variant[i]) {
                    consistent = false;
                }
            }
            now[at] = FileHash{variant[i].status, variant[i].size, variant[i].hash};
        }
        if (consistent) {
            FUZZ_CHECK(cxx::variant_matches(manifest, names, v, now));
        }
        const auto key = cxx::result_key("common", variant);
        FUZZ_CHECK(key.size() == 34 && key.starts_with(cxx::k_result_prefix));
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const auto* bytes = reinterpret_cast<const std::byte*>(data);
    std::vector<std::byte> value(bytes, bytes + size);
    // As stored: the raw input (almost never with a valid checksum)...
    if (auto raw = cxx::Manifest::decode(value); raw && value.size() >= 8 + cxx::k_checksum_size) {
        check(*raw, value);
    }
    // ...and with its checksum.
    const auto checksum = cxx::digest_of(value);
    value.insert(value.end(), checksum.begin(), checksum.end());
    const auto manifest = cxx::Manifest::decode(value);
    if (!manifest) {
        return 0;
    }
    FUZZ_CHECK(value.size() >= 12 + cxx::k_checksum_size);
    check(*manifest, value);
    // Any changed byte of the body breaks the checksum.
    auto changed = value;
    changed[size / 2] ^= std::byte{0x40};
    FUZZ_CHECK(!cxx::Manifest::decode(changed));
    return 0;
}
