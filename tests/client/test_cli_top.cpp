// SPDX-License-Identifier: MIT
//
// client/cli/top_model.cpp and duration.cpp: what `pt2cache top` computes from
// two STATS replies, its plain line and screen text, and --wait's durations.
#include "client/cli/duration.hpp"
#include "client/cli/top_model.hpp"
#include "client/cli/top_view.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

using namespace pt2cache::client::cli;
using nlohmann::json;

namespace {

json tier(std::uint64_t hits, std::uint64_t misses, std::uint64_t puts, std::uint64_t errors = 0) {
    return {{"hits", hits},   {"misses", misses}, {"puts", puts}, {"bytes_in", 0},
            {"bytes_out", 0}, {"evictions", 0},   {"corrupt", 0}, {"errors", errors}};
}

// A reply with fx-graph counters: memory sees every lookup, disk the memory
// misses; `saved_ms` of compile.cxx.
json reply(double uptime, std::uint64_t mem_hits, std::uint64_t mem_misses, std::uint64_t disk_hits,
           std::uint64_t puts, std::uint64_t saved_ms) {
    return {
        {"version", "0.1.0"},
        {"pid", 42},
        {"uptime_s", uptime},
        {"daemon", {{"connections_active", 4}}},
        {"tiers",
         {{"memory", {{"bytes", 100}, {"count", 2}, {"capacity", 1000}}},
          {"disk",
           {{"bytes", 5u << 20},
            {"count", 7},
            {"capacity", 10u << 20},
            {"write_queue",
             {{"entries", 3}, {"bytes", 300}, {"capacity", 64u << 20}, {"oldest_age_s", 0.75}}}}},
          {"remote", nullptr}}},
        {"compile", {{"cxx", {{"saved_ms", saved_ms}}}}},
        {"namespaces",
         {{"fx-graph",
           {{"memory", tier(mem_hits, mem_misses, puts)},
            {"disk", tier(disk_hits, mem_misses - disk_hits, puts)},
            {"remote", tier(0, 0, 0)}}},
          {"autotune",
           {{"memory", tier(0, 1, 0)}, {"disk", tier(0, 1, 0)}, {"remote", tier(0, 0, 0)}}}}},
    };
}

} // namespace

TEST_CASE("top: rates and hit ratio are deltas over the interval", "[cli][top]") {
    const json before = reply(10, 100, 50, 20, 30, 1000);
    // In 2 s: 40 lookups (30 memory hits, 10 misses of which 6 disk hits), 8 puts.
    const json now = reply(12, 130, 60, 26, 38, 4000);
    const auto frame = make_top_frame(now, &before, 2.0);
    REQUIRE(frame.interval_s);
    REQUIRE(frame.ops_per_s);
    CHECK(*frame.ops_per_s == Approx((40 + 8) / 2.0));
    REQUIRE(frame.hit_ratio);
    CHECK(*frame.hit_ratio == Approx(36.0 / 40));
    CHECK(frame.clients == 3);
    CHECK(frame.compile_saved_s == Approx(4.0));
    REQUIRE(frame.compile_saved_per_s);
    CHECK(*frame.compile_saved_per_s == Approx(1.5));
    REQUIRE(frame.disk);
    CHECK(frame.disk->bytes == 5u << 20);
    REQUIRE(frame.disk_queue);
    CHECK(frame.disk_queue->entries == 3);
    CHECK(frame.disk_queue->oldest_age_s == Approx(0.75));
    CHECK_FALSE(frame.remote);
    CHECK_FALSE(frame.get_latency); // no "latency" array: "-"

    REQUIRE(frame.namespaces.size() == 2);
    const auto& fx = frame.namespaces[0]; // busiest first
    CHECK(fx.ns == "fx-graph");
    CHECK(*fx.gets_per_s == Approx(20));
    CHECK(*fx.puts_per_s == Approx(4));
    CHECK(*fx.hit_ratio == Approx(0.9));
    const auto& autotune = frame.namespaces[1];
    CHECK(*autotune.gets_per_s == 0);
    CHECK_FALSE(autotune.hit_ratio); // no lookup in the interval
}

TEST_CASE("top: no rates without an interval or across daemons", "[cli][top]") {
    const json now = reply(12, 130, 60, 26, 38, 4000);
    CHECK_FALSE(make_top_frame(now, nullptr, 0).ops_per_s);
    json other = reply(10, 100, 50, 20, 30, 1000);
    other["pid"] = 43; // restarted: its counters are not comparable
    const auto frame = make_top_frame(now, &other, 1.0);
    CHECK_FALSE(frame.ops_per_s);
    CHECK_FALSE(frame.namespaces[0].gets_per_s);
    const json older = reply(20, 100, 50, 20, 30, 1000); // uptime went down
    CHECK_FALSE(make_top_frame(now, &older, 1.0).ops_per_s);
}

