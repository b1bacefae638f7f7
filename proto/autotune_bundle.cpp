// SPDX-License-Identifier: MIT
#include "proto/autotune_bundle.hpp"

#include "proto/autotune.hpp"
#include "proto/python_json.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace pt2cache::proto::autotune {

namespace {

using Json = nlohmann::ordered_json;

std::uint64_t time_taken_ms(const Json& best_config) {
    const auto found = best_config.find("time_taken_ms");
    if (found == best_config.end() || !found->is_number_unsigned()) {
        return 0; // absent, negative, float, or not a number at all
    }
    return found->get<std::uint64_t>();
}

} // namespace

tl::expected<DecodedBundle, std::string> decode_bundle(std::string_view text) {
    const auto bundle = parse_json(text);
    if (!bundle.is_object()) {
        return tl::make_unexpected(
            bundle.is_discarded() ? std::string("not JSON")
                                  : fmt::format("a JSON {}, not an object", bundle.type_name()));
    }
    DecodedBundle out;
    out.entries.reserve(bundle.size());
    for (const auto& [basename, best_config] : bundle.items()) {
        // Inductor's reader ignores anything but a dict; the key must name a
        // local best-config file.
        if (!is_local_key(basename) || !best_config.is_object()) {
            ++out.skipped;
            continue;
        }
        out.entries.push_back(
            {basename, python_json_dumps(best_config), time_taken_ms(best_config)});
    }
    return out;
}

std::string encode_bundle(std::span<const std::pair<std::string, std::string>> entries) {
    std::string text = "{";
    for (const auto& [basename, json] : entries) {
        if (text.size() > 1) {
            text += ", ";
        }
        python_json_dump(Json(basename), text);
        text += ": ";
        text += json;
    }
    text += '}';
    return text;
}

} // namespace pt2cache::proto::autotune
