// SPDX-License-Identifier: MIT
//
// The bundle and autotune parts of the C API (client/pt2cache.h): return
// codes, JSON in and out, ownership, NULLs, an absent daemon.
#include <cstring>
#include <string>

#include "client/pt2cache.h"
#include "tests/client/autotune_oracle.hpp"
#include "tests/client/helpers.hpp"

#include <catch2/catch.hpp>

using pt2cache::tests::CapiHandle;
using pt2cache::tests::DaemonProcess;

namespace {

constexpr const char* k_candidates = R"([
    {"kwargs": {"XBLOCK": 64, "R0_BLOCK": 8}, "num_warps": 4, "num_stages": 1},
    {"kwargs": {"XBLOCK": 128, "R0_BLOCK": 8}, "num_warps": 8, "num_stages": 1}
])";

struct Params {
    Params() {
        std::memset(&params, 0, sizeof params);
        params.torch_key = torch_key.data();
        params.torch_key_len = torch_key.size();
        params.backend_hash = "B1F2C3D4E5-cuda-sm90";
        params.configs_hash = configs_hash;
        params.filename = "/tmp/torchinductor_u/ab/cabkernel.py";
    }
    std::string torch_key = pt2cache::tests::fake_torch_key();
    char configs_hash[65] = {};
    pt2cache_autotune_params params;
};

std::string last_error(pt2cache_client* c) {
    return pt2cache_last_error(c);
}

} // namespace

TEST_CASE("C API autotune: NULLs and bad JSON are PT2CACHE_E_INVALID", "[capi][autotune]") {
    CapiHandle handle("/nonexistent/pt2cache.sock");
    pt2cache_client* c = handle.client;
    Params p;
    char* out = reinterpret_cast<char*>(0x1);
    char hash[65];

    CHECK(pt2cache_autotune_configs_hash(nullptr, k_candidates, hash) == PT2CACHE_E_INVALID);
    CHECK(pt2cache_autotune_configs_hash(c, nullptr, hash) == PT2CACHE_E_INVALID);
    CHECK(pt2cache_autotune_configs_hash(c, "{\"kwargs\": {}}", hash) == PT2CACHE_E_INVALID);
    CHECK(last_error(c).find("array") != std::string::npos);
    CHECK(pt2cache_autotune_read_best(c, &p.params, k_candidates, nullptr) == PT2CACHE_E_INVALID);
    CHECK(pt2cache_autotune_read_best(c, nullptr, k_candidates, &out) == PT2CACHE_E_INVALID);
    CHECK(out == nullptr);
    CHECK(pt2cache_autotune_read_best(c, &p.params, "[{\"num_warps\": \"4\"}]", &out) ==
          PT2CACHE_E_INVALID);
    CHECK(last_error(c).find("num_warps") != std::string::npos);
    CHECK(pt2cache_autotune_save(c, &p.params, nullptr, 0, 0, nullptr) == PT2CACHE_E_INVALID);
    CHECK(pt2cache_autotune_save(c, &p.params, "not json", 0, 0, nullptr) == PT2CACHE_E_INVALID);
    p.params.filename = nullptr;
    CHECK(pt2cache_autotune_save(c, &p.params, "{}", 0, 0, nullptr) == PT2CACHE_E_INVALID);
    CHECK(last_error(c).find("filename") != std::string::npos);

    uint64_t token = 7;
    CHECK(pt2cache_bundle_begin(c, nullptr, "b", &token, nullptr, nullptr, nullptr) ==
          PT2CACHE_E_INVALID);
    CHECK(token == 0);
    CHECK(pt2cache_bundle_begin(c, "code", "b", nullptr, nullptr, nullptr, nullptr) ==
          PT2CACHE_E_INVALID);
    CHECK(pt2cache_bundle_end(nullptr, 1, nullptr) == PT2CACHE_E_INVALID);
    void* value = nullptr;
    size_t len = 0;
    CHECK(pt2cache_get_bundled(c, "autotune", nullptr, 1, 1, &value, &len) == PT2CACHE_E_INVALID);
    CHECK(pt2cache_put_bundled(c, nullptr, "k", 1, "v", 1, 0, 0, 1) == PT2CACHE_E_INVALID);
}

TEST_CASE("C API autotune: configs_hash is Inductor's hash_configs", "[capi][autotune]") {
    CapiHandle handle("/nonexistent/pt2cache.sock");
    char hash[65];
    REQUIRE(pt2cache_autotune_configs_hash(handle.client, k_candidates, hash) == PT2CACHE_OK);
    CHECK(std::strlen(hash) == 64);
    auto configs = pt2cache::client::configs_from_json(k_candidates);
    REQUIRE(configs);
    pt2cache::client::AutotuneSettings settings;
    const auto inductor = pt2cache::tests::inductor_answer(settings, *configs);
    CHECK(std::string(hash) == inductor.configs_hash);
}

TEST_CASE("C API autotune: an absent daemon is a miss", "[capi][autotune]") {
    CapiHandle handle("/nonexistent/pt2cache.sock");
    Params p;
    REQUIRE(pt2cache_autotune_configs_hash(handle.client, k_candidates, p.configs_hash) ==
            PT2CACHE_OK);
    char* out = nullptr;
    CHECK(pt2cache_autotune_read_best(handle.client, &p.params, k_candidates, &out) ==
          PT2CACHE_E_UNREACHABLE);
    CHECK(out == nullptr);
    CHECK(pt2cache_autotune_save(handle.client, &p.params, "{}", 1, 0, "h") ==
          PT2CACHE_E_UNREACHABLE);
    uint64_t token = 0;
    CHECK(pt2cache_bundle_begin(handle.client, "code", "b", &token, nullptr, nullptr, nullptr) ==
          PT2CACHE_E_UNREACHABLE);
}

