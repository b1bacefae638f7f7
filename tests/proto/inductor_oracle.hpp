// SPDX-License-Identifier: MIT
// The parts of Inductor that proto/autotune mirrors, as Python for the
// tests to run (see python_oracle.hpp), and helpers to hand configs over.
#pragma once

#include <string>

#include "proto/autotune.hpp"

#include <nlohmann/json.hpp>

namespace pt2cache::tests {

using proto::autotune::Kwargs;
using proto::autotune::TritonConfig;

inline TritonConfig config(Kwargs kwargs, std::int64_t warps, std::int64_t stages) {
    TritonConfig c;
    c.kwargs = std::move(kwargs);
    c.num_warps = warps;
    c.num_stages = stages;
    return c;
}

inline nlohmann::ordered_json config_json(const TritonConfig& c) {
    auto kwargs = nlohmann::ordered_json::object();
    for (const auto& [key, value] : c.kwargs) {
        kwargs[key] = value;
    }
    return {{"kwargs", kwargs},
            {"num_warps", c.num_warps},
            {"num_stages", c.num_stages},
            {"num_consumer_groups", c.num_consumer_groups},
            {"num_buffers_warp_spec", c.num_buffers_warp_spec},
            {"extra_options", c.extra_options}};
}

// Inductor's Config, hash_configs, AutotuneCache.save's dict and
// _load_cached_autotuning (behind AutotuneCache._read's dict check), as
// torch 2.15's torch/_inductor/runtime/{triton_heuristics,autotune_cache}.py
// write them.
inline constexpr const char* k_inductor = R"(
import hashlib, json, os, sys

class Config:
    def __init__(self, kwargs, num_warps=4, num_stages=3, num_consumer_groups=0,
                 num_buffers_warp_spec=0):
        self.kwargs = kwargs
        self.num_warps = num_warps
        self.num_stages = num_stages
        self.num_consumer_groups = num_consumer_groups
        self.num_buffers_warp_spec = num_buffers_warp_spec

def make(c):
    config = Config(c["kwargs"], c["num_warps"], c["num_stages"], c["num_consumer_groups"],
                    c["num_buffers_warp_spec"])
    if c.get("extra_options") is not None:
        config.extra_options = c["extra_options"]
    return config

def hash_configs(configs):
    hasher = hashlib.sha256()
    for cfg in configs:
        hasher.update(
            f"{sorted(cfg.kwargs.items())} {cfg.num_warps} {cfg.num_stages}\n".encode()
        )
    return hasher.hexdigest()

def save_data(config, configs_hash, time_taken_ns, found_by_coordesc, triton_cache_hash,
              HAS_WARP_SPEC):
    data = {
        **config.kwargs,
        "num_warps": config.num_warps,
        "num_stages": config.num_stages,
        "configs_hash": configs_hash,
        "found_by_coordesc": found_by_coordesc,
        "time_taken_ms": time_taken_ns // 1000000,
        "triton_cache_hash": triton_cache_hash,
    }
    if extra_options := getattr(config, "extra_options", None):
        data["extra_options"] = extra_options
    if HAS_WARP_SPEC:
        data.update(
            {
                "num_consumer_groups": getattr(config, "num_consumer_groups", 0),
                "num_buffers_warp_spec": getattr(config, "num_buffers_warp_spec", 0),
            }
        )
    return data

def reconstruct(best_config, extra_options, HAS_WARP_SPEC):
    num_warps = best_config.pop("num_warps")
    num_stages = best_config.pop("num_stages")
    config_args = {"num_warps": num_warps, "num_stages": num_stages}
    if HAS_WARP_SPEC:
        config_args.update(
            {
                "num_consumer_groups": best_config.pop("num_consumer_groups", 0),
                "num_buffers_warp_spec": best_config.pop("num_buffers_warp_spec", 0),
            }
        )
    triton_config = Config(best_config, **config_args)
    triton_config.extra_options = extra_options
    return triton_config

def load(best_config, configs_hash, configs, coordinate_descent_tuning, HAS_WARP_SPEC):
    if not isinstance(best_config, dict):
        return None
    if best_config.pop("configs_hash", None) != configs_hash:
        return None
    best_config.pop("time_taken_ms", None)
    best_config.pop("triton_cache_hash", None)
    extra_options = best_config.pop("extra_options", None)
    found_by_coordesc = coordinate_descent_tuning and best_config.pop("found_by_coordesc", False)
    if not found_by_coordesc:
        matching_configs = [
            cfg
            for cfg in configs
            if all(val == best_config.get(key) for key, val in cfg.kwargs.items())
            and cfg.num_warps == best_config.get("num_warps")
            and cfg.num_stages == best_config.get("num_stages")
        ]
        if len(matching_configs) == 1:
            matched_config = matching_configs[0]
            matched_config.extra_options = extra_options
            return matched_config
    best_config.pop("found_by_coordesc", None)
    triton_config = reconstruct(best_config, extra_options, HAS_WARP_SPEC)
    if found_by_coordesc:
        triton_config.found_by_coordesc = True
    return triton_config
)";

} // namespace pt2cache::tests