TEST_CASE("top: latency from the STATS latency array when present", "[cli][top]") {
    json now = reply(12, 130, 60, 26, 38, 4000);
    now["latency"] = json::array({
        {{"op", "get"},
         {"tier", "memory"},
         {"ns", "fx-graph"},
         {"count", 90},
         {"p50_us", 12},
         {"p99_us", 80},
         {"p999_us", 200}},
        {{"op", "get"},
         {"tier", "disk"},
         {"ns", "fx-graph"},
         {"count", 10},
         {"p50_us", 300},
         {"p99_us", 25000},
         {"p999_us", 40000}},
        {{"op", "put"},
         {"tier", "memory"},
         {"ns", "fx-graph"},
         {"count", 0},
         {"p50_us", 0},
         {"p99_us", 0},
         {"p999_us", 0}},
    });
    const auto frame = make_top_frame(now, nullptr, 0);
    REQUIRE(frame.get_latency); // the busiest entry
    CHECK(frame.get_latency->p50_us == 12);
    CHECK_FALSE(frame.put_latency); // no samples
    CHECK(latency_text(frame.get_latency, false) == "12us");
    const auto& fx = frame.namespaces[0];
    REQUIRE(fx.get_latency);
    CHECK(fx.get_latency->p99_us == 80);
    CHECK_FALSE(frame.namespaces[1].get_latency);

    // An aggregate tier wins over the busiest one.
    now["latency"].push_back({{"op", "get"},
                              {"tier", "all"},
                              {"ns", "fx-graph"},
                              {"count", 100},
                              {"p50_us", 15},
                              {"p99_us", 24000},
                              {"p999_us", 30000}});
    const auto aggregated = make_top_frame(now, nullptr, 0);
    CHECK(latency_text(aggregated.namespaces[0].get_latency, true) == "24.0ms");
}

TEST_CASE("top: the remote tier's state and error ratio", "[cli][top]") {
    json before = reply(10, 100, 50, 20, 30, 1000);
    json now = reply(11, 130, 60, 26, 38, 4000);
    for (auto* stats : {&before, &now}) {
        (*stats)["tiers"]["remote"] = {{"endpoint", "127.0.0.1:6379"},
                                       {"state", "suspended until 2026-01-01T00:00:00.000Z"},
                                       {"read_only", true},
                                       {"count", 2},
                                       {"bytes", 10},
                                       {"capacity", 100}};
    }
    before["remote"] = {{"hits", 10},  {"misses", 10},  {"written", 0},
                        {"errors", 1}, {"timeouts", 0}, {"protocol_errors", 0}};
    now["remote"] = {{"hits", 13},  {"misses", 12},  {"written", 2},
                     {"errors", 3}, {"timeouts", 1}, {"protocol_errors", 0}};
    const auto frame = make_top_frame(now, &before, 1.0);
    REQUIRE(frame.remote);
    CHECK(frame.remote->breaker_open);
    CHECK(frame.remote->read_only);
    CHECK(frame.remote->queue.count == 2);
    CHECK(*frame.remote->errors_per_s == Approx(3));
    CHECK(*frame.remote->error_ratio == Approx(3.0 / 10));
    const auto line = top_plain_line(frame, "12:00:00");
    CHECK(line.find(" remote=breaker-open,read-only remote_queue=2 remote_err/s=3.0") !=
          std::string::npos);
}

TEST_CASE("top: the plain line and the screen text", "[cli][top]") {
    const json before = reply(10, 100, 50, 20, 30, 1000);
    const json now = reply(12, 130, 60, 26, 38, 4000);
    const auto frame = make_top_frame(now, &before, 2.0);
    CHECK(top_plain_line(frame, "12:00:00") ==
          "12:00:00 ops/s=24.0 hit=90.0% get_p50=- get_p99=- saved=4.0s clients=3 "
          "disk=5.0MiB/10.0MiB disk_queue=3 disk_queue_age=0.8s remote=off");
    const auto lines = top_screen_lines(&frame, "", 1.0);
    std::string text;
    for (const auto& line : lines) {
        text += line.text + "\n";
    }
    CHECK(text.find("ops/s 24.0   hit 90.0%   get p50 - p99 -") != std::string::npos);
    CHECK(text.find("disk     5.0 MiB of 10.0 MiB (50.0%), 7 entries") != std::string::npos);
    CHECK(text.find("  write queue 3 entries, 300 B of 64.0 MiB, oldest 0.8 s") !=
          std::string::npos);
    CHECK(text.find("remote   off") != std::string::npos);
    CHECK(text.find("fx-graph        20.0        4.0   90.0%") != std::string::npos);
    const auto unreachable = top_screen_lines(nullptr, "cannot connect", 1.0);
    REQUIRE(unreachable.size() == 2);
    CHECK(unreachable[1].text == "pt2cached unreachable: cannot connect");
}

TEST_CASE("parse_duration", "[cli][duration]") {
    using std::chrono::milliseconds;
    CHECK(parse_duration("5s").value() == milliseconds(5000));
    CHECK(parse_duration("500ms").value() == milliseconds(500));
    CHECK(parse_duration("1.5m").value() == milliseconds(90'000));
    CHECK(parse_duration("2h").value() == milliseconds(7'200'000));
    CHECK(parse_duration("1d").value() == milliseconds(86'400'000));
    CHECK(parse_duration("3").value() == milliseconds(3000));
    CHECK(parse_duration("0s").value() == milliseconds(0));
    for (const char* bad : {"", "s", "-1s", "5x", "5 s", "1.2.3s", "31d", "nan"}) {
        INFO(bad);
        CHECK_FALSE(parse_duration(bad));
    }
}
