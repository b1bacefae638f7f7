// SPDX-License-Identifier: MIT
#include "client/cli/top_model.hpp"

#include <algorithm>
#include <array>
#include <string_view>
#include <tuple>

#include "client/cli/format.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace pt2cache::client::cli {

namespace {

using Json = nlohmann::json;

std::uint64_t number(const Json& object, std::string_view field) {
    if (!object.is_object()) {
        return 0;
    }
    const auto it = object.find(field);
    return it != object.end() && it->is_number() ? it->get<std::uint64_t>() : 0;
}

double real(const Json& object, std::string_view field) {
    if (!object.is_object()) {
        return 0;
    }
    const auto it = object.find(field);
    return it != object.end() && it->is_number() ? it->get<double>() : 0;
}

std::string text(const Json& object, std::string_view field) {
    if (!object.is_object()) {
        return {};
    }
    const auto it = object.find(field);
    if (it == object.end() || it->is_null()) {
        return {};
    }
    return it->is_string() ? it->get<std::string>() : it->dump();
}

const Json& member(const Json& object, std::string_view field) {
    static const Json null;
    if (!object.is_object()) {
        return null;
    }
    const auto it = object.find(field);
    return it == object.end() ? null : *it;
}

// A counter's growth; a counter that went down (a reset) grew by its value.
double delta(std::uint64_t now, std::uint64_t before) {
    return static_cast<double>(now >= before ? now - before : now);
}

// Per namespace, summed as docs/operations.md counts: a lookup counts in each
// tier it consults up to the one that hits, so the first tier's hits + misses
// are all lookups; a put counts in each tier written.
struct Totals {
    std::uint64_t lookups = 0;
    std::uint64_t hits = 0;
    std::uint64_t puts = 0;
};

Totals namespace_totals(const Json& tiers) {
    Totals totals;
    if (!tiers.is_object()) {
        return totals;
    }
    for (const auto& [_, tier] : tiers.items()) {
        totals.lookups = std::max(totals.lookups, number(tier, "hits") + number(tier, "misses"));
        totals.hits += number(tier, "hits");
        totals.puts = std::max(totals.puts, number(tier, "puts"));
    }
    return totals;
}

bool aggregate(std::string_view name) {
    return name.empty() || name == "all" || name == "*" || name == "any" || name == "total";
}

// The "latency" entry of `op` (and `ns`, when given): an aggregate namespace
// and tier when the daemon reports one, else the busiest matching entry.
std::optional<Latency> find_latency(const Json& stats, std::string_view op, const std::string* ns) {
    const auto& entries = member(stats, "latency");
    if (!entries.is_array()) {
        return std::nullopt;
    }
    std::optional<Latency> best;
    std::tuple<bool, bool, std::uint64_t> best_rank{};
    for (const auto& entry : entries) {
        if (!entry.is_object() || text(entry, "op") != op) {
            continue;
        }
        const std::string entry_ns = text(entry, "ns");
        if (ns != nullptr && entry_ns != *ns) {
            continue;
        }
        const auto p50 = entry.find("p50_us");
        const auto p99 = entry.find("p99_us");
        const std::uint64_t count = number(entry, "count");
        if (count == 0 || p50 == entry.end() || !p50->is_number() || p99 == entry.end() ||
            !p99->is_number()) {
            continue;
        }
        const std::tuple<bool, bool, std::uint64_t> rank{ns != nullptr || aggregate(entry_ns),
                                                         aggregate(text(entry, "tier")), count};
        if (!best || rank > best_rank) {
            best = Latency{p50->get<double>(), p99->get<double>()};
            best_rank = rank;
        }
    }
    return best;
}

std::optional<Level> level(const Json& tier) {
    if (!tier.is_object()) {
        return std::nullopt;
    }
    return Level{number(tier, "bytes"), number(tier, "count"), number(tier, "capacity")};
}

double compile_saved_ms(const Json& stats) {
    double total = 0;
    const auto& compile = member(stats, "compile");
    if (compile.is_object()) {
        for (const auto& [_, row] : compile.items()) {
            total += static_cast<double>(number(row, "saved_ms"));
        }
    }
    return total;
}

std::optional<RemoteView> remote_view(const Json& now, const Json* before, double elapsed_s) {
    const auto& tier = member(member(now, "tiers"), "remote");
    if (!tier.is_object() || !tier.contains("endpoint")) {
        return std::nullopt;
    }
    RemoteView view;
    view.state = text(tier, "state");
    view.endpoint = text(tier, "endpoint");
    view.read_only = tier.value("read_only", false);
    view.breaker_open = view.state.rfind("suspended", 0) == 0;
    view.queue = *level(tier);
    if (before == nullptr) {
        return view;
    }
    const auto& counters = member(now, "remote");
    const auto& old = member(*before, "remote");
    const auto grew = [&](std::string_view field) {
        return delta(number(counters, field), number(old, field));
    };
    const double failures = grew("errors") + grew("timeouts") + grew("protocol_errors");
    const double operations = grew("hits") + grew("misses") + grew("written") + failures;
    view.errors_per_s = failures / elapsed_s;
    if (operations > 0) {
        view.error_ratio = failures / operations;
    }
    return view;
}

std::string bytes_cell(std::uint64_t bytes) {
    std::string out = human_bytes(bytes);
    out.erase(std::remove(out.begin(), out.end(), ' '), out.end());
    return out;
}

} // namespace

