// RESP connection and server commands: HELLO, AUTH, CLIENT, SELECT, INFO,
// COMMAND, CONFIG, RESET.
#include <algorithm>
#include <array>
#include <limits>
#include <optional>
#include <unistd.h>

#include "daemon/connection.hpp"
#include "daemon/resp_session.hpp"
#include "daemon/resp_util.hpp"
#include "daemon/stats_report.hpp"
#include "proto/resp.hpp"

#include <fmt/format.h>

namespace pt2cache::daemon {

namespace {

using proto::resp::Writer;

// What we tell clients we are: new enough that tools enable modern features.
constexpr std::string_view k_redis_version = "7.0.0";

bool iequals(std::string_view a, std::string_view b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
               return resp_detail::ascii_upper(x) == resp_detail::ascii_upper(y);
           });
}

} // namespace

bool RespSession::authenticated() const {
    return m_authenticated || m_context.config.resp_password.empty();
}

namespace {

// Why a client name is refused: Redis's rule (no spaces, newlines or other
// characters outside '!'..'~', so that CLIENT LIST stays one line per
// client), and a length of our own, since every connection keeps its name.
std::optional<std::string> client_name_error(std::string_view name) {
    constexpr std::size_t k_max_client_name = 4096;
    if (name.size() > k_max_client_name) {
        return fmt::format("ERR Client names are at most {} bytes long", k_max_client_name);
    }
    if (std::any_of(name.begin(), name.end(), [](char c) { return c < '!' || c > '~'; })) {
        return "ERR Client names cannot contain spaces, newlines or special characters.";
    }
    return std::nullopt;
}

} // namespace

void RespSession::reset() {
    m_version = 2;
    m_authenticated = false;
    m_name.clear();
    discard_transaction();
}

RespSession::Next RespSession::auth(Args args) {
    Writer reply(m_out.bytes(), m_version);
    if (args.size() != 2 && args.size() != 3) {
        wrong_arity("auth");
    } else if (const auto refused = authenticate(args[1], args.back(), args.size() == 3)) {
        reply.error(*refused);
    } else {
        reply.simple("OK");
    }
    return Next::keep;
}

std::optional<std::string_view> RespSession::authenticate(std::string_view user,
                                                          std::string_view given, bool user_named) {
    const auto& password = m_context.config.resp_password;
    if (password.empty()) {
        if (user_named && user == "default") {
            // As Redis's passwordless default user: any password is accepted,
            // so a URL that carries credentials still works.
            m_authenticated = true;
            return std::nullopt;
        }
        return user_named ? "WRONGPASS invalid username-password pair or user is disabled."
                          : "ERR AUTH <password> called without any password configured for the "
                            "default user. Are you sure your configuration is correct?";
    }
    if ((user_named && user != "default") || given != password) {
        m_context.stats.daemon().protocol_errors++;
        return "WRONGPASS invalid username-password pair or user is disabled.";
    }
    m_authenticated = true;
    return std::nullopt;
}

RespSession::Next RespSession::hello(Args args) {
    int version = m_version;
    std::size_t i = 1;
    if (args.size() > 1) {
        // As Redis 7.0 reads it: an integer first, then a version it speaks.
        const auto requested = resp_detail::to_int(args[1]);
        if (!requested) {
            Writer(m_out.bytes(), m_version)
                .error("ERR Protocol version is not an integer or out of range");
            return Next::keep;
        }
        if (*requested != 2 && *requested != 3) {
            Writer(m_out.bytes(), m_version).error("NOPROTO unsupported protocol version");
            return Next::keep;
        }
        version = static_cast<int>(*requested);
        i = 2;
    }
    std::string name = m_name;
    for (; i < args.size(); ++i) {
        if (iequals(args[i], "AUTH") && i + 2 < args.size()) {
            // A failed AUTH fails HELLO, even on a connection that had
            // authenticated before (as in Redis).
            if (const auto refused = authenticate(args[i + 1], args[i + 2], true)) {
                Writer(m_out.bytes(), m_version).error(*refused);
                return Next::keep;
            }
            i += 2;
        } else if (iequals(args[i], "SETNAME") && i + 1 < args.size()) {
            if (const auto refused = client_name_error(args[++i])) {
                Writer(m_out.bytes(), m_version).error(*refused);
                return Next::keep;
            }
            name = std::string(args[i]);
        } else {
            Writer(m_out.bytes(), m_version)
                .error(fmt::format("ERR Syntax error in HELLO option '{}'",
                                   resp_detail::quoted(args[i])));
            return Next::keep;
        }
    }
    if (!authenticated()) {
        // Redis 7.0's wording (the version reported).
        Writer(m_out.bytes(), m_version)
            .error("NOAUTH HELLO must be called with the client already authenticated, otherwise "
                   "the HELLO AUTH <user> <pass> option can be used to authenticate the client "
                   "and select the RESP protocol version at the same time");
        return Next::keep;
    }
    m_version = version;
    m_name = std::move(name);
    Writer reply(m_out.bytes(), m_version);
    reply.map(7);
    reply.bulk("server").bulk("redis");
    reply.bulk("version").bulk(k_redis_version);
    reply.bulk("proto").integer(m_version);
    reply.bulk("id").integer(static_cast<std::int64_t>(m_connection.id()));
    reply.bulk("mode").bulk("standalone");
    reply.bulk("role").bulk("master");
    reply.bulk("modules").array(0);
    return Next::keep;
}

