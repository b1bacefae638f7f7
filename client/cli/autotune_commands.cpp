// SPDX-License-Identifier: MIT
//
// `pt2cache bundle ls|show` and `pt2cache autotune show`: autotune
// best-configs (namespace "autotune") and their bundles ("autotune-bundle").
#include <string>
#include <string_view>
#include <vector>

#include "client/cli/autotune_format.hpp"
#include "client/cli/commands.hpp"
#include "client/cli/common.hpp"
#include "client/cli/format.hpp"
#include "proto/autotune.hpp"

#include <fmt/format.h>

namespace pt2cache::client::cli {

namespace {

namespace at = proto::autotune;

// Bundles fetched at once by `bundle ls`; each may be a few hundred KiB.
constexpr std::uint32_t k_bundle_page = 64;

std::string_view as_text(const Bytes& bytes) {
    return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

} // namespace

int run_bundle_ls(const Globals& globals) {
    auto client = make_client(globals);
    std::vector<BundleRow> rows;
    std::string cursor;
    do {
        auto page = client.list(at::k_bundle_namespace, cursor, k_bundle_page);
        if (!page) {
            return report(page.error());
        }
        std::vector<std::string> keys;
        keys.reserve(page->entries.size());
        for (const auto& entry : page->entries) {
            keys.push_back(entry.key);
        }
        auto values = client.get_many(at::k_bundle_namespace, keys);
        if (!values) {
            return report(values.error());
        }
        for (std::size_t i = 0; i < keys.size(); ++i) {
            BundleRow row{std::move(keys[i]), page->entries[i].size, page->entries[i].mtime_ms,
                          std::nullopt};
            if (const auto& value = (*values)[i]) {
                row.entries = count_bundle_entries(as_text(*value));
            }
            rows.push_back(std::move(row));
        }
        cursor = std::move(page->next_cursor);
    } while (!cursor.empty());
    if (!rows.empty()) {
        fmt::print("{}", render_bundle_rows(rows));
    }
    return exit_status::ok;
}

int run_bundle_show(const Globals& globals, const std::string& key) {
    auto client = make_client(globals);
    auto value = client.get(at::k_bundle_namespace, key);
    if (!value) {
        return report(value.error());
    }
    if (!*value) {
        complain(fmt::format("no bundle \"{}\" in {}", printable(key), at::k_bundle_namespace));
        return exit_status::miss;
    }
    auto shown = render_bundle(key, as_text(**value));
    if (shown.error) {
        complain(*shown.error);
        return exit_status::server;
    }
    fmt::print("{}", shown.text);
    return exit_status::ok;
}

int run_autotune_show(const Globals& globals, const std::string& key) {
    auto client = make_client(globals);
    auto value = client.get(at::k_namespace, key);
    if (!value) {
        return report(value.error());
    }
    if (!*value) {
        complain(fmt::format("no best-config \"{}\" in {}", printable(key), at::k_namespace));
        return exit_status::miss;
    }
    auto config = at::BestConfig::from_json(as_text(**value));
    if (!config) {
        complain(fmt::format("entry \"{}\" in {} is not a best-config: {}", printable(key),
                             at::k_namespace, config.error()));
        return exit_status::server;
    }
    fmt::print("best-config {}\n{}", printable(key), render_best_config(*config, "  "));
    return exit_status::ok;
}

} // namespace pt2cache::client::cli
