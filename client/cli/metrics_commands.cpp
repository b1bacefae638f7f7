// SPDX-License-Identifier: MIT
//
// `pt2cache metrics` (Prometheus text) and `pt2cache stats --zero`.
#include <string>

#include "client/cli/commands.hpp"
#include "client/cli/common.hpp"
#include "client/cli/format.hpp"
#include "proto/messages.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace pt2cache::client::cli {

int run_metrics(const Globals& globals) {
    auto client = make_client(globals);
    auto text = client.stats(proto::stats_flag::prometheus);
    if (!text) {
        return report(text.error());
    }
    fmt::print("{}", *text);
    return exit_status::ok;
}

int run_stats_zero(const Globals& globals, bool json) {
    auto client = make_client(globals);
    auto stats = client.stats(proto::stats_flag::zero);
    if (!stats) {
        return report(stats.error());
    }
    if (json) {
        // The counts as they were just before the reset.
        fmt::print("{}\n", *stats);
    } else {
        fmt::print("statistics zeroed\n");
    }
    return exit_status::ok;
}

} // namespace pt2cache::client::cli
