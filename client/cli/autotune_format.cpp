// SPDX-License-Identifier: MIT
#include "client/cli/autotune_format.hpp"

#include <algorithm>
#include <array>
#include <utility>

#include "client/cli/format.hpp"
#include "proto/python_json.hpp"

#include <fmt/format.h>

namespace pt2cache::client::cli {

namespace {

using Json = nlohmann::ordered_json;
using proto::autotune::BestConfig;

// Depth-limited: a bundle value nested 50,000 deep overflowed the stack.
Json parse(std::string_view text) {
    return proto::parse_json(text);
}

} // namespace

std::string render_kwargs(const proto::autotune::Kwargs& kwargs) {
    if (kwargs.empty()) {
        return "(none)";
    }
    std::string out;
    for (const auto& [name, value] : kwargs) {
        if (!out.empty()) {
            out += ", ";
        }
        out += fmt::format("{}={}", printable(name), proto::python_repr(value));
    }
    return out;
}

std::string render_best_config(const BestConfig& config, std::string_view indent) {
    std::vector<std::pair<std::string_view, std::string>> lines = {
        {"kwargs", render_kwargs(config.kwargs)},
        {"num_warps", fmt::format("{}", config.num_warps)},
        {"num_stages", fmt::format("{}", config.num_stages)},
        {"configs_hash", printable(config.configs_hash)},
        {"found_by_coordesc", config.found_by_coordesc ? "yes" : "no"},
        {"time_taken_ms", fmt::format("{} ms", config.time_taken_ms)},
        {"triton_cache_hash",
         config.triton_cache_hash ? printable(*config.triton_cache_hash) : "(none)"},
    };
    if (config.num_consumer_groups) {
        lines.emplace_back("num_consumer_groups", fmt::format("{}", *config.num_consumer_groups));
    }
    if (config.num_buffers_warp_spec) {
        lines.emplace_back("num_buffers_warp_spec",
                           fmt::format("{}", *config.num_buffers_warp_spec));
    }
    if (!config.extra_options.is_null()) {
        lines.emplace_back("extra_options", proto::python_repr(config.extra_options));
    }
    std::size_t width = 0;
    for (const auto& [label, value] : lines) {
        width = std::max(width, label.size());
    }
    std::string out;
    for (const auto& [label, value] : lines) {
        out += fmt::format("{}{:<{}}  {}\n", indent, label, width, value);
    }
    return out;
}

BundleText render_bundle(std::string_view key, std::string_view bundle_json) {
    const Json bundle = parse(bundle_json);
    if (bundle.is_discarded()) {
        return {{}, fmt::format("bundle {} is not valid JSON", printable(key))};
    }
    if (!bundle.is_object()) {
        return {{},
                fmt::format("bundle {} is a JSON {}, not an object", printable(key),
                            bundle.type_name())};
    }
    std::string body;
    std::int64_t total_ms = 0;
    for (const auto& [basename, data] : bundle.items()) {
        body += fmt::format("\n{}\n", printable(basename));
        auto config = BestConfig::from_value(data);
        if (!config) {
            body += fmt::format("  not a best-config ({}):\n  {}\n", config.error(),
                                proto::python_json_dumps(data));
            continue;
        }
        total_ms += config->time_taken_ms;
        body += render_best_config(*config, "  ");
    }
    const auto count = bundle.size();
    return {fmt::format("bundle {}: {} best-config{}, {} ms of autotuning\n", printable(key), count,
                        count == 1 ? "" : "s", total_ms) +
                body,
            std::nullopt};
}

std::int64_t count_bundle_entries(std::string_view bundle_json) {
    const Json bundle = parse(bundle_json);
    if (bundle.is_discarded() || !bundle.is_object()) {
        return -1;
    }
    return static_cast<std::int64_t>(bundle.size());
}

std::string render_bundle_rows(const std::vector<BundleRow>& rows) {
    std::size_t key_width = std::string_view("KEY").size();
    for (const auto& row : rows) {
        key_width = std::max(key_width, printable(row.key).size());
    }
    std::string out =
        fmt::format("{:<{}}  {:>7}  {:>10}  {}\n", "KEY", key_width, "ENTRIES", "SIZE", "MODIFIED");
    for (const auto& row : rows) {
        const std::string entries = !row.entries       ? std::string("gone")
                                    : *row.entries < 0 ? std::string("invalid")
                                                       : fmt::format("{}", *row.entries);
        out += fmt::format("{:<{}}  {:>7}  {:>10}  {}\n", printable(row.key), key_width, entries,
                           human_bytes(row.size), format_mtime(row.mtime_ms));
    }
    return out;
}

} // namespace pt2cache::client::cli
