// SPDX-License-Identifier: MIT
// Inductor's autotune best-configs: the record `AutotuneCache.save` writes,
// the keys it is stored under and the rules `_load_cached_autotuning` reads
// it back with (torch/_inductor/runtime/autotune_cache.py; docs/protocol.md,
// "Bundles" and "Namespaces"). Pure functions; SHA-256 from libcrypto.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "proto/hex.hpp"

#include <nlohmann/json.hpp>
#include <tl/expected.hpp>

namespace pt2cache::proto::autotune {

// Namespaces of per-kernel best-configs and of bundles.
inline constexpr std::string_view k_namespace = "autotune";
inline constexpr std::string_view k_bundle_namespace = "autotune-bundle";
inline constexpr std::string_view k_local_suffix = ".best_config";
inline constexpr std::string_view k_remote_salt = "autotune-best-config-v2";
inline constexpr std::string_view k_bundle_salt = "bundled-autotune-best-configs-v1";

// Triton's `Config.kwargs` (XBLOCK, R0_BLOCK, ...), in their order.
using Kwargs = std::vector<std::pair<std::string, nlohmann::ordered_json>>;

// A launch configuration: Triton's `Config` as far as Inductor caches it.
struct TritonConfig {
    Kwargs kwargs;
    std::int64_t num_warps = 4;
    std::int64_t num_stages = 3;
    std::int64_t num_consumer_groups = 0;
    std::int64_t num_buffers_warp_spec = 0;
    // Set on a config restored as found by coordinate descent.
    bool found_by_coordesc = false;
    // A third-party backend's tuned options (Config.extra_options); null:
    // none.
    nlohmann::ordered_json extra_options = nullptr;

    bool operator==(const TritonConfig&) const = default;
};

// The JSON record of one kernel's winning config, field for field as
// `AutotuneCache.save` builds it.
struct BestConfig {
    Kwargs kwargs;
    std::int64_t num_warps = 0;
    std::int64_t num_stages = 0;
    std::string configs_hash;
    bool found_by_coordesc = false;
    std::int64_t time_taken_ms = 0;
    std::optional<std::string> triton_cache_hash; // null when absent
    // Written only when Triton has warp specialisation (HAS_WARP_SPEC).
    std::optional<std::int64_t> num_consumer_groups;
    std::optional<std::int64_t> num_buffers_warp_spec;
    // The config's extra_options, written only when Python-truthy (after
    // triton_cache_hash, as AutotuneCache.save does); null: none.
    nlohmann::ordered_json extra_options = nullptr;

    bool operator==(const BestConfig&) const = default;

    // The dict `save` builds: kwargs, then num_warps, num_stages,
    // configs_hash, found_by_coordesc, time_taken_ms, triton_cache_hash, then
    // the warp-spec fields that are set. A kwarg named like a later field
    // keeps its place and takes that field's value, as in a Python dict.
    nlohmann::ordered_json to_ordered_json() const;
    // `json.dumps(data)` of that dict: the bytes Inductor's caches hold.
    std::string to_json() const;

    // Reads a record: an object with integer num_warps and num_stages and a
    // string configs_hash; found_by_coordesc (bool), time_taken_ms (integer),
    // triton_cache_hash (string or null) and the warp-spec integers may be
    // absent. Every other member is a kwarg, in order. The error names the
    // first problem.
    static tl::expected<BestConfig, std::string> from_json(std::string_view text);
    // The same over a parsed value.
    static tl::expected<BestConfig, std::string> from_value(const nlohmann::ordered_json& value);
};

// What `AutotuneCache.save(config, time_taken_ns, found_by_coordesc,
// triton_cache_hash)` records; `has_warp_spec` is Triton's HAS_WARP_SPEC.
BestConfig make_best_config(const TritonConfig& config, std::string configs_hash,
                            std::uint64_t time_taken_ns, bool found_by_coordesc = false,
                            std::optional<std::string> triton_cache_hash = std::nullopt,
                            bool has_warp_spec = false);

// Lowercase hex SHA-256 of `data`.
// A JSON integer as int64 (booleans and out-of-range numbers are not).
std::optional<std::int64_t> as_int64(const nlohmann::ordered_json& value);

std::string sha256_hex(std::string_view data);

// `AutotuneCache._prepare_key`: sha256_hex(f"{basename(filename)}:{tag}"),
// with basename as `os.path.basename` (the text after the last '/').
std::string prepare_key(std::string_view filename, std::string_view cache_key_tag);

// The basename of the local `.best_config` file (`_setup_local_cache`):
// sha256_hex(prepared + torch_key) + ".best_config", where `torch_key` is
// the raw digest bytes of `torch_key()`.
std::string local_key(std::string_view prepared, std::string_view torch_key);

// True for "<64 lowercase hex>.best_config": the keys bundles hold.
bool is_local_key(std::string_view key);

// The per-kernel remote cache id (`_setup_remote_autotune_cache`):
// sha256_hex(torch_key_hex + backend_hash + configs_hash + k_remote_salt).
std::string remote_key(std::string_view torch_key_hex, std::string_view backend_hash,
                       std::string_view configs_hash);

// The key of a remote per-kernel entry in namespace `autotune`:
// "<remote_key>::<prepared>" (Redis: pt2:<remote_key>::<prepared>:c1).
std::string remote_entry_key(std::string_view remote_key, std::string_view prepared);

// The bundle key (`AutotuneCacheBundler.begin_compile`):
// sha256_hex(code_hash + backend_hash + k_bundle_salt).
std::string bundle_key(std::string_view code_hash, std::string_view backend_hash);

// Inductor's `hash_configs(configs)` of a candidate list.
std::string configs_hash(const std::vector<TritonConfig>& configs);

// `_load_cached_autotuning(best_config, configs_hash, configs, inductor_meta)`
// as torch 2.15 has it:
// - a non-object, or a configs_hash other than `configs_hash`: a miss;
// - `extra_options` is taken out, and set on the config returned;
// - unless `coordinate_descent_tuning` and a truthy found_by_coordesc: the
//   one candidate whose kwargs, num_warps and num_stages all equal the
//   stored values under Python's == (numbers by value across int, float and
//   bool; dicts regardless of order; an absent member equals null);
// - otherwise (found by coordinate descent, or no single candidate matches:
//   a config Inductor added while tuning) the stored config itself
//   (_reconstruct_triton_config): num_warps and num_stages must be integers
//   (a miss where Inductor would raise, or would build a Config of another
//   type), warp-spec fields default to 0 when `has_warp_spec`, every other
//   member is a kwarg, and found_by_coordesc is set for the coordesc case.
// `has_warp_spec` is Triton's HAS_WARP_SPEC: without it num_consumer_groups
// and num_buffers_warp_spec stay among the kwargs of a rebuilt config.
std::optional<TritonConfig> select(const nlohmann::ordered_json& best_config,
                                   std::string_view configs_hash,
                                   const std::vector<TritonConfig>& candidates,
                                   bool coordinate_descent_tuning, bool has_warp_spec = true);
// The same over JSON text; text that does not parse is a miss.
std::optional<TritonConfig> select_from_text(std::string_view best_config_json,
                                             std::string_view configs_hash,
                                             const std::vector<TritonConfig>& candidates,
                                             bool coordinate_descent_tuning,
                                             bool has_warp_spec = true);

} // namespace pt2cache::proto::autotune
