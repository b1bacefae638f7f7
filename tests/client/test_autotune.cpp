// SPDX-License-Identifier: MIT
//
// client::AutotuneCache against the real pt2cached: the keys and bytes it
// stores are Inductor's (checked with python3's hashlib and json), read_best
// reads local then remote and selects as _load_cached_autotuning, and an
// absent daemon is a miss.
#include <string>
#include <vector>

#include "client/autotune.hpp"
#include "tests/client/autotune_oracle.hpp"
#include "tests/client/helpers.hpp"

#include <catch2/catch.hpp>

using namespace pt2cache;
using client::AutotuneCache;
using client::AutotuneSettings;
using client::TritonConfig;
using tests::DaemonProcess;
using tests::triton_config;
using Json = nlohmann::ordered_json;

namespace {

std::vector<TritonConfig> candidates() {
    return {
        triton_config({{"XBLOCK", 64}, {"R0_BLOCK", 8}}, 4, 1),
        triton_config({{"XBLOCK", 128}, {"R0_BLOCK", 8}}, 8, 1),
        triton_config({{"XBLOCK", 256}, {"R0_BLOCK", 4}}, 8, 2),
    };
}

AutotuneSettings settings_for(const std::vector<TritonConfig>& configs) {
    AutotuneSettings settings;
    settings.torch_key = tests::fake_torch_key();
    settings.backend_hash = "B1F2C3D4E5-cuda-sm90";
    settings.cache_key_tag = "tag-\xc3\xa9"; // é
    settings.configs_hash = client::configs_hash(configs);
    settings.filename = "/tmp/torchinductor_u/c7/cc7xkqzfkp3xv4ab.py";
    return settings;
}

std::string text_of(const client::Bytes& bytes) {
    return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

// The value of `key` in namespace autotune, or "" on a miss.
std::string stored(client::Client& client, const std::string& key) {
    auto value = client.get("autotune", key);
    REQUIRE(value);
    return *value ? text_of(**value) : std::string();
}

void put_text(client::Client& client, const std::string& key, std::string_view text) {
    auto ok = client.put("autotune", key, tests::bytes_of(text));
    INFO((ok ? std::string() : tests::describe(ok.error())));
    REQUIRE(ok);
}

} // namespace

TEST_CASE("AutotuneCache keys and configs_hash equal Inductor's (python3 hashlib)", "[autotune]") {
    client::Client client(client::Options{"/nonexistent/pt2cache.sock"});
    const auto configs = candidates();
    auto settings = settings_for(configs);
    SECTION("no tag, a bare file name") {
        settings.cache_key_tag.clear();
        settings.filename = "kernel.py";
    }
    SECTION("a tag and a path") {}
    AutotuneCache cache(client, settings);
    const auto inductor = tests::inductor_answer(settings, configs);
    CHECK(settings.configs_hash == inductor.configs_hash);
    CHECK(cache.prepared_key() == inductor.prepared);
    CHECK(cache.local_key() == inductor.local);
    CHECK(cache.remote_key() == inductor.remote);

    settings.local_cache = false;
    settings.remote_cache = false;
    AutotuneCache off(client, settings);
    CHECK(off.local_key().empty());
    CHECK(off.remote_key().empty());
}

TEST_CASE("save writes Inductor's bytes under the local and remote keys", "[autotune]") {
    PT2CACHE_REQUIRE_DAEMON();
    DaemonProcess daemon;
    client::Client client(tests::options_for(daemon));
    const auto configs = candidates();
    auto settings = settings_for(configs);
    std::vector<tests::SaveArgs> saves = {
        {configs[1], 1'234'567'890, false, std::nullopt},
        {triton_config({{"XBLOCK", 32}, {"YBLOCK", 0.5}, {"name", "\xe2\x82\xac"}}, 2, 3), 999'999,
         true, "0123abcd"},
    };
    const auto inductor = tests::inductor_answer(settings, configs, saves);
    REQUIRE(inductor.saves.size() == saves.size());
    for (std::size_t i = 0; i < saves.size(); ++i) {
        AutotuneCache cache(client, settings);
        const auto& save = saves[i];
        auto ok = cache.save(save.config, save.time_taken_ns, save.found_by_coordesc,
                             save.triton_cache_hash);
        INFO((ok ? std::string() : tests::describe(ok.error())));
        REQUIRE(ok);
        CHECK_FALSE(cache.last_error());
        CHECK(stored(client, inductor.local) == inductor.saves[i]);
        CHECK(stored(client, inductor.remote) == inductor.saves[i]);
    }

    SECTION("only the enabled entries are written") {
        REQUIRE(client.remove("autotune", inductor.local));
        REQUIRE(client.remove("autotune", inductor.remote));
        settings.local_cache = false;
        REQUIRE(AutotuneCache(client, settings).save(configs[0], 0));
        CHECK(stored(client, inductor.local).empty());
        CHECK_FALSE(stored(client, inductor.remote).empty());
        settings.local_cache = true;
        settings.remote_cache = false;
        REQUIRE(client.remove("autotune", inductor.remote));
        REQUIRE(AutotuneCache(client, settings).save(configs[0], 0));
        CHECK_FALSE(stored(client, inductor.local).empty());
        CHECK(stored(client, inductor.remote).empty());
    }
}

TEST_CASE("read_best selects as _load_cached_autotuning", "[autotune]") {
    PT2CACHE_REQUIRE_DAEMON();
    DaemonProcess daemon;
    client::Client client(tests::options_for(daemon));
    auto configs = candidates();
    auto settings = settings_for(configs);
    AutotuneCache writer(client, settings);

    SECTION("nothing stored: a miss") {
        AutotuneCache reader(client, settings);
        CHECK_FALSE(reader.read_best(configs));
        CHECK_FALSE(reader.last_error());
    }
    SECTION("the one matching candidate") {
        REQUIRE(writer.save(configs[1], 5'000'000));
        const auto best = AutotuneCache(client, settings).read_best(configs);
        REQUIRE(best);
        CHECK(*best == configs[1]);
        CHECK_FALSE(best->found_by_coordesc);
    }
    SECTION("no candidate matches: the stored config, rebuilt (torch 2.15)") {
        const auto added = triton_config({{"XBLOCK", 64}, {"R0_BLOCK", 8}}, 4, 2);
        REQUIRE(writer.save(added, 0));
        const auto best = AutotuneCache(client, settings).read_best(configs);
        REQUIRE(best);
        CHECK(*best == added);
        CHECK_FALSE(best->found_by_coordesc);
    }
    SECTION("two candidates match: the stored config, rebuilt") {
        REQUIRE(writer.save(configs[0], 0));
        auto doubled = configs;
        doubled.push_back(configs[0]);
        CHECK(AutotuneCache(client, settings).read_best(doubled) == configs[0]);
    }
    SECTION("extra_options are saved and come back") {
        auto tuned = configs[1];
        tuned.extra_options = {{"maxnreg", 128}};
        REQUIRE(writer.save(tuned, 0));
        CHECK(AutotuneCache(client, settings).read_best(configs) == tuned);
    }
    SECTION("another configs_hash: a miss") {
        auto other = settings;
        other.configs_hash = std::string(64, 'f');
        other.remote_cache = false; // the remote key includes configs_hash
        REQUIRE(AutotuneCache(client, other).save(configs[0], 0));
        CHECK_FALSE(AutotuneCache(client, settings).read_best(configs));
    }
    SECTION("found by coordinate descent: the stored config itself") {
        const auto tuned = triton_config({{"XBLOCK", 96}, {"R0_BLOCK", 8}}, 4, 1);
        REQUIRE(writer.save(tuned, 7'000'000, true, "hash"));
        auto coordesc = settings;
        coordesc.coordinate_descent_tuning = true;
        const auto best = AutotuneCache(client, coordesc).read_best(configs);
        REQUIRE(best);
        CHECK(best->kwargs == tuned.kwargs);
        CHECK(best->num_warps == 4);
        CHECK(best->num_stages == 1);
        CHECK(best->found_by_coordesc);
        // Without coordinate descent it matches no candidate: rebuilt, but
        // not as found by coordinate descent.
        const auto plain = AutotuneCache(client, settings).read_best(configs);
        REQUIRE(plain);
        CHECK(plain->kwargs == tuned.kwargs);
        CHECK_FALSE(plain->found_by_coordesc);
    }
    SECTION("coordinate descent on, not found by it: a candidate") {
        REQUIRE(writer.save(configs[2], 0, false));
        auto coordesc = settings;
        coordesc.coordinate_descent_tuning = true;
        const auto best = AutotuneCache(client, coordesc).read_best(configs);
        REQUIRE(best);
        CHECK(*best == configs[2]);
    }
}

TEST_CASE("read_best reads the local entry first, then the remote one", "[autotune]") {
    PT2CACHE_REQUIRE_DAEMON();
    DaemonProcess daemon;
    client::Client client(tests::options_for(daemon));
    const auto configs = candidates();
    const auto settings = settings_for(configs);
    AutotuneCache cache(client, settings);
    const auto record = [&](const TritonConfig& config) {
        return cache.best_config(config, 0).to_json();
    };
    put_text(client, cache.local_key(), record(configs[0]));
    put_text(client, cache.remote_key(), record(configs[1]));

    CHECK(cache.read_best(configs) == configs[0]);
    SECTION("no local entry: the remote one") {
        REQUIRE(client.remove("autotune", cache.local_key()));
        CHECK(cache.read_best(configs) == configs[1]);
    }
    SECTION("a local entry that is not a non-empty object: the remote one") {
        const auto text = GENERATE(as<std::string>{}, "{}", "[1, 2]", "null", "not json", "");
        put_text(client, cache.local_key(), text);
        CHECK(cache.read_best(configs) == configs[1]);
        CHECK(cache.read() == Json::parse(record(configs[1])));
    }
    SECTION("a local record no candidate matches is rebuilt; the remote one is not read") {
        const auto added = triton_config({{"XBLOCK", 1}, {"R0_BLOCK", 1}}, 1, 1);
        put_text(client, cache.local_key(), record(added));
        CHECK(cache.read_best(configs) == added);
    }
    SECTION("the local cache off: the remote one") {
        auto remote_only = settings;
        remote_only.local_cache = false;
        CHECK(AutotuneCache(client, remote_only).read_best(configs) == configs[1]);
    }
    SECTION("the remote cache off: only the local one") {
        auto local_only = settings;
        local_only.remote_cache = false;
        REQUIRE(client.remove("autotune", cache.local_key()));
        CHECK_FALSE(AutotuneCache(client, local_only).read_best(configs));
    }
}

TEST_CASE("an absent daemon: read_best misses and save does nothing", "[autotune]") {
    client::Options options;
    options.socket_path = "/nonexistent/pt2cache.sock";
    client::Client client(options);
    const auto configs = candidates();
    auto settings = settings_for(configs);
    settings.bundle_token = 42;
    AutotuneCache cache(client, settings);
    CHECK_FALSE(cache.read_best(configs));
    REQUIRE(cache.last_error());
    CHECK(cache.last_error()->kind == client::ErrorKind::unreachable);
    auto saved = cache.save(configs[0], 1'000'000, false, "hash");
    REQUIRE_FALSE(saved);
    CHECK(saved.error().kind == client::ErrorKind::unreachable);
    CHECK(cache.bundle_token() == 42u); // kept: the token was not the problem
}

TEST_CASE("configs travel as JSON", "[autotune]") {
    auto config = triton_config({{"XBLOCK", 64}, {"ratio", 0.25}, {"flag", true}}, 8, 2);
    config.num_consumer_groups = 2;
    config.found_by_coordesc = true;
    const auto text = client::config_to_json(config);
    CHECK(text == R"({"kwargs": {"XBLOCK": 64, "ratio": 0.25, "flag": true}, "num_warps": 8, )"
                  R"("num_stages": 2, "num_consumer_groups": 2, "num_buffers_warp_spec": 0, )"
                  R"("found_by_coordesc": true})");
    CHECK(client::config_from_json(text) == config);

    const auto defaults = client::config_from_json(R"({"kwargs": {"XBLOCK": 8}})");
    REQUIRE(defaults);
    CHECK(defaults->num_warps == 4);
    CHECK(defaults->num_stages == 3);
    CHECK(client::config_from_json("{}").has_value());

    for (const char* bad :
         {"[]", "{", R"({"kwargs": []})", R"({"num_warps": 4.0})", R"({"num_warps": "4"})",
          R"({"found_by_coordesc": 1})", R"({"XBLOCK": 8})"}) {
        INFO(bad);
        CHECK_FALSE(client::config_from_json(bad));
    }
    const auto list = client::configs_from_json(R"([{"kwargs": {"X": 1}}, {"num_warps": 2}])");
    REQUIRE(list);
    CHECK(list->size() == 2);
    CHECK(client::configs_from_json("[]").value().empty());
    CHECK_FALSE(client::configs_from_json(R"({"kwargs": {}})"));
    const auto bad_item = client::configs_from_json(R"([{}, {"num_stages": null}])");
    REQUIRE_FALSE(bad_item);
    CHECK(bad_item.error().find("candidate 1") != std::string::npos);
}
