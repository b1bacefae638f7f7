// SPDX-License-Identifier: MIT
#include <string>
#include <vector>

#include "proto/autotune.hpp"
#include "tests/proto/inductor_oracle.hpp"
#include "tests/proto/python_oracle.hpp"

#include <catch2/catch.hpp>

using namespace pt2cache::proto::autotune;
using namespace std::string_literals;
using pt2cache::tests::config;
using pt2cache::tests::config_json;
using pt2cache::tests::k_inductor;
using pt2cache::tests::run_python;
using Json = nlohmann::ordered_json;

TEST_CASE("keys equal Inductor's, digests from Python's hashlib", "[proto][autotune]") {
    const auto torch_key = "\x00\x01\xfe\xff torch key bytes \x7f\x80 0123456789"s;
    const std::vector<std::string> filenames = {
        "/tmp/torchinductor_me/ab/cabcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmn.py",
        "kernel.py",
        "dir/sub/",
        "",
        "/x/k\xc3\xa9rnel.py",
    };
    const std::vector<std::string> tags = {"", "tag-1", "\xc3\xbc"};
    Json input = Json::array();
    for (const auto& filename : filenames) {
        for (const auto& tag : tags) {
            input.push_back({{"filename", filename},
                             {"tag", tag},
                             {"torch_key", pt2cache::proto::to_hex(torch_key)},
                             {"backend", "B" + tag},
                             {"configs_hash", std::string(64, 'c')},
                             {"code_hash", "c" + filename}});
        }
    }
    const Json expected = run_python(R"(
import hashlib, json, os, sys
out = []
for c in json.load(open(sys.argv[1])):
    prepared = hashlib.sha256(
        f"{os.path.basename(c['filename'])}:{c['tag']}".encode("utf-8")).hexdigest()
    hasher = hashlib.sha256()
    hasher.update(prepared.encode("utf-8"))
    hasher.update(bytes.fromhex(c["torch_key"]))
    local = f"{hasher.hexdigest()}.best_config"
    key = c["torch_key"] + c["backend"] + c["configs_hash"] + "autotune-best-config-v2"
    remote = hashlib.sha256(key.encode("utf-8")).hexdigest()
    key = c["code_hash"] + c["backend"] + "bundled-autotune-best-configs-v1"
    bundle = hashlib.sha256(key.encode("utf-8")).hexdigest()
    out.append([prepared, local, remote, bundle])
print(json.dumps(out))
)",
                                     input);
    REQUIRE(expected.size() == input.size());
    for (std::size_t i = 0; i < input.size(); ++i) {
        const auto& c = input[i];
        INFO(c.dump(-1, ' ', true));
        const auto prepared =
            prepare_key(c["filename"].get<std::string>(), c["tag"].get<std::string>());
        CHECK(prepared == expected[i][0]);
        const auto local = local_key(prepared, torch_key);
        CHECK(local == expected[i][1]);
        CHECK(is_local_key(local));
        CHECK(remote_key(c["torch_key"].get<std::string>(), c["backend"].get<std::string>(),
                         c["configs_hash"].get<std::string>()) == expected[i][2]);
        CHECK(bundle_key(c["code_hash"].get<std::string>(), c["backend"].get<std::string>()) ==
              expected[i][3]);
    }
    CHECK(remote_entry_key("r", "p") == "r::p");
    CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST_CASE("is_local_key accepts only <64 lowercase hex>.best_config", "[proto][autotune]") {
    const std::string hex(64, 'a');
    CHECK(is_local_key(hex + ".best_config"));
    CHECK(is_local_key(std::string(64, '0') + ".best_config"));
    CHECK_FALSE(is_local_key(std::string(64, 'A') + ".best_config"));
    CHECK_FALSE(is_local_key(std::string(63, 'a') + ".best_config"));
    CHECK_FALSE(is_local_key(std::string(65, 'a') + ".best_config"));
    CHECK_FALSE(is_local_key(hex + ".best_confiG"));
    CHECK_FALSE(is_local_key(hex + "::" + hex));
    CHECK_FALSE(is_local_key(std::string(63, 'a') + "g.best_config"));
    CHECK_FALSE(is_local_key(""));
}

