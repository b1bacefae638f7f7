// SPDX-License-Identifier: MIT
//
// The seed variables and the rules that tie switches together.
#include "config/config.hpp"
#include "tests/config/helpers.hpp"

#include <catch2/catch.hpp>
#include <fmt/core.h>

using namespace pt2cache::config;
using pt2cache::tests::check_origin;
using pt2cache::tests::ConfigFixture;
using pt2cache::tests::Vars;

TEST_CASE("seed variables: \"1\" enables, anything else disables", "[config][load][seed]") {
    struct Switch {
        std::string env;
        std::string key;
        bool Config::*field;
    };
    const Switch switches[] = {
        {"TORCHINDUCTOR_FX_GRAPH_CACHE", "caches.fx_graph_cache", &Config::fx_graph_cache},
        {"TORCHINDUCTOR_AUTOGRAD_CACHE", "caches.autograd_cache", &Config::autograd_cache},
        {"TORCHINDUCTOR_FORCE_DISABLE_CACHES", "caches.force_disable_caches",
         &Config::force_disable_caches},
        {"TORCH_COMPILE_FORCE_DISABLE_CACHES", "caches.force_disable_caches",
         &Config::force_disable_caches},
        {"TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE", "remote.fx_graph", &Config::fx_graph_remote_cache},
        {"TORCHINDUCTOR_AUTOTUNE_REMOTE_CACHE", "remote.autotune", &Config::autotune_remote_cache},
        {"TORCHINDUCTOR_BUNDLED_AUTOTUNE_REMOTE_CACHE", "remote.bundled_autotune",
         &Config::bundled_autotune_remote_cache},
        {"TORCH_DYNAMO_AUTOMATIC_DYNAMIC_REMOTE_PGO", "remote.pgo", &Config::pgo_remote_cache},
    };
    ConfigFixture fixture;
    for (const auto& s : switches) {
        auto dot = s.key.find('.');
        std::string section = s.key.substr(0, dot);
        std::string name = s.key.substr(dot + 1);
        for (std::string text : {"0", "true", "yes", "on", "2", " 1", "1 ", "TRUE", "01"}) {
            INFO(s.env << "=" << text);
            // The file turns the switch on; the environment must turn it off.
            auto loaded =
                fixture.load(fmt::format("[{}]\n{} = true\n", section, name), {{s.env, text}});
            REQUIRE(loaded);
            CHECK_FALSE(loaded->config.*s.field);
            check_origin(*loaded, s.key, Source::environment, s.env);
        }
        INFO(s.env << "=1");
        auto loaded =
            fixture.load(fmt::format("[{}]\n{} = false\n", section, name), {{s.env, "1"}});
        REQUIRE(loaded);
        CHECK(loaded->config.*s.field);
        check_origin(*loaded, s.key, Source::environment, s.env);
    }
}

TEST_CASE("TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE follows the seed rule", "[config][load][seed]") {
    ConfigFixture fixture;
    Vars on = {{"TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE", "1"},
               {"TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE", "1"}};
    auto enabled = fixture.load("", on);
    REQUIRE(enabled);
    CHECK(enabled->config.autograd_remote_cache);
    CHECK(enabled->warnings.empty());
    for (std::string text : {"0", "true", "yes"}) {
        INFO(text);
        auto loaded = fixture.load("[remote]\nautograd = true\nfx_graph = true\n",
                                   {{"TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE", text}});
        REQUIRE(loaded);
        CHECK_FALSE(loaded->config.autograd_remote_cache);
        CHECK(loaded->config.fx_graph_remote_cache);
        CHECK(loaded->warnings.empty());
    }
}

TEST_CASE("either force-disable variable set to 1 wins", "[config][load][seed]") {
    ConfigFixture fixture;
    auto loaded = fixture.load("", {{"TORCHINDUCTOR_FORCE_DISABLE_CACHES", "0"},
                                    {"TORCH_COMPILE_FORCE_DISABLE_CACHES", "1"}});
    REQUIRE(loaded);
    CHECK(loaded->config.force_disable_caches);
    check_origin(*loaded, "caches.force_disable_caches", Source::environment,
                 "TORCH_COMPILE_FORCE_DISABLE_CACHES");

    auto both_off = fixture.load("", {{"TORCHINDUCTOR_FORCE_DISABLE_CACHES", "0"},
                                      {"TORCH_COMPILE_FORCE_DISABLE_CACHES", "no"}});
    REQUIRE(both_off);
    CHECK_FALSE(both_off->config.force_disable_caches);
    check_origin(*both_off, "caches.force_disable_caches", Source::environment,
                 "TORCHINDUCTOR_FORCE_DISABLE_CACHES");
}

