// SPDX-License-Identifier: MIT
#include "client/cli/format.hpp"

#include <array>
#include <cmath>
#include <ctime>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace pt2cache::client::cli {

std::string human_bytes(std::uint64_t bytes) {
    static constexpr std::array<std::string_view, 6> units = {"KiB", "MiB", "GiB",
                                                              "TiB", "PiB", "EiB"};
    if (bytes < 1024) {
        return fmt::format("{} B", bytes);
    }
    double value = static_cast<double>(bytes) / 1024;
    std::size_t unit = 0;
    while (value >= 1024 && unit + 1 < units.size()) {
        value /= 1024;
        ++unit;
    }
    return fmt::format("{:.1f} {}", value, units[unit]);
}

std::string human_duration(double seconds) {
    const auto total = static_cast<std::uint64_t>(std::max(0.0, std::floor(seconds)));
    const std::uint64_t days = total / 86400;
    const std::uint64_t hours = total / 3600 % 24;
    const std::uint64_t minutes = total / 60 % 60;
    const std::uint64_t secs = total % 60;
    if (days > 0) {
        return fmt::format("{}d {:02}h {:02}m", days, hours, minutes);
    }
    if (hours > 0) {
        return fmt::format("{}h {:02}m {:02}s", hours, minutes, secs);
    }
    if (minutes > 0) {
        return fmt::format("{}m {:02}s", minutes, secs);
    }
    return fmt::format("{}s", secs);
}

std::string format_mtime(std::uint64_t mtime_ms) {
    const auto seconds = static_cast<std::time_t>(mtime_ms / 1000);
    std::tm local{};
    if (::localtime_r(&seconds, &local) == nullptr) {
        return fmt::format("@{}", mtime_ms / 1000);
    }
    std::array<char, 32> text{};
    const std::size_t size = std::strftime(text.data(), text.size(), "%Y-%m-%d %H:%M:%S", &local);
    return std::string(text.data(), size);
}

std::string printable(std::string_view key) {
    std::string out;
    out.reserve(key.size());
    for (const char c : key) {
        const auto byte = static_cast<unsigned char>(c);
        if (byte < 0x20 || byte >= 0x7f || c == '\\') {
            out += fmt::format("\\x{:02x}", byte);
        } else {
            out += c;
        }
    }
    return out;
}