TEST_CASE("configs_hash equals Inductor's hash_configs", "[proto][autotune]") {
    const std::vector<std::vector<TritonConfig>> lists = {
        {},
        {config({}, 4, 3)},
        {config({{"XBLOCK", 1024}}, 4, 1)},
        {config({{"XBLOCK", 8}, {"R0_BLOCK", 64}}, 8, 1),
         config({{"R0_BLOCK", 128}, {"XBLOCK", 1}}, 2, 1),
         config({{"YBLOCK", 16}, {"XBLOCK", 32}, {"R0_BLOCK", 4}}, 4, 2)},
        {config({{"B", 1.5},
                 {"A", true},
                 {"C", nullptr},
                 {"D", "it's"},
                 {"E", Json::array({1, 2})},
                 {"a", -3},
                 {"_", 1e20}},
                16, 5)},
        {config({{"RSPLIT", 8}, {"XBLOCK", 1}, {"R0_BLOCK", 2048}}, 4, 1),
         config({{"RSPLIT", 8}, {"XBLOCK", 1}, {"R0_BLOCK", 2048}}, 4, 1)},
    };
    Json input = Json::array();
    for (const auto& list : lists) {
        Json configs = Json::array();
        for (const auto& c : list) {
            configs.push_back(config_json(c));
        }
        input.push_back(configs);
    }
    const Json expected = run_python(std::string(k_inductor) + R"(
print(json.dumps([hash_configs([make(c) for c in configs])
                  for configs in json.load(open(sys.argv[1]))]))
)",
                                     input);
    REQUIRE(expected.size() == lists.size());
    for (std::size_t i = 0; i < lists.size(); ++i) {
        INFO("list " << i);
        CHECK(configs_hash(lists[i]) == expected[i]);
    }
    // Sorted kwargs: their order does not change the hash.
    CHECK(configs_hash({config({{"XBLOCK", 8}, {"R0_BLOCK", 64}}, 8, 1)}) ==
          configs_hash({config({{"R0_BLOCK", 64}, {"XBLOCK", 8}}, 8, 1)}));
}

