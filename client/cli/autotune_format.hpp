// SPDX-License-Identifier: MIT
//
// Text for `pt2cache bundle ls|show` and `pt2cache autotune show`: autotune
// best-configs and their bundles, readably. Pure functions, no I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "proto/autotune.hpp"

namespace pt2cache::client::cli {

// "XBLOCK=64, R0_BLOCK=8" (values as Python's repr), or "(none)".
std::string render_kwargs(const proto::autotune::Kwargs& kwargs);

// One best-config, a field a line ("num_warps      4"), each line starting
// with `indent`: kwargs, num_warps, num_stages, configs_hash,
// found_by_coordesc, time_taken_ms, triton_cache_hash, then the warp-spec
// fields when present.
std::string render_best_config(const proto::autotune::BestConfig& config,
                               std::string_view indent = "");

// A bundle's JSON text, {basename: best_config, ...}: a summary line, then
// each basename and its best-config indented; an entry that is not a
// best-config is shown as its JSON with the reason. Throws nothing; an error
// message when the text is not a JSON object.
struct BundleText {
    std::string text;
    std::optional<std::string> error;
};
BundleText render_bundle(std::string_view key, std::string_view bundle_json);

// A row of `pt2cache bundle ls`.
struct BundleRow {
    std::string key;
    std::uint64_t size = 0;
    std::uint64_t mtime_ms = 0;
    // std::nullopt: evicted since it was listed; -1: not a JSON object.
    std::optional<std::int64_t> entries;
};

// How many entries a bundle's JSON text holds, or -1 when it is not a JSON
// object.
std::int64_t count_bundle_entries(std::string_view bundle_json);

// The table of `pt2cache bundle ls`: KEY, ENTRIES, SIZE, MODIFIED.
std::string render_bundle_rows(const std::vector<BundleRow>& rows);

} // namespace pt2cache::client::cli
