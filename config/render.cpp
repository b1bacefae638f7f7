// SPDX-License-Identifier: MIT
//
// render(): the effective configuration as TOML, each line saying where its
// value came from.
#include "config/config.hpp"
#include "config/settings.hpp"

#include <fmt/core.h>

namespace pt2cache::config {

namespace {

// "default", "default (from XDG_RUNTIME_DIR)", "file /x/pt2cached.toml",
// "env TORCHINDUCTOR_REDIS_URL", "flag", or "flag remote.url" for a value
// that another flag (here a URL) set.
std::string describe(const Origin& origin, std::string_view key) {
    std::string text(source_name(origin.source));
    if (origin.detail.empty() || (origin.source == Source::flag && origin.detail == key)) {
        return text;
    }
    if (origin.source == Source::default_value) {
        return fmt::format("{} (from {})", text, origin.detail);
    }
    return fmt::format("{} {}", text, origin.detail);
}

} // namespace

std::string render(const Loaded& loaded) {
    std::string out = "# pt2cached configuration: effective values and where they came from\n";
    out += fmt::format("# config file: {}\n",
                       loaded.config_file.empty() ? "none" : loaded.config_file);

    std::string_view section;
    for (const auto& setting : settings()) {
        if (section_of(setting) != section) {
            if (section == "remote") {
                out += fmt::format("# remote.enabled = {} (true when any remote switch is on)\n",
                                   loaded.config.remote_enabled);
            }
            section = section_of(setting);
            out += '\n';
        }
        auto origin = loaded.origins.find(std::string(setting.key));
        out += fmt::format("{} = {}  # {}\n", setting.key, format_value(loaded.config, setting),
                           origin == loaded.origins.end()
                               ? std::string(source_name(Source::default_value))
                               : describe(origin->second, setting.key));
    }
    return out;
}

} // namespace pt2cache::config
