// SPDX-License-Identifier: MIT
//
// What Inductor would compute for an AutotuneCache, worked out by python3
// with hashlib and json (independently of proto/autotune), for the client
// tests to compare with what libpt2cache stored.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "client/autotune.hpp"
#include "tests/proto/python_oracle.hpp"

#include <nlohmann/json.hpp>

namespace pt2cache::tests {

// AutotuneCache._prepare_key, _setup_local_cache, _setup_remote_autotune_cache,
// hash_configs, AutotuneCache.save's json.dumps(data) and
// _AutotuneCacheBundlerImpl's key and json.dumps(entries).
inline constexpr const char* k_inductor_client_oracle = R"(
import hashlib, json, os, sys

inp = json.load(open(sys.argv[1]))
out = {}

torch_key = bytes.fromhex(inp["torch_key_hex"])
key = f"{os.path.basename(inp['filename'])}:{inp['tag']}"
prepared = hashlib.sha256(key.encode("utf-8")).hexdigest()
hasher = hashlib.sha256()
hasher.update(prepared.encode("utf-8"))
hasher.update(torch_key)
out["prepared"] = prepared
out["local"] = f"{hasher.hexdigest()}.best_config"
remote = torch_key.hex() + inp["backend_hash"] + inp["configs_hash"] + "autotune-best-config-v2"
out["remote"] = hashlib.sha256(remote.encode("utf-8")).hexdigest() + "::" + prepared

hasher = hashlib.sha256()
for cfg in inp["candidates"]:
    hasher.update(
        f"{sorted(cfg['kwargs'].items())} {cfg['num_warps']} {cfg['num_stages']}\n".encode())
out["configs_hash"] = hasher.hexdigest()

saves = []
for save in inp["saves"]:
    cfg = save["config"]
    data = {
        **cfg["kwargs"],
        "num_warps": cfg["num_warps"],
        "num_stages": cfg["num_stages"],
        "configs_hash": inp["configs_hash"],
        "found_by_coordesc": save["found_by_coordesc"],
        "time_taken_ms": save["time_taken_ns"] // 1000000,
        "triton_cache_hash": save["triton_cache_hash"],
    }
    saves.append(json.dumps(data))
out["saves"] = saves

code_hash, backend_hash = inp["code_hash"], inp["backend_hash"]
out["bundle_key"] = hashlib.sha256(
    (code_hash + backend_hash + "bundled-autotune-best-configs-v1").encode("utf-8")).hexdigest()
out["bundle"] = json.dumps({basename: json.loads(data) for basename, data in inp["bundle"]})
print(json.dumps(out))
)";

struct SaveArgs {
    client::TritonConfig config;
    std::uint64_t time_taken_ns = 0;
    bool found_by_coordesc = false;
    std::optional<std::string> triton_cache_hash;
};

struct InductorAnswer {
    std::string prepared;
    std::string local;
    std::string remote;
    std::string configs_hash; // hash_configs(candidates)
    std::vector<std::string> saves;
    std::string bundle_key;
    std::string bundle; // json.dumps of `bundle` (basename, JSON text) pairs
};

inline std::string hex_of(std::string_view bytes) {
    static constexpr char digits[] = "0123456789abcdef";
    std::string out;
    for (const char c : bytes) {
        out += digits[static_cast<unsigned char>(c) >> 4];
        out += digits[static_cast<unsigned char>(c) & 0xF];
    }
    return out;
}

inline nlohmann::ordered_json candidate_json(const client::TritonConfig& config) {
    auto kwargs = nlohmann::ordered_json::object();
    for (const auto& [name, value] : config.kwargs) {
        kwargs[name] = value;
    }
    return {{"kwargs", kwargs}, {"num_warps", config.num_warps}, {"num_stages", config.num_stages}};
}

// Inductor's answers for `settings`; `candidates` give configs_hash, `saves`
// the records, `bundle` the (basename, record JSON) pairs of the bundle of
// `code_hash` and settings.backend_hash.
inline InductorAnswer
inductor_answer(const client::AutotuneSettings& settings,
                const std::vector<client::TritonConfig>& candidates,
                const std::vector<SaveArgs>& saves = {}, std::string_view code_hash = "code",
                const std::vector<std::pair<std::string, std::string>>& bundle = {}) {
    nlohmann::ordered_json input = {
        {"torch_key_hex", hex_of(settings.torch_key)},
        {"filename", settings.filename},
        {"tag", settings.cache_key_tag},
        {"backend_hash", settings.backend_hash},
        {"configs_hash", settings.configs_hash},
        {"code_hash", code_hash},
        {"candidates", nlohmann::ordered_json::array()},
        {"saves", nlohmann::ordered_json::array()},
        {"bundle", nlohmann::ordered_json::array()},
    };
    for (const auto& candidate : candidates) {
        input["candidates"].push_back(candidate_json(candidate));
    }
    for (const auto& save : saves) {
        input["saves"].push_back(
            {{"config", candidate_json(save.config)},
             {"time_taken_ns", save.time_taken_ns},
             {"found_by_coordesc", save.found_by_coordesc},
             {"triton_cache_hash", save.triton_cache_hash
                                       ? nlohmann::ordered_json(*save.triton_cache_hash)
                                       : nlohmann::ordered_json(nullptr)}});
    }
    for (const auto& [basename, data] : bundle) {
        input["bundle"].push_back({basename, data});
    }
    const auto out = run_python(k_inductor_client_oracle, input);
    InductorAnswer answer;
    answer.prepared = out.at("prepared").get<std::string>();
    answer.local = out.at("local").get<std::string>();
    answer.remote = out.at("remote").get<std::string>();
    answer.configs_hash = out.at("configs_hash").get<std::string>();
    answer.saves = out.at("saves").get<std::vector<std::string>>();
    answer.bundle_key = out.at("bundle_key").get<std::string>();
    answer.bundle = out.at("bundle").get<std::string>();
    return answer;
}

inline client::TritonConfig triton_config(client::Kwargs kwargs, std::int64_t warps,
                                          std::int64_t stages) {
    client::TritonConfig config;
    config.kwargs = std::move(kwargs);
    config.num_warps = warps;
    config.num_stages = stages;
    return config;
}

// 32 bytes standing in for torch_key(), with NUL and high bytes.
inline std::string fake_torch_key() {
    std::string key;
    for (int i = 0; i < 32; ++i) {
        key += static_cast<char>((i * 37 + 0xF0) & 0xFF);
    }
    return key;
}

} // namespace pt2cache::tests
