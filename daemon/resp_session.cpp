#include "daemon/resp_session.hpp"

#include <algorithm>
#include <array>
#include <optional>

#include "daemon/connection.hpp"
#include "daemon/log.hpp"
#include "daemon/offload.hpp"
#include "daemon/resp_util.hpp"
#include "daemon/store/log.hpp"
#include "proto/frame.hpp"
#include "proto/inductor_keys.hpp"
#include "proto/messages.hpp"
#include "proto/resp.hpp"

namespace pt2cache::daemon {

namespace {

using proto::resp::Writer;

// What a command may hold beyond its value (command name, key, options).
constexpr std::uint64_t k_command_slack = 1 << 20;

// The longest PING or ECHO message echoed back, as for a native PING.
constexpr std::size_t k_max_echo = proto::k_max_ping;

// Longer than every command's name.
constexpr std::size_t k_max_command_name = 16;

// The argument vector kept for the next command: a command of more arguments
// (MGET of many keys) gets a new one, freed after it.
constexpr std::size_t k_kept_args = 1024;

} // namespace

using namespace resp_detail;

awaitable<void> serve_resp(Connection& connection) {
    RespSession session(connection);
    co_await session.run();
}

RespSession::RespSession(Connection& connection)
    : m_connection(connection)
    , m_context(connection.context())
    , m_latency(m_context.stats)
    , m_queue_lease(m_context.inflight) {}

RespSession::~RespSession() {
    m_connection.hold_for_session(0);
}

awaitable<void> RespSession::run() {
    auto& input = m_connection.input();
    std::size_t want = 0;
    // The next parse waits until the input holds this much: the parser's
    // lower bound for the incomplete command (see parse_command).
    std::size_t parse_at = 1;
    // Requests read since the last batch of replies went out.
    std::size_t requests = 0;
    // Where the parse of a command that has arrived in part was left.
    proto::resp::Resume resume;
    for (;;) {
        while (input.size() >= parse_at) {
            const auto max_value = m_context.max_value.load();
            const proto::resp::Limits limits{std::max(proto::resp::k_max_bulk, max_value),
                                             max_value, !authenticated()};
            auto result =
                proto::resp::parse_command(input.readable(), limits, std::move(m_args), &resume);
            if (auto* need = std::get_if<proto::resp::NeedMore>(&result)) {
                // One command may hold a value and a little more; anything
                // longer is not a command this front door serves.
                if (input.size() + need->bytes > max_value + k_command_slack) {
                    result = proto::resp::ProtocolError{
                        fmt::format("command longer than max_value_size + {} bytes "
                                    "(the query buffer limit)",
                                    k_command_slack)};
                } else if (input.size() + need->bytes >
                           InputBuffer::k_base + m_context.inflight.limit()) {
                    // It could never fit the in-flight budget: refused as
                    // soon as its length arrives, not after waiting for room
                    // (or before requests that fit give way to it). Replies
                    // due go out first.
                    if (!m_sets.empty()) {
                        (void)co_await flush_sets();
                    }
                    m_context.stats.daemon().inflight_refused++;
                    logger("resp").warn("[{}] a {} byte command is longer than "
                                        "daemon.max_inflight_bytes ({} bytes); closing",
                                        m_connection.id(), input.size() + need->bytes,
                                        m_context.inflight.limit());
                    co_await m_connection.flush(m_out);
                    co_return;
                } else {
                    // Grow by what actually arrives (at most doubling per
                    // read), never by what a length claims: a client that
                    // announces 500 MiB and sends nothing must not cost 500 MiB.
                    want = std::min(need->bytes, std::max<std::size_t>(input.size(), 64 * 1024));
                    parse_at = input.size() + need->bytes;
                    break;
                }
            }
            // Replies due before an error or a command that is not a
            // deferred SET go out first, in order.
            const bool deferred = std::holds_alternative<proto::resp::Command>(result) &&
                                  defer_set(std::get<proto::resp::Command>(result).args);
            if (!deferred && !m_sets.empty()) {
                const auto flushed = co_await flush_sets();
                if (flushed == Next::close) {
                    co_await m_connection.flush(m_out);
                    co_return;
                }
            }
            if (auto* error = std::get_if<proto::resp::ProtocolError>(&result)) {
                m_context.stats.daemon().protocol_errors++;
                // The message may quote the client's bytes: escaped. A line
                // a second at most, as for native frames.
                static store::LogThrottle throttle(1'000);
                if (const auto left_out = throttle.take()) {
                    logger("resp").warn("[{}] protocol error: {:?}; closing{}", m_connection.id(),
                                        error->message, store::left_out_note(*left_out));
                }
                Writer(m_out.bytes(), m_version).error("ERR Protocol error: " + error->message);
                co_await m_connection.flush(m_out);
                co_return;
            }
            if (auto* large = std::get_if<proto::resp::TooLarge>(&result)) {
                // Most likely a SET of a value over the limit: no -ERR (see
                // the header), but replies already due still go out.
                refuse("a command",
                       fmt::format("argument {} announces {} bytes, over max_value_size {}",
                                   large->index + 1, large->length, max_value));
                co_await m_connection.flush(m_out);
                co_return;
            }
            auto& command = std::get<proto::resp::Command>(result);
            // Plain statements: GCC 12 miscompiles a co_await in a condition.
            auto next = Next::keep;
            if (deferred) {
                if (m_sets.size() >= k_max_deferred_sets || m_set_bytes >= k_max_deferred_bytes) {
                    next = co_await flush_sets();
                }
            } else if (!command.args.empty()) {
                if (const auto served = quick(command.args)) {
                    next = *served;
                } else {
                    next = co_await execute(command.args);
                    // The next request starts now, whether or not this
                    // one was measured (PING, INFO and the like are not).
                    m_latency.mark();
                }
            }
            input.consume(command.consumed);
            ++requests;
            m_args = std::move(command.args);
            if (m_args.capacity() > k_kept_args) {
                // One long command must not cost every later one. (Not
                // `m_args = {}`: that assigns an empty list, keeping capacity.)
                m_args = std::vector<std::string_view>();
            }
            want = 0;
            parse_at = 1;
            if (next == Next::close) {
                co_await m_connection.flush(m_out);
                co_return;
            }
            if (m_connection.needs_room(m_out)) {
                const bool room = co_await m_connection.make_room(m_out);
                if (!room) {
                    co_return;
                }
            }
        }
        if (!m_sets.empty()) {
            const auto flushed = co_await flush_sets();
            if (flushed == Next::close) {
                co_await m_connection.flush(m_out);
                co_return;
            }
        }
        const bool more = co_await m_connection.next_batch(m_out, want, requests);
        if (!more) {
            co_return;
        }
        requests = 0;
        m_latency.mark();
    }
}

namespace {

// A command and its number of arguments, the name included, as Redis's
// command table gives it: n exactly, or -n for at least n. execute() checks
// it before anything else, as Redis does.
struct Arity {
    std::string_view name;
    int arity;
    bool queued = true; // served by dispatch(), so MULTI queues it
};

constexpr std::array<Arity, 21> k_commands = {{
    {"GET", 2},          {"SET", -3},        {"MGET", -2},          {"EXISTS", -2},
    {"DEL", -2},         {"UNLINK", -2},     {"DBSIZE", 1},         {"PING", -1},
    {"ECHO", 2},         {"SELECT", 2},      {"CLIENT", -2},        {"INFO", -1},
    {"COMMAND", -1},     {"CONFIG", -2},     {"HELLO", -1},         {"AUTH", -2},
    {"MULTI", 1, false}, {"EXEC", 1, false}, {"DISCARD", 1, false}, {"RESET", 1, false},
    {"QUIT", -1, false},
}};

const Arity* find_command(std::string_view name) {
    const auto it = std::find_if(k_commands.begin(), k_commands.end(),
                                 [&](const Arity& command) { return command.name == name; });
    return it == k_commands.end() ? nullptr : &*it;
}

bool arity_fits(const Arity& command, std::size_t count) {
    return command.arity >= 0 ? count == std::size_t(command.arity)
                              : count >= std::size_t(-command.arity);
}

} // namespace

awaitable<RespSession::Next> RespSession::execute(Args args) {
    m_context.stats.daemon().requests++;
    // No command name is longer: a longer one is unknown, and is not copied.
    const auto name = upper(args[0].substr(0, k_max_command_name));
    Writer reply(m_out.bytes(), m_version);

    // Checked first, as Redis does: a transaction with a malformed command
    // is not run at all, not run in part.
    if (const Arity* command = find_command(name);
        command != nullptr && !arity_fits(*command, args.size())) {
        std::string lower(command->name);
        std::transform(lower.begin(), lower.end(), lower.begin(),
                       [](char c) { return static_cast<char>(c - 'A' + 'a'); });
        wrong_arity(lower);
        m_multi_failed = m_in_multi;
        co_return Next::keep;
    }
    if (name == "CLIENT" && args.size() >= 2) {
        if (auto error = client_subcommand_error(args)) {
            reply.error(*error);
            m_multi_failed = m_in_multi;
            co_return Next::keep;
        }
    }
    if (name == "QUIT") {
        reply.simple("OK");
        co_return Next::close;
    }
    // Allowed before authentication (and run at once, not queued by MULTI).
    if (!m_in_multi && (name == "HELLO" || name == "AUTH")) {
        co_return co_await dispatch(name, args);
    }
    if (name == "RESET") {
        reset();
        reply.simple("RESET");
        co_return Next::keep;
    }
    if (!authenticated()) {
        m_multi_failed = m_in_multi;
        reply.error("NOAUTH Authentication required.");
        co_return Next::keep;
    }
    if (name == "MULTI") {
        if (m_in_multi) {
            reply.error("ERR MULTI calls can not be nested");
        } else {
            m_in_multi = true;
            reply.simple("OK");
        }
        co_return Next::keep;
    }
    if (name == "EXEC") {
        co_return co_await exec();
    }
    if (name == "DISCARD") {
        if (!m_in_multi) {
            reply.error("ERR DISCARD without MULTI");
        } else {
            discard_transaction();
            reply.simple("OK");
        }
        co_return Next::keep;
    }
    if (m_in_multi) {
        co_return co_await queue(name, args);
    }
    co_return co_await dispatch(name, args);
}

std::uint64_t RespSession::queued_bytes(Args args) {
    std::uint64_t bytes = 0;
    for (const auto arg : args) {
        bytes += arg.size() + sizeof(std::string);
    }
    return bytes;
}

void RespSession::discard_transaction() {
    m_in_multi = false;
    m_multi_failed = false;
    m_queued.clear();
    m_queued_bytes = 0;
    release_queue(0);
}

void RespSession::release_queue(std::uint64_t bytes) {
    m_queue_lease.resize_down(bytes);
    hold_queue();
}

void RespSession::hold_queue() {
    // A transaction typed by hand (redis-cli) holds a few bytes, and may
    // take its time; one that holds a large share of the budget may not.
    m_connection.hold_for_session(m_queue_lease.bytes() >= k_command_slack ? m_queue_lease.bytes()
                                                                           : 0);
}

awaitable<RespSession::Next> RespSession::queue(const std::string& name, Args args) {
    Writer reply(m_out.bytes(), m_version);
    const Arity* command = find_command(name);
    if (command == nullptr || !command->queued) {
        m_multi_failed = true;
        reply.error(proto::resp::unknown_command_message(args));
        co_return Next::keep;
    }
    // A SET that EXEC would refuse closes the connection now, before EXEC's
    // array has begun: a client then sees no reply, not a reply cut short.
    if (name == "SET" && args.size() >= 3 && !map_key(args[1])) {
        co_return refuse("SET", unstorable_key(args[1]));
    }
    // The copies are held until EXEC: no more than one command may hold
    // (max_value_size and a little more), or every connection in a
    // transaction could hold gigabytes.
    const std::uint64_t bytes = queued_bytes(args);
    if (m_queued_bytes + bytes > m_context.max_value.load() + k_command_slack) {
        m_context.stats.daemon().protocol_errors++;
        reply.error(fmt::format("ERR MULTI transaction longer than max_value_size + {} bytes",
                                k_command_slack));
        co_return Next::close;
    }
    // The copies are request bytes held until EXEC: from the daemon's
    // in-flight budget, as a long command's input is (100 connections each
    // holding an 8 MB SET in MULTI held 836 MB outside it). The command's
    // own input stays held meanwhile: if both cannot fit, no wait helps, and
    // waiting first in line kept room from everyone else for 10 s (a review).
    const std::uint64_t input_held = m_connection.lease().bytes();
    if (m_queued_bytes + bytes + input_held > m_context.inflight.limit()) {
        m_context.stats.daemon().inflight_refused++;
        co_return refuse(
            "MULTI", fmt::format("{} bytes of queued commands and {} of this command's input "
                                 "are more than daemon.max_inflight_bytes ({} bytes)",
                                 m_queued_bytes + bytes, input_held, m_context.inflight.limit()));
    }
    const bool granted =
        co_await m_queue_lease.grow_to(m_queued_bytes + bytes, k_inflight_patience);
    if (!granted) {
        m_context.stats.daemon().inflight_refused++;
        co_return refuse("MULTI", "no room in daemon.max_inflight_bytes for the queued commands");
    }
    m_queued_bytes += bytes;
    hold_queue();
    m_queued.emplace_back(args.begin(), args.end());
    reply.simple("QUEUED");
    co_return Next::keep;
}

awaitable<RespSession::Next> RespSession::exec() {
    Writer reply(m_out.bytes(), m_version);
    if (!m_in_multi) {
        reply.error("ERR EXEC without MULTI");
        co_return Next::keep;
    }
    auto queued = std::move(m_queued);
    const bool failed = m_multi_failed;
    std::uint64_t held = m_queued_bytes;
    m_queued.clear();
    m_queued_bytes = 0;
    // Each command's copy and budget go once it has run; the rest at the
    // end, whichever way this coroutine ends.
    struct Release {
        RespSession& session;
        ~Release() { session.release_queue(0); }
    } release{*this};
    m_in_multi = false;
    m_multi_failed = false;
    if (failed) {
        reply.error("EXECABORT Transaction discarded because of previous errors.");
        co_return Next::keep;
    }
    reply.array(queued.size());
    for (auto& command : queued) {
        const std::vector<std::string_view> args(command.begin(), command.end());
        if (co_await dispatch(upper(args.front()), args) == Next::close) {
            co_return Next::close;
        }
        held -= queued_bytes(args);
        std::vector<std::string>().swap(command);
        release_queue(held);
        // Replies go out as they pile up, as in a pipeline (a transaction
        // of GETs of one large value is bounded by the socket, not memory).
        if (m_connection.needs_room(m_out)) {
            const bool room = co_await m_connection.make_room(m_out);
            if (!room) {
                co_return Next::close;
            }
        }
    }
    co_return Next::keep;
}

awaitable<RespSession::Next> RespSession::dispatch(const std::string& name, Args args) {
    Writer reply(m_out.bytes(), m_version);
    if (name == "HELLO") {
        co_return hello(args);
    }
    if (name == "AUTH") {
        co_return auth(args);
    }
    if (name == "GET") {
        co_return co_await get(args);
    }
    if (name == "SET") {
        co_return co_await set(args);
    }
    if (name == "MGET") {
        co_return co_await mget(args);
    }
    if (name == "EXISTS" || name == "DEL" || name == "UNLINK") {
        co_return co_await exists_or_del(args, name != "EXISTS");
    }
    if (name == "DBSIZE") {
        co_return co_await dbsize();
    }
    if (name == "PING" || name == "ECHO") {
        if (args.size() > 2) {
            wrong_arity("ping"); // ECHO takes exactly 2 (k_commands)
        } else if (args.size() == 1) {
            reply.simple("PONG");
        } else if (args[1].size() > k_max_echo) {
            // The reply is a copy, outside daemon.max_inflight_bytes: a client
            // that never reads could make the daemon hold one per connection.
            reply.error(fmt::format("ERR {} message longer than {} bytes (the native PING's limit)",
                                    name, k_max_echo));
        } else {
            reply.bulk(args[1]);
        }
        co_return Next::keep;
    }
    if (name == "SELECT") {
        co_return select(args);
    }
    if (name == "CLIENT") {
        co_return client(args);
    }
    if (name == "INFO") {
        co_return info(args);
    }
    if (name == "COMMAND") {
        co_return command(args);
    }
    if (name == "CONFIG") {
        co_return config(args);
    }
    reply.error(proto::resp::unknown_command_message(args));
    co_return Next::keep;
}

void RespSession::wrong_arity(std::string_view name) {
    Writer(m_out.bytes(), m_version)
        .error(fmt::format("ERR wrong number of arguments for '{}' command", name));
}

RespSession::Next RespSession::refuse(std::string_view command, std::string_view why) {
    m_context.stats.daemon().protocol_errors++;
    logger("resp").warn("[{}] {} not served ({}); closing the connection instead of an error "
                        "reply",
                        m_connection.id(), command, why);
    return Next::close;
}

} // namespace pt2cache::daemon