TEST_CASE("C API autotune: save, read_best and a bundle round trip", "[capi][autotune]") {
    PT2CACHE_REQUIRE_DAEMON();
    DaemonProcess daemon;
    CapiHandle handle(daemon.socket_path().c_str());
    pt2cache_client* c = handle.client;
    Params p;
    REQUIRE(pt2cache_autotune_configs_hash(c, k_candidates, p.configs_hash) == PT2CACHE_OK);

    uint64_t token = 0;
    int hit = -1;
    uint32_t entries = 99;
    uint64_t saved_ms = 99;
    REQUIRE(pt2cache_bundle_begin(c, "codehash", p.params.backend_hash, &token, &hit, &entries,
                                  &saved_ms) == PT2CACHE_OK);
    CHECK(hit == 0);
    CHECK(entries == 0);
    CHECK(saved_ms == 0);
    p.params.bundle_token = token;
    p.params.flags = PT2CACHE_AUTOTUNE_BUNDLE;

    char* out = nullptr;
    CHECK(pt2cache_autotune_read_best(c, &p.params, k_candidates, &out) == PT2CACHE_MISS);
    CHECK(out == nullptr);
    CHECK(last_error(c).empty());
    const char* chosen = R"({"kwargs": {"XBLOCK": 128, "R0_BLOCK": 8}, "num_warps": 8,
                             "num_stages": 1})";
    INFO(last_error(c));
    REQUIRE(pt2cache_autotune_save(c, &p.params, chosen, 3'000'000'000, 0, "tritonhash") ==
            PT2CACHE_OK);
    REQUIRE(pt2cache_autotune_read_best(c, &p.params, k_candidates, &out) == PT2CACHE_OK);
    REQUIRE(out != nullptr);
    CHECK(std::string(out) == R"({"kwargs": {"XBLOCK": 128, "R0_BLOCK": 8}, "num_warps": 8, )"
                              R"("num_stages": 1, "num_consumer_groups": 0, )"
                              R"("num_buffers_warp_spec": 0, "found_by_coordesc": false})");
    pt2cache_free(out);

    // The same bytes as the C++ API, under Inductor's local key.
    pt2cache::client::AutotuneSettings settings;
    settings.torch_key = p.torch_key;
    settings.backend_hash = p.params.backend_hash;
    settings.configs_hash = p.configs_hash;
    settings.filename = p.params.filename;
    const auto inductor = pt2cache::tests::inductor_answer(
        settings, {},
        {{*pt2cache::client::config_from_json(chosen), 3'000'000'000, false, "tritonhash"}});
    void* value = nullptr;
    size_t len = 0;
    REQUIRE(pt2cache_get(c, "autotune", inductor.local.data(), inductor.local.size(), &value,
                         &len) == PT2CACHE_OK);
    CHECK(std::string(static_cast<const char*>(value), len) == inductor.saves.at(0));
    pt2cache_free(value);

    // Coordinate descent: the stored config itself.
    const char* tuned = R"({"kwargs": {"XBLOCK": 96, "R0_BLOCK": 8}, "num_warps": 4})";
    REQUIRE(pt2cache_autotune_save(c, &p.params, tuned, 0, 1, nullptr) == PT2CACHE_OK);
    // Without coordinate descent no candidate matches: rebuilt (torch 2.15).
    REQUIRE(pt2cache_autotune_read_best(c, &p.params, k_candidates, &out) == PT2CACHE_OK);
    CHECK(std::string(out) == R"({"kwargs": {"XBLOCK": 96, "R0_BLOCK": 8}, "num_warps": 4, )"
                              R"("num_stages": 3, "num_consumer_groups": 0, )"
                              R"("num_buffers_warp_spec": 0, "found_by_coordesc": false})");
    pt2cache_free(out);
    p.params.flags |= PT2CACHE_AUTOTUNE_COORDESC;
    REQUIRE(pt2cache_autotune_read_best(c, &p.params, k_candidates, &out) == PT2CACHE_OK);
    CHECK(std::string(out) == R"({"kwargs": {"XBLOCK": 96, "R0_BLOCK": 8}, "num_warps": 4, )"
                              R"("num_stages": 3, "num_consumer_groups": 0, )"
                              R"("num_buffers_warp_spec": 0, "found_by_coordesc": true})");
    pt2cache_free(out);

    // Bundled get and put of raw entries, then the end.
    const std::string other = std::string(64, 'e') + ".best_config";
    const std::string record = inductor.saves.at(0);
    CHECK(pt2cache_put_bundled(c, "autotune", other.data(), other.size(), record.data(),
                               record.size(), 0, 0, token) == PT2CACHE_OK);
    REQUIRE(pt2cache_get_bundled(c, "autotune", other.data(), other.size(), token, &value, &len) ==
            PT2CACHE_OK);
    CHECK(std::string(static_cast<const char*>(value), len) == record);
    pt2cache_free(value);
    entries = 0;
    REQUIRE(pt2cache_bundle_end(c, token, &entries) == PT2CACHE_OK);
    CHECK(entries == 2);
    CHECK(pt2cache_bundle_end(c, token, nullptr) == PT2CACHE_E_SERVER);
    CHECK(last_error(c).find("UNKNOWN_TOKEN") != std::string::npos);

    REQUIRE(pt2cache_bundle_begin(c, "codehash", p.params.backend_hash, &token, &hit, &entries,
                                  &saved_ms) == PT2CACHE_OK);
    CHECK(hit == 1);
    CHECK(entries == 2);
    CHECK(saved_ms == 3000); // the tuned record (0 ms) replaced the first save in the bundle
    CHECK(pt2cache_bundle_end(c, token, &entries) == PT2CACHE_OK);
    CHECK(entries == 0);
}