namespace {

// CLIENT's subcommands served here, with their arity as in Redis's command
// table (SETINFO and NO-TOUCH as in Redis 7.2, which redis-py 5 expects).
constexpr std::array<std::pair<std::string_view, int>, 7> k_client_subcommands = {{
    {"SETINFO", 4},
    {"SETNAME", 3},
    {"GETNAME", 2},
    {"ID", 2},
    {"INFO", 2},
    {"NO-EVICT", 3},
    {"NO-TOUCH", 3},
}};

} // namespace

std::optional<std::string> RespSession::client_subcommand_error(Args args) {
    const auto sub = args[1];
    const auto known = std::find_if(k_client_subcommands.begin(), k_client_subcommands.end(),
                                    [&](const auto& entry) { return iequals(sub, entry.first); });
    if (known == k_client_subcommands.end()) {
        return fmt::format("ERR unknown subcommand '{}'. Try CLIENT HELP.",
                           resp_detail::quoted(sub));
    }
    if (args.size() != static_cast<std::size_t>(known->second)) {
        std::string lower(known->first);
        std::transform(lower.begin(), lower.end(), lower.begin(),
                       [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; });
        return fmt::format("ERR wrong number of arguments for 'client|{}' command", lower);
    }
    return std::nullopt;
}

RespSession::Next RespSession::client(Args args) {
    Writer reply(m_out.bytes(), m_version);
    if (args.size() < 2) {
        wrong_arity("client");
        return Next::keep;
    }
    if (auto error = client_subcommand_error(args)) { // checked by execute() already
        reply.error(*error);
        return Next::keep;
    }
    const auto sub = args[1];
    if (iequals(sub, "SETINFO")) {
        reply.simple("OK");
    } else if (iequals(sub, "SETNAME")) {
        if (const auto refused = client_name_error(args[2])) {
            reply.error(*refused);
        } else {
            m_name = std::string(args[2]);
            reply.simple("OK");
        }
    } else if (iequals(sub, "GETNAME")) {
        if (m_name.empty()) {
            reply.null();
        } else {
            reply.bulk(m_name);
        }
    } else if (iequals(sub, "ID")) {
        reply.integer(static_cast<std::int64_t>(m_connection.id()));
    } else if (iequals(sub, "INFO")) {
        reply.verbatim(
            fmt::format("id={} name={} resp={}\n", m_connection.id(), m_name, m_version));
    } else { // NO-EVICT, NO-TOUCH
        reply.simple("OK");
    }
    return Next::keep;
}

RespSession::Next RespSession::select(Args args) {
    Writer reply(m_out.bytes(), m_version);
    if (args.size() != 2) {
        wrong_arity("select");
        return Next::keep;
    }
    // As Redis 7.0 reads the index (getIntFromObjectOrReply).
    const auto index = resp_detail::to_int(args[1]);
    if (!index) {
        reply.error("ERR value is not an integer or out of range");
    } else if (*index < std::numeric_limits<int>::min() ||
               *index > std::numeric_limits<int>::max()) {
        reply.error(fmt::format("ERR value is out of range, value must between {} and {}",
                                std::numeric_limits<int>::min(), std::numeric_limits<int>::max()));
    } else if (*index == 0) {
        reply.simple("OK");
    } else {
        reply.error("ERR DB index is out of range");
    }
    return Next::keep;
}