TEST_CASE("autograd_cache is forced off when fx_graph_cache is off", "[config][load][rules]") {
    ConfigFixture fixture;
    SECTION("by the environment") {
        auto loaded = fixture.load(
            "", {{"TORCHINDUCTOR_FX_GRAPH_CACHE", "0"}, {"TORCHINDUCTOR_AUTOGRAD_CACHE", "1"}});
        REQUIRE(loaded);
        CHECK_FALSE(loaded->config.fx_graph_cache);
        CHECK_FALSE(loaded->config.autograd_cache);
        REQUIRE(loaded->warnings.size() == 1);
        CHECK(loaded->warnings[0] ==
              "autograd_cache is off because fx_graph_cache is off "
              "(TORCHINDUCTOR_FX_GRAPH_CACHE=0): AOTAutograd entries need FX graph entries");
        check_origin(*loaded, "caches.autograd_cache", Source::environment,
                     "TORCHINDUCTOR_FX_GRAPH_CACHE");
    }
    SECTION("by the file, autograd left at its default") {
        auto loaded = fixture.load("[caches]\nfx_graph_cache = false\n");
        REQUIRE(loaded);
        CHECK_FALSE(loaded->config.autograd_cache);
        REQUIRE(loaded->warnings.size() == 1);
        CHECK(loaded->warnings[0] ==
              fmt::format("autograd_cache is off because fx_graph_cache is off (set in {}): "
                          "AOTAutograd entries need FX graph entries",
                          fixture.file_path()));
    }
    SECTION("by a flag") {
        auto loaded = fixture.load("", {}, {{"caches.fx_graph_cache", "false"}});
        REQUIRE(loaded);
        CHECK_FALSE(loaded->config.autograd_cache);
        REQUIRE(loaded->warnings.size() == 1);
        CHECK(loaded->warnings[0] ==
              "autograd_cache is off because fx_graph_cache is off (set on the command line): "
              "AOTAutograd entries need FX graph entries");
    }
    SECTION("no warning when autograd_cache is off anyway") {
        auto loaded = fixture.load("[caches]\nfx_graph_cache = false\nautograd_cache = false\n");
        REQUIRE(loaded);
        CHECK_FALSE(loaded->config.autograd_cache);
        CHECK(loaded->warnings.empty());
    }
}

TEST_CASE("remote autograd is forced off when remote fx_graph is off", "[config][load][rules]") {
    ConfigFixture fixture;
    SECTION("fx_graph off by default") {
        auto loaded = fixture.load("", {{"TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE", "1"}});
        REQUIRE(loaded);
        CHECK_FALSE(loaded->config.autograd_remote_cache);
        CHECK_FALSE(loaded->config.remote_enabled);
        REQUIRE(loaded->warnings.size() == 1);
        CHECK(loaded->warnings[0] ==
              "remote.autograd is off because remote.fx_graph is off (default): remote "
              "AOTAutograd entries need remote FX graph entries");
        check_origin(*loaded, "remote.autograd", Source::default_value, "");
    }
    SECTION("fx_graph off in the environment") {
        auto loaded = fixture.load("[remote]\nfx_graph = true\nautograd = true\n",
                                   {{"TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE", "yes"}});
        REQUIRE(loaded);
        CHECK_FALSE(loaded->config.autograd_remote_cache);
        REQUIRE(loaded->warnings.size() == 1);
        CHECK(loaded->warnings[0] ==
              "remote.autograd is off because remote.fx_graph is off "
              "(TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE=yes): remote AOTAutograd entries need "
              "remote FX graph entries");
    }
    SECTION("both local and remote") {
        auto loaded = fixture.load("", {{"TORCHINDUCTOR_FX_GRAPH_CACHE", "false"},
                                        {"TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE", "1"}});
        REQUIRE(loaded);
        CHECK(loaded->warnings.size() == 2);
    }
}

TEST_CASE("remote_enabled follows the five remote switches", "[config][load][rules]") {
    ConfigFixture fixture;
    for (std::string env :
         {"TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE", "TORCHINDUCTOR_AUTOTUNE_REMOTE_CACHE",
          "TORCHINDUCTOR_BUNDLED_AUTOTUNE_REMOTE_CACHE",
          "TORCH_DYNAMO_AUTOMATIC_DYNAMIC_REMOTE_PGO"}) {
        INFO(env);
        auto loaded = fixture.load("", {{env, "1"}});
        REQUIRE(loaded);
        CHECK(loaded->config.remote_enabled);
    }
    auto off = fixture.load("[remote]\npgo = true\n",
                            {{"TORCH_DYNAMO_AUTOMATIC_DYNAMIC_REMOTE_PGO", "0"}});
    REQUIRE(off);
    CHECK_FALSE(off->config.remote_enabled);
}
