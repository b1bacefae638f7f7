// SPDX-License-Identifier: MIT
//
// Autotune best-configs through pt2cached, for compiler workers written in
// C++: Inductor's `AutotuneCache` (torch/_inductor/runtime/autotune_cache.py)
// over client::Client, with the keys, JSON bytes and selection rules of
// proto/autotune.hpp, so that entries interoperate with PyTorch's own.
//
// As with the rest of libpt2cache, nothing here throws for I/O or makes a
// compile fail: an absent daemon reads as a miss and makes save() a no-op.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "client/client.hpp"
#include "proto/autotune.hpp"

#include <tl/expected.hpp>

namespace pt2cache::client {

using proto::autotune::BestConfig;
using proto::autotune::Kwargs;
using proto::autotune::TritonConfig;

// Inductor's `hash_configs(candidates)`: the `configs_hash` of AutotuneSettings.
std::string configs_hash(const std::vector<TritonConfig>& candidates);

// What Inductor's `AutotuneCache.create(inductor_meta, filename, configs_hash)`
// takes, spelled out.
struct AutotuneSettings {
    // The raw digest bytes of `torch._inductor.codecache.torch_key()`.
    std::string torch_key;
    // `triton_hash_with_backend()`; used by the remote entry only.
    std::string backend_hash;
    // `torch.compiler.config.cache_key_tag`, usually empty.
    std::string cache_key_tag;
    // configs_hash(candidates) of the kernel's candidate configs.
    std::string configs_hash;
    // The kernel's generated source file; only its basename counts.
    std::string filename;
    // Inductor's `coordinate_descent_tuning`.
    bool coordinate_descent_tuning = false;
    // `autotune_local_cache`: the `<64 hex>.best_config` entry.
    bool local_cache = true;
    // `autotune_remote_cache` (with a backend hash): the
    // `<remote_key>::<prepared key>` entry, which pt2cached sends on to Redis
    // when a remote tier is configured.
    bool remote_cache = true;
    // Triton's HAS_WARP_SPEC: records carry num_consumer_groups and
    // num_buffers_warp_spec.
    bool has_warp_spec = false;
    // A token of Client::bundle_begin: local hits and saves join that bundle,
    // as AutotuneCacheBundler.put does in Inductor.
    std::optional<std::uint64_t> bundle_token;
};

// One kernel's best-config cache. Holds a reference to `client`, which must
// outlive it; like Client, not thread-safe.
class AutotuneCache {
public:
    AutotuneCache(Client& client, AutotuneSettings settings);

    // `AutotuneCache.read_best(inductor_meta, candidates)`: the stored
    // best-config (read as read() does), then the one of `candidates` it
    // selects (proto::autotune::select). std::nullopt on any miss or error.
    std::optional<TritonConfig> read_best(const std::vector<TritonConfig>& candidates);

    // `AutotuneCache._read()`: the local entry if it is a non-empty JSON
    // object, else the remote entry if it is one, else std::nullopt (also on
    // errors).
    std::optional<nlohmann::ordered_json> read();

    // `AutotuneCache.save(config, time_taken_ns, found_by_coordesc,
    // triton_cache_hash)`: writes `best_config(...)` to the local entry (in
    // the bundle, with a token) and to the remote entry, each one enabled.
    // Both are attempted; the first error comes back, for logging only.
    tl::expected<void, Error> save(const TritonConfig& config, std::uint64_t time_taken_ns,
                                   bool found_by_coordesc = false,
                                   std::optional<std::string> triton_cache_hash = std::nullopt);

    // The record save() writes.
    BestConfig best_config(const TritonConfig& config, std::uint64_t time_taken_ns,
                           bool found_by_coordesc = false,
                           std::optional<std::string> triton_cache_hash = std::nullopt) const;

    // `sha256_hex(f"{basename}:{cache_key_tag}")`, the inner key.
    const std::string& prepared_key() const { return m_prepared; }
    // "<64 hex>.best_config" in namespace "autotune"; empty when local_cache is off.
    const std::string& local_key() const { return m_local_key; }
    // "<remote_key>::<prepared key>" in namespace "autotune"; empty when
    // remote_cache is off.
    const std::string& remote_key() const { return m_remote_key; }
    const AutotuneSettings& settings() const { return m_settings; }

    // The bundle token in use. It is dropped when the daemon no longer knows
    // it (expired or ended) or offers no bundles; the entry is then read or
    // written without it.
    std::optional<std::uint64_t> bundle_token() const { return m_settings.bundle_token; }

    // Why the last read_best, read or save missed or skipped a write, when an
    // error (not a plain miss) was the reason; cleared by each call.
    const std::optional<Error>& last_error() const { return m_last_error; }

private:
    // The entry as a non-empty JSON object, or std::nullopt.
    std::optional<nlohmann::ordered_json> read_entry(const std::string& key, bool in_bundle);
    tl::expected<void, Error> write_entry(const std::string& key, const std::string& json,
                                          bool in_bundle);
    // Whether `error` means the token, not the entry, is the problem; if so
    // the token is dropped.
    bool drop_bad_token(const Error& error);

    Client* m_client;
    AutotuneSettings m_settings;
    std::string m_prepared;
    std::string m_local_key;
    std::string m_remote_key;
    std::optional<Error> m_last_error;
};

// A launch config as JSON, for the C API and tools:
//   {"kwargs": {"XBLOCK": 64, ...}, "num_warps": 4, "num_stages": 1,
//    "num_consumer_groups": 0, "num_buffers_warp_spec": 0,
//    "found_by_coordesc": false}
// written as Python's json.dumps writes it.
std::string config_to_json(const TritonConfig& config);

// Reads that form: "kwargs" is an object (absent: none); num_warps (default
// 4), num_stages (3), num_consumer_groups, num_buffers_warp_spec (0) are
// integers; found_by_coordesc (false) is a boolean; other members are
// refused. The error names the first problem.
tl::expected<TritonConfig, std::string> config_from_json(std::string_view text);
// The same over a parsed value.
tl::expected<TritonConfig, std::string> config_from_value(const nlohmann::ordered_json& value);

// A JSON array of configs in that form.
tl::expected<std::vector<TritonConfig>, std::string> configs_from_json(std::string_view text);

} // namespace pt2cache::client