RespSession::Next RespSession::info(Args args) {
    const auto report = stats_report(m_context);
    const auto& daemon = report["daemon"];
    std::uint64_t hits = 0;
    std::uint64_t misses = 0;
    std::string tiers;
    for (const auto& [ns, per_tier] : report["namespaces"].items()) {
        for (const auto& [tier, counters] : per_tier.items()) {
            for (const auto& [name, value] : counters.items()) {
                tiers += fmt::format("pt2cache_{}_{}_{}:{}\r\n", ns, tier, name, value.dump());
            }
        }
        // A request hits once, in whichever tier; it misses only in the last.
        for (const auto& [tier, counters] : per_tier.items()) {
            hits += counters.value("hits", std::uint64_t(0));
        }
        if (per_tier.contains("disk")) {
            misses += per_tier["disk"].value("misses", std::uint64_t(0));
        }
    }
    const auto keys = key_count();

    std::string text;
    const auto section = [&](std::string_view name) {
        if (args.size() < 2) {
            return true;
        }
        return std::any_of(args.begin() + 1, args.end(), [&](std::string_view wanted) {
            return iequals(wanted, name) || iequals(wanted, "all") || iequals(wanted, "everything");
        });
    };
    if (section("server")) {
        text += fmt::format("# Server\r\nredis_version:{}\r\npt2cache_version:{}\r\n"
                            "redis_mode:standalone\r\nos:Linux\r\nprocess_id:{}\r\n"
                            "uptime_in_seconds:{}\r\n\r\n",
                            k_redis_version, PT2CACHE_VERSION, ::getpid(),
                            static_cast<std::uint64_t>(report.value("uptime_s", 0.0)));
    }
    if (section("clients")) {
        text += fmt::format("# Clients\r\nconnected_clients:{}\r\n\r\n",
                            daemon.value("connections_active", std::uint64_t(0)));
    }
    if (section("stats")) {
        text += fmt::format("# Stats\r\ntotal_connections_received:{}\r\n"
                            "total_commands_processed:{}\r\nrejected_connections:{}\r\n"
                            "keyspace_hits:{}\r\nkeyspace_misses:{}\r\n\r\n",
                            daemon.value("connections_accepted", std::uint64_t(0)),
                            daemon.value("requests", std::uint64_t(0)),
                            daemon.value("peers_refused", std::uint64_t(0)), hits, misses);
    }
    if (section("keyspace")) {
        text += fmt::format("# Keyspace\r\ndb0:keys={},expires=0,avg_ttl=0\r\n\r\n", keys);
    }
    if (section("pt2cache")) {
        text += "# Pt2cache\r\n" + tiers + "\r\n";
    }
    if (section("latencystats")) {
        // Redis 7's line format, one line per operation, tier and namespace.
        text += "# Latencystats\r\n";
        for (const auto& row : report["latency"]) {
            text += fmt::format(
                "latency_percentiles_usec_{}_{}_{}:p50={:.3f},p99={:.3f},p99.9={:.3f},count={}\r\n",
                row["op"].get<std::string>(), row["tier"].get<std::string>(),
                row["ns"].get<std::string>(), row["p50_us"].get<double>(),
                row["p99_us"].get<double>(), row["p999_us"].get<double>(),
                row["count"].get<std::uint64_t>());
        }
        text += "\r\n";
    }
    Writer(m_out.bytes(), m_version).verbatim(text);
    return Next::keep;
}

RespSession::Next RespSession::command(Args args) {
    Writer reply(m_out.bytes(), m_version);
    if (args.size() >= 2 && iequals(args[1], "DOCS")) {
        // An error (as from a server older than 7.0) makes redis-cli use its
        // built-in help table; an empty reply would leave it with no help.
        reply.error("ERR unknown subcommand 'DOCS'. Try COMMAND HELP.");
    } else if (args.size() >= 2 && iequals(args[1], "COUNT")) {
        reply.integer(20);
    } else if (args.size() >= 2 && iequals(args[1], "INFO")) {
        reply.array(args.size() - 2);
        for (std::size_t i = 2; i < args.size(); ++i) {
            reply.null_array();
        }
    } else {
        reply.array(0);
    }
    return Next::keep;
}

RespSession::Next RespSession::config(Args args) {
    Writer reply(m_out.bytes(), m_version);
    if (args.size() >= 3 && iequals(args[1], "GET")) {
        // What redis-benchmark asks for; we persist every entry to disk.
        std::vector<std::pair<std::string_view, std::string_view>> found;
        for (std::size_t i = 2; i < args.size(); ++i) {
            if (iequals(args[i], "save")) {
                found.emplace_back("save", "");
            } else if (iequals(args[i], "appendonly")) {
                found.emplace_back("appendonly", "no");
            }
        }
        reply.map(found.size());
        for (const auto& [name, value] : found) {
            reply.bulk(name).bulk(value);
        }
        return Next::keep;
    }
    reply.error("ERR CONFIG is limited to CONFIG GET in pt2cached");
    return Next::keep;
}

} // namespace pt2cache::daemon