TEST_CASE("BestConfig JSON is byte for byte AutotuneCache.save's json.dumps", "[proto][autotune]") {
    struct Row {
        TritonConfig config;
        std::uint64_t time_taken_ns;
        bool found_by_coordesc;
        std::optional<std::string> triton_cache_hash;
        bool has_warp_spec;
    };
    auto warp = config({{"XBLOCK", 64}, {"R0_BLOCK", 8}}, 8, 2);
    warp.num_consumer_groups = 2;
    warp.num_buffers_warp_spec = 3;
    const std::vector<Row> rows = {
        {config({{"XBLOCK", 1024}}, 4, 1), 117'999'999, false, std::nullopt, false},
        {config({{"XBLOCK", 8}, {"R0_BLOCK", 64}}, 8, 1), 0, true, "abcDEF0123", false},
        {warp, 2'500'000'000, true, std::nullopt, true},
        {config({}, 4, 3), 999'999, false, "h", true},
        // A kwarg named like a later field keeps its place and takes its value.
        {config({{"num_warps", 99}, {"XBLOCK", 4}, {"configs_hash", "x"}}, 2, 1), 5'000'000, false,
         std::nullopt, false},
        {config({{"F", 0.5}, {"S", "caf\xc3\xa9"}}, 4, 1), 1'000'000, false, std::nullopt, false},
    };
    const std::string hash(64, 'e');
    Json input = Json::array();
    for (const auto& row : rows) {
        input.push_back({{"config", config_json(row.config)},
                         {"ns", row.time_taken_ns},
                         {"coordesc", row.found_by_coordesc},
                         {"triton", row.triton_cache_hash ? Json(*row.triton_cache_hash) : Json()},
                         {"warp", row.has_warp_spec}});
    }
    const Json expected = run_python(std::string(k_inductor) + R"(
print(json.dumps([json.dumps(save_data(make(r["config"]), ")" +
                                         hash + R"(", r["ns"],
                                       r["coordesc"], r["triton"], r["warp"]))
                  for r in json.load(open(sys.argv[1]))]))
)",
                                     input);
    REQUIRE(expected.size() == rows.size());
    for (std::size_t i = 0; i < rows.size(); ++i) {
        const auto& row = rows[i];
        INFO("row " << i);
        const auto best =
            make_best_config(row.config, hash, row.time_taken_ns, row.found_by_coordesc,
                             row.triton_cache_hash, row.has_warp_spec);
        const auto text = best.to_json();
        CHECK(text == expected[i].get<std::string>());
        // And back: the record reads as written and writes the same bytes,
        // except that colliding kwargs (row 4) cannot survive the trip.
        auto parsed = BestConfig::from_json(text);
        REQUIRE(parsed);
        if (i != 4) {
            CHECK(parsed->to_json() == text);
            CHECK(*parsed == best);
        }
    }
}

TEST_CASE("BestConfig::from_json reads optional fields and rejects malformed records",
          "[proto][autotune]") {
    const auto minimal = BestConfig::from_json(
        R"({"num_warps": 4, "XBLOCK": 8, "num_stages": 1, "configs_hash": "h"})");
    REQUIRE(minimal);
    CHECK(minimal->kwargs == Kwargs{{"XBLOCK", 8}});
    CHECK(minimal->num_warps == 4);
    CHECK(minimal->num_stages == 1);
    CHECK_FALSE(minimal->found_by_coordesc);
    CHECK(minimal->time_taken_ms == 0);
    CHECK_FALSE(minimal->triton_cache_hash);
    CHECK_FALSE(minimal->num_consumer_groups);

    const auto full = BestConfig::from_json(
        R"({"XBLOCK": 8, "num_warps": 4, "num_stages": 1, "configs_hash": "h",
            "found_by_coordesc": true, "time_taken_ms": 12, "triton_cache_hash": "t",
            "num_consumer_groups": 1, "num_buffers_warp_spec": 2})");
    REQUIRE(full);
    CHECK(full->found_by_coordesc);
    CHECK(full->time_taken_ms == 12);
    CHECK(full->triton_cache_hash == "t");
    CHECK(full->num_consumer_groups == 1);
    CHECK(full->num_buffers_warp_spec == 2);

    const std::vector<std::pair<std::string, std::string>> bad = {
        {"not json", "must be JSON"},
        {"[1, 2]", "a JSON object, not array"},
        {"\"text\"", "not string"},
        {R"({"num_stages": 1, "configs_hash": "h"})", "\"num_warps\" is missing"},
        {R"({"num_warps": 4, "configs_hash": "h"})", "\"num_stages\" is missing"},
        {R"({"num_warps": 4, "num_stages": 1})", "\"configs_hash\" is missing"},
        {R"({"num_warps": "4", "num_stages": 1, "configs_hash": "h"})",
         "\"num_warps\" must be a 64-bit integer, not string"},
        {R"({"num_warps": true, "num_stages": 1, "configs_hash": "h"})", "not boolean"},
        {R"({"num_warps": 4, "num_stages": 1.5, "configs_hash": "h"})", "not number"},
        {R"({"num_warps": 18446744073709551615, "num_stages": 1, "configs_hash": "h"})",
         "\"num_warps\" is out of range"},
        {R"({"num_warps": 4, "num_stages": 1, "configs_hash": 7})",
         "\"configs_hash\" must be a string, not integer"},
        {R"({"num_warps": 4, "num_stages": 1, "configs_hash": "h", "found_by_coordesc": 1})",
         "\"found_by_coordesc\" must be a boolean"},
        {R"({"num_warps": 4, "num_stages": 1, "configs_hash": "h", "time_taken_ms": "1"})",
         "\"time_taken_ms\" must be a 64-bit integer"},
        {R"({"num_warps": 4, "num_stages": 1, "configs_hash": "h", "triton_cache_hash": 5})",
         "\"triton_cache_hash\" must be a string or null"},
        {R"({"num_warps": 4, "num_stages": 1, "configs_hash": "h", "num_consumer_groups": null})",
         "\"num_consumer_groups\" must be a 64-bit integer, not null"},
        {R"({"num_warps": 4, "num_stages": 1, "configs_hash": "h", "num_buffers_warp_spec": []})",
         "\"num_buffers_warp_spec\" must be a 64-bit integer, not array"},
    };
    for (const auto& [text, message] : bad) {
        INFO(text);
        const auto parsed = BestConfig::from_json(text);
        REQUIRE_FALSE(parsed);
        CHECK_THAT(parsed.error(), Catch::Contains(message));
    }
}
