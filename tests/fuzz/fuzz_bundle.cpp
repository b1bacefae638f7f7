// SPDX-License-Identifier: MIT
// Fuzz target: the autotune bundle record (proto/autotune_bundle.*) and the
// best-config records inside it (proto/autotune.*: BestConfig).
// Invariants: the restorable entries of a bundle are local best-config keys
// whose text is json.dumps of an object (a fixpoint of parse + dumps); a
// bundle re-encoded from them decodes to the same entries with nothing
// skipped, and re-encodes to the same bytes; a best-config that reads back
// writes the same record again.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "proto/autotune.hpp"
#include "proto/autotune_bundle.hpp"
#include "proto/python_json.hpp"
#include "tests/fuzz/fuzz_check.hpp"

#include <nlohmann/json.hpp>

namespace {

using namespace pt2cache::proto;
using namespace pt2cache::proto::autotune;
using Pairs = std::vector<std::pair<std::string, std::string>>;

Pairs pairs_of(const DecodedBundle& bundle) {
    Pairs pairs;
    for (const auto& entry : bundle.entries) {
        pairs.emplace_back(entry.basename, entry.best_config);
    }
    return pairs;
}

void check_best_config(const std::string& text) {
    const auto config = BestConfig::from_json(text);
    if (!config) {
        FUZZ_CHECK(!config.error().empty());
        return;
    }
    const auto written = config->to_json();
    const auto again = BestConfig::from_json(written);
    FUZZ_CHECK(again);
    FUZZ_CHECK(*again == *config);
    FUZZ_CHECK(again->to_json() == written);
}

void check_bundle(std::string_view text) {
    const auto bundle = decode_bundle(text);
    if (!bundle) {
        FUZZ_CHECK(!bundle.error().empty());
        return;
    }
    for (const auto& entry : bundle->entries) {
        FUZZ_CHECK(is_local_key(entry.basename));
        const auto parsed = nlohmann::ordered_json::parse(entry.best_config, nullptr, false);
        FUZZ_CHECK(parsed.is_object());
        FUZZ_CHECK(python_json_dumps(parsed) == entry.best_config);
        check_best_config(entry.best_config);
    }

    const auto pairs = pairs_of(*bundle);
    const auto encoded = encode_bundle(pairs);
    const auto again = decode_bundle(encoded);
    FUZZ_CHECK(again);
    FUZZ_CHECK(again->skipped == 0);
    FUZZ_CHECK(again->entries == bundle->entries);
    FUZZ_CHECK(encode_bundle(pairs_of(*again)) == encoded);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    check_bundle(text);
    // The input as one entry's best-config, under a valid key: reaches the
    // record checks without having to find a 64-hex key first.
    std::string wrapped = "{\"" + std::string(64, 'a') + ".best_config\": ";
    wrapped.append(text);
    wrapped += '}';
    check_bundle(wrapped);
    return 0;
}
