// SPDX-License-Identifier: MIT
// autotune::select, branch by branch, against a table and against Inductor's
// _load_cached_autotuning run by python3 on the same rows.
#include <string>
#include <vector>

#include "proto/autotune.hpp"
#include "tests/proto/inductor_oracle.hpp"
#include "tests/proto/python_oracle.hpp"

#include <catch2/catch.hpp>

using namespace pt2cache::proto::autotune;
using pt2cache::tests::config;
using pt2cache::tests::config_json;
using pt2cache::tests::k_inductor;
using pt2cache::tests::run_python;
using Json = nlohmann::ordered_json;

namespace {

const std::string k_hash(64, 'h');

// A record as AutotuneCache.save writes it for candidate A below.
Json stored(std::initializer_list<std::pair<const char*, Json>> changes = {}) {
    Json best = {{"XBLOCK", 8},
                 {"R0_BLOCK", 64},
                 {"num_warps", 8},
                 {"num_stages", 1},
                 {"configs_hash", k_hash},
                 {"found_by_coordesc", false},
                 {"time_taken_ms", 5},
                 {"triton_cache_hash", nullptr}};
    for (const auto& [key, value] : changes) {
        if (value.is_discarded()) {
            best.erase(key);
        } else {
            best[key] = value;
        }
    }
    return best;
}

const Json k_erase(Json::value_t::discarded);

// The stored config rebuilt (_reconstruct_triton_config); `restored` for
// coordinate descent, `rebuilt` for a config no single candidate matches.
TritonConfig rebuilt(Kwargs kwargs, std::int64_t warps, std::int64_t stages,
                     std::int64_t groups = 0, std::int64_t buffers = 0) {
    auto c = config(std::move(kwargs), warps, stages);
    c.num_consumer_groups = groups;
    c.num_buffers_warp_spec = buffers;
    return c;
}

TritonConfig restored(Kwargs kwargs, std::int64_t warps, std::int64_t stages,
                      std::int64_t groups = 0, std::int64_t buffers = 0) {
    auto c = rebuilt(std::move(kwargs), warps, stages, groups, buffers);
    c.found_by_coordesc = true;
    return c;
}

TritonConfig with_extra(TritonConfig c, Json extra) {
    c.extra_options = std::move(extra);
    return c;
}

struct Row {
    std::string name;
    Json best;
    std::vector<TritonConfig> candidates;
    bool coordesc = false;
    bool warp_spec = true;
    std::optional<TritonConfig> expected;
    // Inductor returns a config where select() reports a miss (a stored
    // num_warps that is not an integer cannot make a TritonConfig).
    bool inductor_differs = false;
};

} // namespace

