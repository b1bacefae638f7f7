// SPDX-License-Identifier: MIT
//
// client/cli/autotune_format.cpp: best-configs and bundles as text.
#include "client/cli/autotune_format.hpp"

#include <catch2/catch.hpp>

using namespace pt2cache::client::cli;
using pt2cache::proto::autotune::BestConfig;

namespace {

constexpr const char* k_record =
    R"({"XBLOCK": 64, "R0_BLOCK": 8, "num_warps": 4, "num_stages": 1, "configs_hash": "abc", )"
    R"("found_by_coordesc": false, "time_taken_ms": 12, "triton_cache_hash": null})";

} // namespace

TEST_CASE("render_kwargs writes values as Python's repr", "[cli][format][autotune]") {
    CHECK(render_kwargs({}) == "(none)");
    CHECK(render_kwargs({{"XBLOCK", 64}, {"ratio", 0.5}, {"flag", true}, {"name", "x"}}) ==
          "XBLOCK=64, ratio=0.5, flag=True, name='x'");
}

TEST_CASE("render_best_config: one field a line", "[cli][format][autotune]") {
    auto config = BestConfig::from_json(k_record);
    REQUIRE(config);
    CHECK(render_best_config(*config, "  ") == "  kwargs             XBLOCK=64, R0_BLOCK=8\n"
                                               "  num_warps          4\n"
                                               "  num_stages         1\n"
                                               "  configs_hash       abc\n"
                                               "  found_by_coordesc  no\n"
                                               "  time_taken_ms      12 ms\n"
                                               "  triton_cache_hash  (none)\n");
    config->found_by_coordesc = true;
    config->triton_cache_hash = "ff00";
    config->num_consumer_groups = 2;
    config->num_buffers_warp_spec = 3;
    CHECK(render_best_config(*config) == "kwargs                 XBLOCK=64, R0_BLOCK=8\n"
                                         "num_warps              4\n"
                                         "num_stages             1\n"
                                         "configs_hash           abc\n"
                                         "found_by_coordesc      yes\n"
                                         "time_taken_ms          12 ms\n"
                                         "triton_cache_hash      ff00\n"
                                         "num_consumer_groups    2\n"
                                         "num_buffers_warp_spec  3\n");
}

TEST_CASE("render_bundle: every entry, bad ones as JSON", "[cli][format][autotune]") {
    const std::string bundle =
        std::string(R"({"a.best_config": )") + k_record + R"(, "b.best_config": [1, "\n"]})";
    const auto shown = render_bundle("k", bundle);
    REQUIRE_FALSE(shown.error);
    CHECK(shown.text == "bundle k: 2 best-configs, 12 ms of autotuning\n"
                        "\n"
                        "a.best_config\n"
                        "  kwargs             XBLOCK=64, R0_BLOCK=8\n"
                        "  num_warps          4\n"
                        "  num_stages         1\n"
                        "  configs_hash       abc\n"
                        "  found_by_coordesc  no\n"
                        "  time_taken_ms      12 ms\n"
                        "  triton_cache_hash  (none)\n"
                        "\n"
                        "b.best_config\n"
                        "  not a best-config (a best-config is a JSON object, not array):\n"
                        "  [1, \"\\n\"]\n");
    CHECK(render_bundle("k", "{}").text == "bundle k: 0 best-configs, 0 ms of autotuning\n");
    CHECK(render_bundle("k", "{").error == "bundle k is not valid JSON");
    CHECK(render_bundle("k", "[]").error == "bundle k is a JSON array, not an object");
}

TEST_CASE("bundle ls rows", "[cli][format][autotune]") {
    CHECK(count_bundle_entries(R"({"a": 1, "b": 2})") == 2);
    CHECK(count_bundle_entries("{}") == 0);
    CHECK(count_bundle_entries("[1]") == -1);
    CHECK(count_bundle_entries("nope") == -1);
    const auto text =
        render_bundle_rows({{"kk", 2048, 0, 3}, {"bad", 2, 0, -1}, {"gone", 10, 0, std::nullopt}});
    const auto first_line = text.substr(0, text.find('\n'));
    CHECK(first_line == "KEY   ENTRIES        SIZE  MODIFIED");
    CHECK(text.find("kk          3     2.0 KiB  ") != std::string::npos);
    CHECK(text.find("bad   invalid         2 B  ") != std::string::npos);
    CHECK(text.find("gone     gone        10 B  ") != std::string::npos);
}