namespace {

struct Column {
    std::string_view title;
    std::string_view field;
    bool bytes;
};

constexpr std::array<Column, 8> k_columns = {{
    {"HITS", "hits", false},
    {"MISSES", "misses", false},
    {"PUTS", "puts", false},
    {"BYTES IN", "bytes_in", true},
    {"BYTES OUT", "bytes_out", true},
    {"EVICTIONS", "evictions", false},
    {"CORRUPT", "corrupt", false},
    {"ERRORS", "errors", false},
}};

std::uint64_t counter(const nlohmann::json& tier, std::string_view field) {
    const auto it = tier.find(field);
    return it == tier.end() || !it->is_number() ? 0 : it->get<std::uint64_t>();
}

// `object[field]` as a real number, or 0 when absent or not a number.
double real(const nlohmann::json& object, std::string_view field) {
    const auto it = object.find(field);
    return it == object.end() || !it->is_number() ? 0.0 : it->get<double>();
}

// `object[field]` as text, or `fallback` when absent or null.
std::string field_text(const nlohmann::json& object, std::string_view field,
                       std::string_view fallback = "?") {
    const auto it = object.find(field);
    if (it == object.end() || it->is_null()) {
        return std::string(fallback);
    }
    return it->is_string() ? it->get<std::string>() : it->dump();
}

std::string render_header(const nlohmann::json& stats) {
    std::string out =
        fmt::format("pt2cached {}, pid {}", field_text(stats, "version"), field_text(stats, "pid"));
    if (const auto it = stats.find("uptime_s"); it != stats.end() && it->is_number()) {
        out += fmt::format(", up {}", human_duration(it->get<double>()));
    }
    out += "\n";
    for (const auto& [field, title] :
         {std::pair{"socket", "socket   "}, std::pair{"cache_dir", "cache dir"}}) {
        if (stats.contains(field)) {
            out += fmt::format("{}  {}\n", title, field_text(stats, field));
        }
    }
    if (stats.value("force_disable_caches", false)) {
        out += "caches force-disabled (TORCHINDUCTOR_FORCE_DISABLE_CACHES)\n";
    }
    return out;
}

std::string render_tiers(const nlohmann::json& stats) {
    const auto tiers = stats.find("tiers");
    if (tiers == stats.end() || !tiers->is_object()) {
        return {};
    }
    std::string out =
        fmt::format("\n{:<8}  {:>9}  {:>10}  {:>10}\n", "TIER", "ENTRIES", "SIZE", "CAPACITY");
    for (const auto& [name, tier] : tiers->items()) {
        if (!tier.is_object()) {
            out += fmt::format("{:<8}  {:>9}\n", name, "off");
            continue;
        }
        if (tier.contains("endpoint")) {
            // The remote tier: its entries are in Redis; count/bytes/capacity
            // describe its write-behind queue.
            out += fmt::format("{:<8}  {} ({}{}), write-behind queue {} entries, {} of {}\n", name,
                               field_text(tier, "state"), field_text(tier, "endpoint"),
                               tier.value("read_only", false) ? ", read-only" : "",
                               counter(tier, "count"), human_bytes(counter(tier, "bytes")),
                               human_bytes(counter(tier, "capacity")));
            continue;
        }
        out += fmt::format("{:<8}  {:>9}  {:>10}  {:>10}\n", name, counter(tier, "count"),
                           human_bytes(counter(tier, "bytes")),
                           human_bytes(counter(tier, "capacity")));
        // The disk tier's asynchronous write queue.
        if (const auto queue = tier.find("write_queue");
            queue != tier.end() && queue->is_object()) {
            out +=
                fmt::format("{:<8}  write queue {} entries, {} of {}, oldest {:.1f} s\n", "",
                            counter(*queue, "entries"), human_bytes(counter(*queue, "bytes")),
                            human_bytes(counter(*queue, "capacity")), real(*queue, "oldest_age_s"));
        }
        // How long small.mdb's write transactions take (the disk's fdatasync).
        if (const auto writes = tier.find("small_store_writes");
            writes != tier.end() && writes->is_object() && counter(*writes, "count") > 0) {
            out += fmt::format("{:<8}  small.mdb {} writes, p50 {:.1f} ms, p99 {:.1f} ms, "
                               "slowest {:.1f} ms\n",
                               "", counter(*writes, "count"), real(*writes, "p50_ms"),
                               real(*writes, "p99_ms"), real(*writes, "max_ms"));
        }
    }
    return out;
}

// Per namespace of a compile cache (docs/cxx.md, "Statistics"): lookups,
// hits, misses, real builds stored and the build seconds hits saved.
std::string render_compile(const nlohmann::json& stats) {
    const auto compile = stats.find("compile");
    if (compile == stats.end() || !compile->is_object() || compile->empty()) {
        return {};
    }
    std::string out = "\ncompile cache\n";
    out += fmt::format("  {:<12}  {:>8}  {:>8}  {:>8}  {:>8}  {:>12}\n", "NAMESPACE", "LOOKUPS",
                       "HITS", "MISSES", "BUILDS", "SAVED");
    for (const auto& [ns, row] : compile->items()) {
        if (!row.is_object()) {
            continue;
        }
        const auto saved_s = static_cast<double>(counter(row, "saved_ms")) / 1000.0;
        out += fmt::format("  {:<12}  {:>8}  {:>8}  {:>8}  {:>8}  {:>10.1f} s\n", ns,
                           counter(row, "lookups"), counter(row, "hits"), counter(row, "misses"),
                           counter(row, "builds"), saved_s);
    }
    return out;
}

} // namespace

