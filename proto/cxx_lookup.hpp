// SPDX-License-Identifier: MIT
//
// CXX_LOOKUP (docs/protocol.md, "Compile-cache lookup"): a pt2cache-cxx
// lookup in one round trip. The request names the common key and the
// launcher's placeholder rules; the response carries the outcome, the
// manifest and, on a hit, the stored result.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "proto/cxx_manifest.hpp"
#include "proto/frame.hpp"

#include <tl/expected.hpp>

namespace pt2cache::proto::cxx {

// So that "m-" + the common key is a valid key.
inline constexpr std::size_t k_max_common_key = k_max_key - 2;
inline constexpr std::size_t k_max_lookup_rules = 16;
inline constexpr std::size_t k_max_placeholder = 255;
inline constexpr std::size_t k_max_rule_directory = 4096;

enum class LookupOutcome : std::uint8_t {
    no_manifest = 0, // no manifest under the common key
    no_match = 1,    // a manifest (maybe corrupt), no variant with a stored result matches
    hit = 2,         // a variant matches: `result` is its stored value
    undecided = 3,   // the daemon could not hash every path: the launcher matches
};

struct LookupRequest {
    std::string common_key;
    std::vector<PlaceholderRule> rules;
};

// Why `request` breaks the limits of docs/protocol.md, or nullopt.
std::optional<std::string> lookup_request_error(const LookupRequest& request);

// Daemon side.
tl::expected<LookupRequest, Error> parse_lookup(std::span<const std::byte> body);
// Whether a response with this manifest and result fits one frame (its
// length is a u32; each part alone may be up to max_value).
bool lookup_response_fits(std::size_t manifest_size, std::size_t result_size);
// The response frame up to its result, which the caller appends
// (`result_size` bytes); the sizes must pass lookup_response_fits.
void encode_lookup_response_head(std::vector<std::byte>& out, std::uint32_t id,
                                 LookupOutcome outcome, std::span<const std::byte> manifest,
                                 std::size_t result_size);

// Client side: appends a whole request frame; `request` must pass
// lookup_request_error.
void encode_lookup(std::vector<std::byte>& out, std::uint32_t id, const LookupRequest& request);

struct LookupResponse {
    LookupOutcome outcome = LookupOutcome::no_manifest;
    std::span<const std::byte> manifest; // empty for no_manifest
    std::span<const std::byte> result;   // empty unless hit
};
// Views into `body`.
tl::expected<LookupResponse, Error> parse_lookup_response(std::span<const std::byte> body);

} // namespace pt2cache::proto::cxx