std::string rate_text(const std::optional<double>& per_s) {
    return per_s ? fmt::format("{:.1f}", *per_s) : std::string("-");
}

std::string ratio_text(const std::optional<double>& ratio) {
    return ratio ? fmt::format("{:.1f}%", *ratio * 100) : std::string("-");
}

std::string latency_text(const std::optional<Latency>& latency, bool p99) {
    if (!latency) {
        return "-";
    }
    const double us = p99 ? latency->p99_us : latency->p50_us;
    return us >= 10'000 ? fmt::format("{:.1f}ms", us / 1000) : fmt::format("{:.0f}us", us);
}

TopFrame make_top_frame(const Json& now, const Json* before, double elapsed_s) {
    const auto& namespaces = now.at("namespaces");
    if (before != nullptr &&
        (text(*before, "pid") != text(now, "pid") ||
         real(*before, "uptime_s") > real(now, "uptime_s") || elapsed_s <= 0)) {
        before = nullptr; // another daemon, or no interval: no rates
    }

    TopFrame frame;
    frame.version = text(now, "version");
    frame.pid = text(now, "pid");
    frame.uptime_s = real(now, "uptime_s");
    if (before != nullptr) {
        frame.interval_s = elapsed_s;
    }
    const std::uint64_t active = number(member(now, "daemon"), "connections_active");
    frame.clients = active > 0 ? active - 1 : 0;
    frame.get_latency = find_latency(now, "get", nullptr);
    frame.put_latency = find_latency(now, "put", nullptr);

    frame.compile_saved_s = compile_saved_ms(now) / 1000;
    if (before != nullptr) {
        frame.compile_saved_per_s =
            std::max(0.0, frame.compile_saved_s - compile_saved_ms(*before) / 1000) / elapsed_s;
    }

    const auto& tiers = member(now, "tiers");
    frame.memory = level(member(tiers, "memory"));
    frame.disk = level(member(tiers, "disk"));
    if (const auto& queue = member(member(tiers, "disk"), "write_queue"); queue.is_object()) {
        frame.disk_queue = DiskQueue{number(queue, "entries"), number(queue, "bytes"),
                                     number(queue, "capacity"), real(queue, "oldest_age_s")};
    }
    frame.remote = remote_view(now, before, elapsed_s);

    double all_ops = 0;
    double all_lookups = 0;
    double all_hits = 0;
    std::vector<std::pair<double, NamespaceRow>> rows;
    for (const auto& [ns, tiers_of_ns] : namespaces.items()) {
        NamespaceRow row;
        row.ns = ns;
        row.get_latency = find_latency(now, "get", &row.ns);
        double ops = 0;
        const Totals totals = namespace_totals(tiers_of_ns);
        if (before != nullptr) {
            const Totals old = namespace_totals(member(member(*before, "namespaces"), ns));
            const double lookups = delta(totals.lookups, old.lookups);
            const double hits = delta(totals.hits, old.hits);
            const double puts = delta(totals.puts, old.puts);
            row.gets_per_s = lookups / elapsed_s;
            row.puts_per_s = puts / elapsed_s;
            if (lookups > 0) {
                row.hit_ratio = std::min(1.0, hits / lookups);
            }
            ops = lookups + puts;
            all_ops += ops;
            all_lookups += lookups;
            all_hits += hits;
        }
        rows.emplace_back(before != nullptr ? ops : static_cast<double>(totals.lookups),
                          std::move(row));
    }
    if (before != nullptr) {
        frame.ops_per_s = all_ops / elapsed_s;
        if (all_lookups > 0) {
            frame.hit_ratio = std::min(1.0, all_hits / all_lookups);
        }
    }
    std::stable_sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
        return a.first != b.first ? a.first > b.first : a.second.ns < b.second.ns;
    });
    for (auto& [_, row] : rows) {
        frame.namespaces.push_back(std::move(row));
    }
    return frame;
}

std::string top_plain_line(const TopFrame& frame, const std::string& clock) {
    std::string line =
        fmt::format("{} ops/s={} hit={} get_p50={} get_p99={} saved={:.1f}s clients={}", clock,
                    rate_text(frame.ops_per_s), ratio_text(frame.hit_ratio),
                    latency_text(frame.get_latency, false), latency_text(frame.get_latency, true),
                    frame.compile_saved_s, frame.clients);
    if (frame.disk) {
        line += fmt::format(" disk={}/{}", bytes_cell(frame.disk->bytes),
                            bytes_cell(frame.disk->capacity));
    } else {
        line += " disk=off";
    }
    if (frame.disk_queue) {
        line += fmt::format(" disk_queue={} disk_queue_age={:.1f}s", frame.disk_queue->entries,
                            frame.disk_queue->oldest_age_s);
    }
    if (frame.remote) {
        std::string state = frame.remote->breaker_open ? "breaker-open" : frame.remote->state;
        std::replace(state.begin(), state.end(), ' ', '-');
        line += fmt::format(" remote={}{} remote_queue={} remote_err/s={}", state,
                            frame.remote->read_only ? ",read-only" : "", frame.remote->queue.count,
                            rate_text(frame.remote->errors_per_s));
    } else {
        line += " remote=off";
    }
    return line;
}

} // namespace pt2cache::client::cli