std::string render_stats(const nlohmann::json& stats) {
    const auto& namespaces = stats.at("namespaces");
    std::string out = render_header(stats);
    out += render_tiers(stats);

    if (const auto daemon = stats.find("daemon"); daemon != stats.end() && daemon->is_object()) {
        std::size_t name_width = 0;
        for (const auto& [name, value] : daemon->items()) {
            name_width = std::max(name_width, name.size());
        }
        out += "\ndaemon\n";
        for (const auto& [name, value] : daemon->items()) {
            out += fmt::format("  {:<{}}  {}\n", name, name_width, value.dump());
        }
    }

    // The remote tier's own counters, when it is on.
    if (const auto remote = stats.find("remote");
        remote != stats.end() && remote->is_object() && remote->contains("hits") &&
        remote->value("state", std::string("disabled")) != "disabled") {
        out += fmt::format("\nremote {}\n", field_text(*remote, "state"));
        std::string line;
        for (const auto& [name, value] : remote->items()) {
            if (name == "state") {
                continue;
            }
            const bool bytes = name == "queue_bytes";
            std::string cell = fmt::format(
                "  {} {}", name, bytes ? human_bytes(value.get<std::uint64_t>()) : value.dump());
            if (line.size() + cell.size() > 88) {
                out += line + "\n";
                line.clear();
            }
            line += cell;
        }
        out += line + "\n";
    }

    out += render_compile(stats);

    // Rows first, to size the columns.
    std::vector<std::array<std::string, k_columns.size() + 2>> rows;
    for (const auto& [ns, tiers] : namespaces.items()) {
        for (const auto& [tier_name, tier] : tiers.items()) {
            std::array<std::string, k_columns.size() + 2> row;
            row[0] = ns;
            row[1] = tier_name;
            bool active = false;
            for (std::size_t i = 0; i < k_columns.size(); ++i) {
                const auto value = counter(tier, k_columns[i].field);
                active = active || value != 0;
                row[i + 2] = k_columns[i].bytes ? human_bytes(value) : fmt::format("{}", value);
            }
            if (active) {
                rows.push_back(std::move(row));
            }
        }
    }
    out += "\n";
    if (rows.empty()) {
        out += "no cache activity yet\n";
        return out;
    }
    std::array<std::size_t, k_columns.size() + 2> width{};
    width[0] = std::string_view("NAMESPACE").size();
    width[1] = std::string_view("TIER").size();
    for (std::size_t i = 0; i < k_columns.size(); ++i) {
        width[i + 2] = k_columns[i].title.size();
    }
    for (const auto& row : rows) {
        for (std::size_t i = 0; i < row.size(); ++i) {
            width[i] = std::max(width[i], row[i].size());
        }
    }
    auto line = [&](auto cell) {
        std::string text = fmt::format("{:<{}}  {:<{}}", cell(0), width[0], cell(1), width[1]);
        for (std::size_t i = 2; i < width.size(); ++i) {
            text += fmt::format("  {:>{}}", cell(i), width[i]);
        }
        return text + "\n";
    };
    out += line([](std::size_t i) -> std::string_view {
        return i == 0 ? "NAMESPACE" : i == 1 ? "TIER" : k_columns[i - 2].title;
    });
    for (const auto& row : rows) {
        out += line([&row](std::size_t i) -> std::string_view { return row[i]; });
    }
    return out;
}

std::string render_latency(const nlohmann::json& stats) {
    const auto latency = stats.find("latency");
    if (latency == stats.end() || !latency->is_array() || latency->empty()) {
        return {};
    }
    constexpr std::array<std::string_view, 7> k_titles = {"NAMESPACE", "OP",     "TIER",    "COUNT",
                                                          "P50 µs",    "P99 µs", "P99.9 µs"};
    std::vector<std::array<std::string, k_titles.size()>> rows;
    for (const auto& row : *latency) {
        rows.push_back({row.at("ns").get<std::string>(), row.at("op").get<std::string>(),
                        row.at("tier").get<std::string>(),
                        fmt::format("{}", row.at("count").get<std::uint64_t>()),
                        fmt::format("{:.1f}", row.at("p50_us").get<double>()),
                        fmt::format("{:.1f}", row.at("p99_us").get<double>()),
                        fmt::format("{:.1f}", row.at("p999_us").get<double>())});
    }
    std::array<std::size_t, k_titles.size()> width{};
    for (std::size_t i = 0; i < k_titles.size(); ++i) {
        // "µ" is two bytes and one column.
        width[i] = k_titles[i].size() - (i >= 4 ? 1 : 0);
        for (const auto& row : rows) {
            width[i] = std::max(width[i], row[i].size());
        }
    }
    const auto line = [&](auto cell) {
        std::string text;
        for (std::size_t i = 0; i < width.size(); ++i) {
            const std::string_view value = cell(i);
            const std::size_t columns = value.size() - (value.find("µ") != std::string_view::npos);
            const std::string pad(width[i] - std::min(width[i], columns), ' ');
            text += i == 0 ? "" : "  ";
            text += i < 3 ? std::string(value) + pad : pad + std::string(value);
        }
        while (!text.empty() && text.back() == ' ') {
            text.pop_back();
        }
        return text + "\n";
    };
    std::string out = "\nlatency (from the request's start to its reply being queued)\n";
    out += line([&](std::size_t i) { return k_titles[i]; });
    for (const auto& row : rows) {
        out += line([&row](std::size_t i) -> std::string_view { return row[i]; });
    }
    return out;
}

} // namespace pt2cache::client::cli
