// SPDX-License-Identifier: MIT
#include "daemon/metrics_text.hpp"

#include <initializer_list>
#include <string_view>
#include <utility>

#include "daemon/context.hpp"
#include "daemon/stats_report.hpp"

#include <fmt/format.h>

namespace pt2cache::daemon {

namespace {

using Labels = std::initializer_list<std::pair<std::string_view, std::string_view>>;

// Histogram bucket bounds: 2^k ns for k in [10, 36] (1.024 µs to about 68.7 s).
constexpr int k_first_bound_exponent = 10;

std::string escape_label(std::string_view value) {
    std::string out;
    out.reserve(value.size());
    for (const char c : value) {
        if (c == '\\') {
            out += "\\\\";
        } else if (c == '"') {
            out += "\\\"";
        } else if (c == '\n') {
            out += "\\n";
        } else {
            out += c;
        }
    }
    return out;
}

class Writer {
public:
    explicit Writer(std::string& out)
        : m_out(out) {}

    void family(std::string_view name, std::string_view type, std::string_view help) {
        fmt::format_to(std::back_inserter(m_out), "# HELP {} {}\n# TYPE {} {}\n", name, help, name,
                       type);
    }

    template <typename Value>
    void sample(std::string_view name, Labels labels, Value value,
                std::string_view extra_label = {}, std::string_view extra_value = {}) {
        m_out += name;
        if (labels.size() != 0 || !extra_label.empty()) {
            m_out += '{';
            bool first = true;
            for (const auto& [label, text] : labels) {
                fmt::format_to(std::back_inserter(m_out), "{}{}=\"{}\"", first ? "" : ",", label,
                               escape_label(text));
                first = false;
            }
            if (!extra_label.empty()) {
                fmt::format_to(std::back_inserter(m_out), "{}{}=\"{}\"", first ? "" : ",",
                               extra_label, extra_value);
            }
            m_out += '}';
        }
        fmt::format_to(std::back_inserter(m_out), " {}\n", value);
    }

private:
    std::string& m_out;
};

std::uint64_t number(const nlohmann::json& object, std::string_view key) {
    const auto it = object.find(key);
    return it != object.end() && it->is_number() ? it->get<std::uint64_t>() : 0;
}

struct Field {
    std::string_view key;  // in the STATS JSON object
    std::string_view name; // metric name
    std::string_view type; // "counter" or "gauge"
    std::string_view help;
};

constexpr Field k_tier_fields[] = {
    {"hits", "pt2cache_tier_hits_total", "counter", "Lookups answered by the tier"},
    {"misses", "pt2cache_tier_misses_total", "counter", "Lookups the tier could not answer"},
    {"puts", "pt2cache_tier_puts_total", "counter", "Entries written into the tier"},
    {"bytes_in", "pt2cache_tier_stored_bytes_total", "counter",
     "Value bytes written into the tier"},
    {"bytes_out", "pt2cache_tier_served_bytes_total", "counter", "Value bytes served by the tier"},
    {"evictions", "pt2cache_tier_evictions_total", "counter", "Entries evicted from the tier"},
    {"corrupt", "pt2cache_tier_corrupt_total", "counter",
     "Entries that failed verification in the tier"},
    {"errors", "pt2cache_tier_errors_total", "counter", "Failed tier operations"},
};

constexpr Field k_daemon_fields[] = {
    {"connections_accepted", "pt2cache_connections_accepted_total", "counter",
     "Connections accepted on the socket"},
    {"connections_active", "pt2cache_connections_active", "gauge", "Connections open now"},
    {"peers_refused", "pt2cache_peers_refused_total", "counter",
     "Connections closed: peer of another uid"},
    {"connections_over_limit", "pt2cache_connections_over_limit_total", "counter",
     "Connections refused over daemon.max_connections(_per_process)"},
    {"protocol_errors", "pt2cache_protocol_errors_total", "counter",
     "Connections closed for a protocol error"},
    {"requests", "pt2cache_frames_total", "counter",
     "Requests of any kind received (native frames and RESP commands)"},
    {"inflight_refused", "pt2cache_inflight_refused_total", "counter",
     "Requests refused: no room in daemon.max_inflight_bytes"},
    {"stalled_requests", "pt2cache_stalled_requests_total", "counter",
     "Connections closed: holding in-flight budget, under 64 KiB received or read in 10 s"},
    {"reads_refused", "pt2cache_reads_refused_total", "counter",
     "GETs refused: no room in daemon.max_reply_bytes for a large value on disk"},
    {"small_store_recoveries", "pt2cache_small_store_recoveries_total", "counter",
     "Unusable small.mdb files moved aside and replaced"},
    {"small_store_salvaged", "pt2cache_small_store_salvaged_total", "counter",
     "Entries of moved-aside small.mdb files put back"},
    {"inflight_bytes", "pt2cache_inflight_bytes", "gauge", "Request bytes being received"},
    {"inflight_limit", "pt2cache_inflight_limit_bytes", "gauge", "daemon.max_inflight_bytes"},
    {"reply_bytes", "pt2cache_reply_bytes", "gauge", "Reply bytes queued for clients"},
    {"reply_limit", "pt2cache_reply_limit_bytes", "gauge", "daemon.max_reply_bytes"},
    {"read_bytes", "pt2cache_read_bytes", "gauge",
     "Bytes of large values read from disk that replies still hold"},
};

constexpr Field k_remote_fields[] = {
    {"hits", "pt2cache_remote_hits_total", "counter", "GETs Redis answered with a value"},
    {"misses", "pt2cache_remote_misses_total", "counter", "GETs Redis answered with nil"},
    {"errors", "pt2cache_remote_errors_total", "counter", "Failed Redis operations (not timeouts)"},
    {"timeouts", "pt2cache_remote_timeouts_total", "counter",
     "Redis operations past their deadline"},
    {"suspensions", "pt2cache_remote_suspensions_total", "counter",
     "Times the circuit breaker opened"},
    {"skipped", "pt2cache_remote_skipped_total", "counter",
     "Requests answered locally: remote suspended or probing"},
    {"coalesced", "pt2cache_remote_coalesced_total", "counter",
     "GETs that waited for another GET of their key"},
    {"backfills", "pt2cache_remote_backfills_total", "counter",
     "Remote hits copied into disk and memory"},
    {"queued", "pt2cache_remote_queued_total", "counter",
     "Writes accepted by the write-behind queue"},
    {"written", "pt2cache_remote_written_total", "counter", "Writes Redis acknowledged"},
    {"queue_drops", "pt2cache_remote_queue_drops_total", "counter",
     "Writes dropped: queue full, or failed 3 times"},
    {"shutdown_drops", "pt2cache_remote_shutdown_drops_total", "counter",
     "Writes still queued at the shutdown deadline"},
    {"oversize_skips", "pt2cache_remote_oversize_skips_total", "counter",
     "Values larger than Redis accepts: not sent"},
    {"protocol_errors", "pt2cache_remote_protocol_errors_total", "counter",
     "Redis replies that broke RESP2 or its limits"},
    {"queue_bytes", "pt2cache_remote_queue_bytes", "gauge", "Bytes waiting in the write queue"},
    {"queue_entries", "pt2cache_remote_queue_entries", "gauge",
     "Entries waiting in the write queue"},
};

constexpr Field k_compile_fields[] = {
    {"lookups", "pt2cache_cxx_lookups_total", "counter", "pt2cache-cxx manifest lookups"},
    {"hits", "pt2cache_cxx_hits_total", "counter", "pt2cache-cxx compile results served"},
    {"misses", "pt2cache_cxx_misses_total", "counter", "pt2cache-cxx lookups without a result"},
    {"builds", "pt2cache_cxx_builds_total", "counter", "pt2cache-cxx compile results stored"},
};

void write_fields(Writer& writer, const nlohmann::json& object, std::span<const Field> fields) {
    for (const auto& field : fields) {
        writer.family(field.name, field.type, field.help);
        writer.sample(field.name, {}, number(object, field.key));
    }
}

// One histogram's samples (its family written before): buckets at powers of
// two of nanoseconds, in seconds.
void write_histogram(Writer& writer, std::string_view name, const Labels& labels,
                     const store::latency::Snapshot& snapshot) {
    const std::string bucket = fmt::format("{}_bucket", name);
    for (int e = k_first_bound_exponent; e <= store::latency::k_max_exponent; ++e) {
        const std::uint64_t bound = std::uint64_t{1} << e;
        const auto le = fmt::format("{}", static_cast<double>(bound) / 1e9);
        writer.sample(bucket, labels, snapshot.count_at_most(bound - 1), "le", le);
    }
    const auto total = snapshot.count();
    writer.sample(bucket, labels, total, "le", "+Inf");
    writer.sample(fmt::format("{}_sum", name), labels, static_cast<double>(snapshot.sum_ns) / 1e9);
    writer.sample(fmt::format("{}_count", name), labels, total);
}

void write_latency(Writer& writer, const std::vector<store::LatencySeries>& latency) {
    constexpr std::string_view name = "pt2cache_request_duration_seconds";
    writer.family(name, "histogram",
                  "Time from a request's start to its reply being queued, by operation, the "
                  "tier that answered (none: a miss or not a lookup) and namespace");
    for (const auto& series : latency) {
        const Labels labels = {{"op", store::latency_op_name(series.op)},
                               {"tier", store::latency_tier_name(series.tier)},
                               {"ns", series.ns}};
        write_histogram(writer, name, labels, series.snapshot);
    }
}

} // namespace

std::string render_prometheus(const nlohmann::json& report,
                              const std::vector<store::LatencySeries>& latency,
                              const store::latency::Snapshot& small_store_writes) {
    std::string out;
    out.reserve(16 * 1024);
    Writer writer(out);

    writer.family("pt2cache_info", "gauge", "Always 1; the daemon's version and pid as labels");
    const auto version = report.value("version", std::string());
    const auto pid = std::to_string(report.value("pid", 0L));
    writer.sample("pt2cache_info", {{"version", version}, {"pid", pid}}, 1);
    writer.family("pt2cache_uptime_seconds", "gauge", "Seconds since the daemon started");
    writer.sample("pt2cache_uptime_seconds", {}, report.value("uptime_s", 0.0));
    writer.family("pt2cache_since_reset_seconds", "gauge",
                  "Seconds since the daemon started or its counters were zeroed");
    writer.sample("pt2cache_since_reset_seconds", {}, report.value("since_reset_s", 0.0));

    writer.family("pt2cache_requests_total", "counter",
                  "Cache requests by operation, namespace and result (ok, miss, error)");
    for (const auto& row : report.value("requests", nlohmann::json::array())) {
        const auto op = row.value("op", std::string());
        const auto ns = row.value("ns", std::string());
        const auto result = row.value("result", std::string());
        writer.sample("pt2cache_requests_total", {{"op", op}, {"ns", ns}, {"result", result}},
                      number(row, "count"));
    }
    write_latency(writer, latency);

    const auto namespaces = report.value("namespaces", nlohmann::json::object());
    for (const auto& field : k_tier_fields) {
        writer.family(field.name, field.type, field.help);
        for (const auto& [ns, tiers] : namespaces.items()) {
            for (const auto& [tier, counters] : tiers.items()) {
                writer.sample(field.name, {{"ns", ns}, {"tier", tier}},
                              number(counters, field.key));
            }
        }
    }

    const auto summary = report.value("tiers", nlohmann::json::object());
    constexpr std::pair<std::string_view, std::string_view> k_tier_gauges[] = {
        {"bytes", "pt2cache_tier_size_bytes"},
        {"count", "pt2cache_tier_entries"},
        {"capacity", "pt2cache_tier_capacity_bytes"},
    };
    for (const auto& [key, name] : k_tier_gauges) {
        writer.family(name, "gauge",
                      key == "bytes"   ? "Value bytes held by the local tier"
                      : key == "count" ? "Entries held by the local tier"
                                       : "The local tier's configured capacity in bytes");
        for (const std::string_view tier : {"memory", "disk"}) {
            const auto it = summary.find(tier);
            if (it != summary.end() && it->is_object()) {
                writer.sample(name, {{"tier", tier}}, number(*it, key));
            }
        }
    }

    write_fields(writer, report.value("daemon", nlohmann::json::object()), k_daemon_fields);
    if (summary.value("disk", nlohmann::json::object()).contains("small_store_writes")) {
        constexpr std::string_view name = "pt2cache_small_store_write_seconds";
        writer.family(name, "histogram",
                      "Time each transaction writing put entries into small.mdb took, its "
                      "commit's fdatasync included");
        write_histogram(writer, name, {}, small_store_writes);
    }

    const auto remote = report.value("remote", nlohmann::json::object());
    write_fields(writer, remote, k_remote_fields);
    writer.family("pt2cache_remote_state", "gauge",
                  "1 for the remote tier's current state (disabled, connecting, connected, "
                  "suspended), 0 for the others");
    const auto state = remote.value("state", std::string("disabled"));
    for (const std::string_view name : {"disabled", "connecting", "connected", "suspended"}) {
        writer.sample("pt2cache_remote_state", {{"state", name}},
                      std::string_view(state).starts_with(name) ? 1 : 0);
    }

    const auto cxx =
        report.value("compile", nlohmann::json::object()).value("cxx", nlohmann::json::object());
    write_fields(writer, cxx, k_compile_fields);
    writer.family("pt2cache_cxx_saved_seconds_total", "counter",
                  "Build time of the pt2cache-cxx compile results served");
    writer.sample("pt2cache_cxx_saved_seconds_total", {},
                  static_cast<double>(number(cxx, "saved_ms")) / 1e3);

    const auto hashes = report.value("file_hashes", nlohmann::json::object());
    writer.family("pt2cache_file_hashes_cached", "gauge", "Files in HASH_FILES' hash cache");
    writer.sample("pt2cache_file_hashes_cached", {}, number(hashes, "cached"));
    writer.family("pt2cache_file_hash_hits_total", "counter",
                  "HASH_FILES answers from the hash cache");
    writer.sample("pt2cache_file_hash_hits_total", {}, number(hashes, "hits"));
    writer.family("pt2cache_files_hashed_total", "counter", "Files HASH_FILES read and hashed");
    writer.sample("pt2cache_files_hashed_total", {}, number(hashes, "hashed"));
    writer.family("pt2cache_hashed_bytes_total", "counter", "Bytes HASH_FILES read and hashed");
    writer.sample("pt2cache_hashed_bytes_total", {}, number(hashes, "bytes_hashed"));
    return out;
}

std::string prometheus_text(Context& context) {
    return render_prometheus(stats_report(context), context.stats.latency(),
                             context.stats.daemon().small_store_writes.snapshot());
}

} // namespace pt2cache::daemon