TEST_CASE("select follows _load_cached_autotuning branch by branch", "[proto][autotune]") {
    const auto a = config({{"XBLOCK", 8}, {"R0_BLOCK", 64}}, 8, 1);
    const auto b = config({{"XBLOCK", 1}, {"R0_BLOCK", 2048}}, 4, 1);
    const auto c = config({{"XBLOCK", 8}, {"R0_BLOCK", 64}}, 4, 1);
    const std::vector<TritonConfig> abc = {a, b, c};
    const auto flag = config({{"FLAG", 1}, {"XBLOCK", 8}}, 8, 1);
    const auto with_null = config({{"XBLOCK", 8}, {"EXTRA", nullptr}}, 8, 1);
    const auto x_only = config({{"XBLOCK", 8}}, 8, 1);
    const Kwargs ab_kwargs = {{"XBLOCK", 8}, {"R0_BLOCK", 64}};
    const Json found = true;
    const Json extra = {{"maxnreg", 128}};

    const std::vector<Row> rows = {
        {"one candidate matches", stored(), abc, false, true, a},
        {"not an object", Json::array({1}), abc, false, true, std::nullopt},
        {"configs_hash missing", stored({{"configs_hash", k_erase}}), abc, false, true,
         std::nullopt},
        {"configs_hash differs", stored({{"configs_hash", "other"}}), abc, false, true,
         std::nullopt},
        {"configs_hash not a string", stored({{"configs_hash", 5}}), abc, false, true,
         std::nullopt},
        {"no candidate matches: the stored config rebuilt", stored({{"XBLOCK", 16}}), abc, false,
         true, rebuilt({{"XBLOCK", 16}, {"R0_BLOCK", 64}}, 8, 1)},
        {"num_warps differs", stored({{"num_warps", 2}}), abc, false, true,
         rebuilt(ab_kwargs, 2, 1)},
        {"num_stages differs", stored({{"num_stages", 3}}), abc, false, true,
         rebuilt(ab_kwargs, 8, 3)},
        {"num_warps absent (Inductor raises KeyError)", stored({{"num_warps", k_erase}}), abc,
         false, true, std::nullopt},
        {"two candidates match", stored(), {a, b, a}, false, true, rebuilt(ab_kwargs, 8, 1)},
        {"no candidates", stored(), {}, false, true, rebuilt(ab_kwargs, 8, 1)},
        {"rebuilt without HAS_WARP_SPEC",
         stored({{"num_consumer_groups", 2}}),
         {},
         false,
         false,
         rebuilt({{"XBLOCK", 8}, {"R0_BLOCK", 64}, {"num_consumer_groups", 2}}, 8, 1)},
        {"rebuilt: num_warps not an integer", stored({{"num_warps", "8"}}), abc, false, true,
         std::nullopt, true},
        {"extra_options go with the candidate", stored({{"extra_options", extra}}), abc, false,
         true, with_extra(a, extra)},
        {"falsy extra_options too", stored({{"extra_options", Json::object()}}), abc, false, true,
         with_extra(a, Json::object())},
        {"extra_options go with a rebuilt config",
         stored({{"extra_options", extra}, {"XBLOCK", 16}}), abc, false, true,
         with_extra(rebuilt({{"XBLOCK", 16}, {"R0_BLOCK", 64}}, 8, 1), extra)},
        {"coordesc: extra_options are not a kwarg",
         stored({{"found_by_coordesc", found}, {"extra_options", extra}}),
         {},
         true,
         true,
         with_extra(restored(ab_kwargs, 8, 1), extra)},
        {"numbers compare by value", stored({{"XBLOCK", 8.0}, {"num_warps", 8.0}}), abc, false,
         true, a},
        {"true equals 1", stored({{"FLAG", true}}), {flag, b}, false, true, flag},
        {"1.5 equals no integer", stored({{"XBLOCK", 8.5}}), abc, false, true,
         rebuilt({{"XBLOCK", 8.5}, {"R0_BLOCK", 64}}, 8, 1)},
        {"an absent kwarg equals null", stored(), {with_null, b}, false, true, with_null},
        {"stored members no candidate names are ignored",
         stored(),
         {x_only, b},
         false,
         true,
         x_only},
        {"coordesc: the stored config as is",
         stored({{"found_by_coordesc", found}}),
         {},
         true,
         true,
         restored(ab_kwargs, 8, 1)},
        {"coordesc: warp-spec fields",
         stored({{"found_by_coordesc", found},
                 {"num_consumer_groups", 2},
                 {"num_buffers_warp_spec", 3}}),
         abc, true, true, restored(ab_kwargs, 8, 1, 2, 3)},
        {"coordesc without HAS_WARP_SPEC: warp-spec fields stay kwargs",
         stored({{"found_by_coordesc", found},
                 {"num_consumer_groups", 2},
                 {"num_buffers_warp_spec", 3}}),
         abc, true, false,
         restored({{"XBLOCK", 8},
                   {"R0_BLOCK", 64},
                   {"num_consumer_groups", 2},
                   {"num_buffers_warp_spec", 3}},
                  8, 1)},
        {"coordesc: unknown members become kwargs",
         stored({{"found_by_coordesc", found}, {"EXTRA", Json::array({1})}}),
         {},
         true,
         true,
         restored({{"XBLOCK", 8}, {"R0_BLOCK", 64}, {"EXTRA", Json::array({1})}}, 8, 1)},
        {"coordesc: a truthy found_by_coordesc",
         stored({{"found_by_coordesc", 1}}),
         {},
         true,
         true,
         restored(ab_kwargs, 8, 1)},
        {"coordesc: found_by_coordesc absent", stored({{"found_by_coordesc", k_erase}}), abc, true,
         true, a},
        {"coordesc on, not found by coordesc: candidates", stored(), abc, true, true, a},
        {"coordesc on, a falsy found_by_coordesc: candidates", stored({{"found_by_coordesc", ""}}),
         abc, true, true, a},
        {"found by coordesc, coordesc off: candidates", stored({{"found_by_coordesc", found}}), abc,
         false, true, a},
        {"found by coordesc, coordesc off, no candidate: rebuilt, not as coordesc",
         stored({{"found_by_coordesc", found}, {"XBLOCK", 16}}), abc, false, true,
         rebuilt({{"XBLOCK", 16}, {"R0_BLOCK", 64}}, 8, 1)},
        {"coordesc: num_warps absent (Inductor raises KeyError)",
         stored({{"found_by_coordesc", found}, {"num_warps", k_erase}}), abc, true, true,
         std::nullopt},
        {"coordesc: num_stages absent (Inductor raises KeyError)",
         stored({{"found_by_coordesc", found}, {"num_stages", k_erase}}), abc, true, true,
         std::nullopt},
        {"coordesc: num_warps not an integer",
         stored({{"found_by_coordesc", found}, {"num_warps", "8"}}), abc, true, true, std::nullopt,
         true},
        {"coordesc: num_consumer_groups not an integer",
         stored({{"found_by_coordesc", found}, {"num_consumer_groups", 1.5}}), abc, true, true,
         std::nullopt, true},
    };

    Json input = Json::array();
    for (const auto& row : rows) {
        Json candidates = Json::array();
        for (const auto& candidate : row.candidates) {
            candidates.push_back(config_json(candidate));
        }
        input.push_back({{"best", row.best},
                         {"candidates", candidates},
                         {"coordesc", row.coordesc},
                         {"warp", row.warp_spec}});
    }
    const Json inductor = run_python(std::string(k_inductor) + R"(
out = []
for r in json.load(open(sys.argv[1])):
    configs = [make(c) for c in r["candidates"]]
    try:
        got = load(r["best"], ")" + k_hash +
                                         R"(", configs, r["coordesc"], r["warp"])
    except KeyError as e:
        out.append({"raises": repr(e)})
        continue
    if got is None:
        out.append(None)
    elif any(got is c for c in configs):
        out.append({"index": next(i for i, c in enumerate(configs) if got is c),
                    "extra": getattr(got, "extra_options", None)})
    else:
        out.append({"kwargs": list(got.kwargs.items()), "num_warps": got.num_warps,
                    "num_stages": got.num_stages, "groups": got.num_consumer_groups,
                    "buffers": got.num_buffers_warp_spec,
                    "found": getattr(got, "found_by_coordesc", False),
                    "extra": getattr(got, "extra_options", None)})
print(json.dumps(out))
)",
                                     input);
    REQUIRE(inductor.size() == rows.size());

    for (std::size_t i = 0; i < rows.size(); ++i) {
        const auto& row = rows[i];
        INFO(row.name << ": " << row.best.dump());
        const auto got = select(row.best, k_hash, row.candidates, row.coordesc, row.warp_spec);
        CHECK(got == row.expected);

        // The same row through Inductor's own code.
        const auto& theirs = inductor[i];
        INFO("Inductor: " << theirs.dump());
        if (row.inductor_differs) {
            CHECK(theirs.contains("kwargs"));
        } else if (theirs.is_null() || theirs.contains("raises")) {
            CHECK_FALSE(got);
        } else if (theirs.contains("index")) {
            REQUIRE(got);
            CHECK(*got ==
                  with_extra(row.candidates[theirs["index"].get<std::size_t>()], theirs["extra"]));
        } else {
            Kwargs kwargs;
            for (const auto& pair : theirs["kwargs"]) {
                kwargs.emplace_back(pair[0].get<std::string>(), pair[1]);
            }
            auto theirs_config = rebuilt(kwargs, theirs["num_warps"], theirs["num_stages"],
                                         theirs["groups"], theirs["buffers"]);
            theirs_config.found_by_coordesc = theirs["found"].get<bool>();
            CHECK(got == with_extra(theirs_config, theirs["extra"]));
        }
    }
}

TEST_CASE("select over JSON text: text that does not parse is a miss", "[proto][autotune]") {
    const auto a = config({{"XBLOCK", 8}, {"R0_BLOCK", 64}}, 8, 1);
    CHECK(select_from_text(stored().dump(), k_hash, {a}, false) == a);
    CHECK(select_from_text(std::string_view("{\"XBLOCK\": 8,"), k_hash, {a}, false) ==
          std::nullopt);
    CHECK(select_from_text(std::string_view(""), k_hash, {a}, true) == std::nullopt);
    // configs_hash is the first check, before any candidate is looked at.
    CHECK(select_from_text(stored().dump(), "other", {a}, false) == std::nullopt);
}
