#include "daemon/resp_session.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <optional>

#include "daemon/connection.hpp"
#include "daemon/fetch.hpp"
#include "daemon/log.hpp"
#include "daemon/offload.hpp"
#include "proto/frame.hpp"
#include "proto/inductor_keys.hpp"
#include "proto/messages.hpp"
#include "proto/resp.hpp"

namespace pt2cache::daemon {

namespace {

using proto::resp::Writer;

// What a command may hold beyond its value (command name, key, options).
constexpr std::uint64_t k_command_slack = 1 << 20;

// Values a deferred SET takes (RespSession::defer_set). Larger ones go
// straight to the full path: they are the ones likely to need compression (at
// disk.compress_threshold) or room the write queue lacks.
constexpr std::size_t k_quick_value_max = 16 << 10;

// Deferred SETs are stored once this many wait, or values of this many bytes.
// The copies are outside daemon.max_inflight_bytes (a connection waits for room
// in the write queue holding them): keep them near the input buffer every
// connection holds outside it (InputBuffer::k_base, 16 KiB).
constexpr std::size_t k_max_deferred_sets = 64;
constexpr std::uint64_t k_max_deferred_bytes = 32 << 10;

std::string upper(std::string_view text) {
    std::string out(text);
    std::transform(out.begin(), out.end(), out.begin(),
                   [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
    return out;
}

std::optional<std::int64_t> to_int(std::string_view text) {
    std::int64_t value = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size()) {
        return std::nullopt;
    }
    return value;
}

// Whether `name` is the command `upper_name` (given in upper case), in any case.
bool is_command(std::string_view name, std::string_view upper_name) {
    return name.size() == upper_name.size() &&
           std::equal(name.begin(), name.end(), upper_name.begin(), [](char a, char b) {
               return std::toupper(static_cast<unsigned char>(a)) == b;
           });
}

// The namespaced key for a Redis key, or nullopt when it cannot be stored
// (longer than the native key limit).
std::optional<proto::NamespacedKey> map_key(std::string_view redis_key) {
    auto mapped = proto::from_redis_key(redis_key);
    if (mapped.key.empty() || mapped.key.size() > proto::k_max_key) {
        return std::nullopt;
    }
    return mapped;
}

} // namespace

awaitable<void> serve_resp(Connection& connection) {
    RespSession session(connection);
    co_await session.run();
}

RespSession::RespSession(Connection& connection)
    : m_connection(connection)
    , m_context(connection.context())
    , m_latency(m_context.stats) {}

awaitable<void> RespSession::run() {
    auto& input = m_connection.input();
    std::size_t want = 0;
    // The next parse waits until the input holds this much: the parser's
    // lower bound for the incomplete command (see parse_command).
    std::size_t parse_at = 1;
    for (;;) {
        while (input.size() >= parse_at) {
            const auto max_value = m_context.max_value.load();
            const proto::resp::Limits limits{std::max(proto::resp::k_max_bulk, max_value),
                                             max_value};
            auto result = proto::resp::parse_command(input.readable(), limits, std::move(m_args));
            if (auto* need = std::get_if<proto::resp::NeedMore>(&result)) {
                // One command may hold a value and a little more; anything
                // longer is not a command this front door serves.
                if (input.size() + need->bytes > max_value + k_command_slack) {
                    result = proto::resp::ProtocolError{
                        fmt::format("command longer than max_value_size + {} bytes "
                                    "(the query buffer limit)",
                                    k_command_slack)};
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
                logger("resp").warn("[{}] protocol error: {}; closing", m_connection.id(),
                                    error->message);
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
                }
            }
            input.consume(command.consumed);
            m_args = std::move(command.args);
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
        const bool more = co_await m_connection.next_batch(m_out, want);
        if (!more) {
            co_return;
        }
    }
}

std::optional<RespSession::Next> RespSession::quick(Args args) {
    if (args.size() != 2 || !is_command(args[0], "GET") || m_in_multi || !authenticated()) {
        return std::nullopt;
    }
    const auto mapped = map_key(args[1]);
    if (!mapped) {
        return std::nullopt;
    }
    m_latency.mark();
    auto tier = store::LatencyTier::none;
    auto found = m_context.store->get_quick(mapped->ns, mapped->key, &tier);
    if (!found) {
        return std::nullopt;
    }
    m_context.stats.daemon().requests++;
    answer_get(mapped->ns, tier, *found);
    return Next::keep;
}

bool RespSession::defer_set(Args args) {
    if (args.size() != 3 || !is_command(args[0], "SET") || m_in_multi || !authenticated() ||
        args[2].size() > k_quick_value_max || !map_key(args[1])) {
        return false;
    }
    if (m_sets.empty()) {
        m_latency.mark();
    }
    DeferredSet& set = m_sets.emplace_back();
    set.key_at = m_set_keys.size();
    set.key_size = args[1].size();
    set.entry.value = store::Blob::copy_of(args[2]);
    m_set_keys.append(args[1]);
    m_set_bytes += args[2].size();
    return true;
}

awaitable<RespSession::Next> RespSession::flush_sets() {
    const auto created_ms = store::now_ms();
    m_puts.clear();
    for (DeferredSet& set : m_sets) {
        // Mapped when deferred; m_set_keys stays put until the end.
        const auto mapped = map_key(std::string_view(m_set_keys).substr(set.key_at, set.key_size));
        set.entry.created_ms = created_ms;
        m_puts.push_back(store::QuickPut{mapped->ns, mapped->key, std::move(set.entry)});
    }
    auto& store = *m_context.store;
    auto next = Next::keep;
    std::size_t done = 0;
    while (done < m_puts.size() && next == Next::keep) {
        const std::size_t stored = store.put_quick_many(std::span(m_puts).subspan(done));
        m_context.stats.daemon().requests += stored;
        Writer reply(m_out.bytes(), m_version);
        for (std::size_t i = done; i < done + stored; ++i) {
            reply.simple("OK");
            m_latency.finish(m_puts[i].ns, store::LatencyOp::put, store::LatencyTier::none,
                             store::RequestResult::ok);
        }
        done += stored;
        if (done < m_puts.size()) {
            // No room in the write queue now, or a put the quick way does not
            // take (a compressible value, a namespace not stored locally).
            const DeferredSet& set = m_sets[done];
            const std::array<std::string_view, 3> args{
                "SET", std::string_view(m_set_keys).substr(set.key_at, set.key_size),
                m_puts[done].entry.value.text()};
            next = co_await execute(args);
            ++done;
        }
    }
    m_sets.clear();
    m_set_keys.clear();
    m_set_bytes = 0;
    m_puts.clear();
    co_return next;
}

awaitable<RespSession::Next> RespSession::execute(Args args) {
    m_context.stats.daemon().requests++;
    const auto name = upper(args[0]);
    Writer reply(m_out.bytes(), m_version);

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
            m_in_multi = false;
            m_multi_failed = false;
            m_queued.clear();
            reply.simple("OK");
        }
        co_return Next::keep;
    }
    if (m_in_multi) {
        co_return queue(name, args);
    }
    co_return co_await dispatch(name, args);
}

namespace {

// What dispatch() serves; MULTI queues only these.
constexpr std::array<std::string_view, 16> k_commands = {
    "GET",  "SET",    "MGET",   "EXISTS", "DEL",     "UNLINK", "DBSIZE", "PING",
    "ECHO", "SELECT", "CLIENT", "INFO",   "COMMAND", "CONFIG", "HELLO",  "AUTH",
};

} // namespace

RespSession::Next RespSession::queue(const std::string& name, Args args) {
    Writer reply(m_out.bytes(), m_version);
    if (std::find(k_commands.begin(), k_commands.end(), name) == k_commands.end()) {
        m_multi_failed = true;
        reply.error(proto::resp::unknown_command_message(args));
        return Next::keep;
    }
    m_queued.emplace_back(args.begin(), args.end());
    reply.simple("QUEUED");
    return Next::keep;
}

awaitable<RespSession::Next> RespSession::exec() {
    Writer reply(m_out.bytes(), m_version);
    if (!m_in_multi) {
        reply.error("ERR EXEC without MULTI");
        co_return Next::keep;
    }
    const auto queued = std::move(m_queued);
    const bool failed = m_multi_failed;
    m_queued.clear();
    m_in_multi = false;
    m_multi_failed = false;
    if (failed) {
        reply.error("EXECABORT Transaction discarded because of previous errors.");
        co_return Next::keep;
    }
    reply.array(queued.size());
    for (const auto& command : queued) {
        const std::vector<std::string_view> args(command.begin(), command.end());
        if (co_await dispatch(upper(args.front()), args) == Next::close) {
            co_return Next::close;
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
    if (name == "PING") {
        if (args.size() > 2) {
            wrong_arity("ping");
        } else if (args.size() == 2) {
            reply.bulk(args[1]);
        } else {
            reply.simple("PONG");
        }
        co_return Next::keep;
    }
    if (name == "ECHO") {
        if (args.size() != 2) {
            wrong_arity("echo");
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

awaitable<RespSession::Next> RespSession::get(Args args) {
    Writer reply(m_out.bytes(), m_version);
    if (args.size() != 2) {
        wrong_arity("get");
        co_return Next::keep;
    }
    const auto mapped = map_key(args[1]);
    if (!mapped) {
        reply.null(); // nothing that long can have been stored
        co_return Next::keep;
    }
    m_latency.mark();
    auto tier = store::LatencyTier::none;
    auto found = co_await fetch(m_context, mapped->ns, mapped->key, &tier);
    if (!found) {
        m_latency.finish(mapped->ns, store::LatencyOp::get, tier, store::RequestResult::error);
        co_return refuse("GET", found.error().message);
    }
    answer_get(mapped->ns, tier, *found);
    co_return Next::keep;
}

void RespSession::answer_get(std::string_view ns, store::LatencyTier tier,
                             std::optional<store::Entry>& entry) {
    Writer reply(m_out.bytes(), m_version);
    if (!entry) {
        reply.null();
        m_latency.finish(ns, store::LatencyOp::get, tier, store::RequestResult::miss);
        return;
    }
    reply.bulk_header(entry->value.size());
    m_out.append_blob(std::move(entry->value));
    reply.crlf();
    m_latency.finish(ns, store::LatencyOp::get, tier, store::RequestResult::ok);
}

awaitable<RespSession::Next> RespSession::set(Args args) {
    Writer reply(m_out.bytes(), m_version);
    if (args.size() < 3) {
        wrong_arity("set");
        co_return Next::keep;
    }
    std::int64_t ttl_ms = 0;
    bool nx = false;
    bool xx = false;
    for (std::size_t i = 3; i < args.size(); ++i) {
        const auto option = upper(args[i]);
        if ((option == "EX" || option == "PX") && i + 1 < args.size()) {
            const auto amount = to_int(args[++i]);
            if (!amount) {
                reply.error("ERR value is not an integer or out of range");
                co_return Next::keep;
            }
            if (*amount <= 0 || *amount > (std::int64_t(1) << 46)) {
                reply.error("ERR invalid expire time in 'set' command");
                co_return Next::keep;
            }
            ttl_ms = option == "EX" ? *amount * 1000 : *amount;
        } else if (option == "NX" && !xx) {
            nx = true;
        } else if (option == "XX" && !nx) {
            xx = true;
        } else if (option == "KEEPTTL" && ttl_ms == 0) {
            // Entries are replaced whole; nothing to keep.
        } else {
            reply.error("ERR syntax error");
            co_return Next::keep;
        }
    }
    const auto mapped = map_key(args[1]);
    if (!mapped) {
        co_return refuse("SET", fmt::format("key of {} bytes is over the {} byte limit",
                                            args[1].size(), proto::k_max_key));
    }
    if (args[2].size() > m_context.max_value.load()) {
        co_return refuse("SET", "value over max_value");
    }

    m_latency.mark();
    store::Entry entry;
    entry.value = store::Blob::copy_of(args[2]);
    entry.created_ms = store::now_ms();
    entry.expires_ms = ttl_ms ? entry.created_ms + ttl_ms : 0;
    auto& store = *m_context.store;
    const auto mode = nx ? store::PutMode::only_if_absent : store::PutMode::overwrite;
    // A plain SET that cannot block is done right here.
    std::optional<tl::expected<store::PutOutcome, store::StoreError>> quick;
    if (!xx) {
        quick = store.put_quick(mapped->ns, mapped->key, entry, mode);
    }
    if (!quick) {
        quick = co_await offload(*m_context.blocking, [&]() {
            using Result = tl::expected<store::PutOutcome, store::StoreError>;
            if (xx) {
                auto exists = store.exists(mapped->ns, mapped->key);
                if (!exists) {
                    return Result(tl::unexpected(exists.error()));
                }
                if (!*exists) {
                    return Result(store::PutOutcome::not_stored);
                }
            }
            return store.put(mapped->ns, mapped->key, entry, mode);
        });
    }
    auto& outcome = *quick;
    if (!outcome) {
        m_latency.finish(mapped->ns, store::LatencyOp::put, store::LatencyTier::none,
                         store::RequestResult::error);
        co_return refuse("SET", outcome.error().message);
    }
    const bool stored = *outcome == store::PutOutcome::stored;
    if (stored) {
        reply.simple("OK");
    } else {
        reply.null();
    }
    m_latency.finish(mapped->ns, store::LatencyOp::put, store::LatencyTier::none,
                     stored ? store::RequestResult::ok : store::RequestResult::miss);
    co_return Next::keep;
}

awaitable<RespSession::Next> RespSession::mget(Args args) {
    if (args.size() < 2) {
        wrong_arity("mget");
        co_return Next::keep;
    }
    auto& store = *m_context.store;
    std::vector<std::optional<store::Entry>> entries(args.size() - 1);
    std::vector<std::size_t> missing;
    for (std::size_t i = 1; i < args.size(); ++i) {
        if (const auto mapped = map_key(args[i])) {
            if (auto quick = store.get_quick(mapped->ns, mapped->key)) {
                entries[i - 1] = std::move(*quick);
            } else {
                missing.push_back(i);
            }
        }
    }
    if (!missing.empty()) {
        auto ok = co_await offload(*m_context.blocking, [&] {
            for (auto i : missing) {
                const auto mapped = map_key(args[i]);
                auto found = store.get(mapped->ns, mapped->key);
                if (!found) {
                    return false;
                }
                entries[i - 1] = std::move(*found);
            }
            return true;
        });
        if (!ok) {
            co_return refuse("MGET", "storage error");
        }
    }
    Writer reply(m_out.bytes(), m_version);
    reply.array(entries.size());
    for (auto& entry : entries) {
        if (!entry) {
            reply.null();
            continue;
        }
        reply.bulk_header(entry->value.size());
        m_out.append_blob(std::move(entry->value));
        reply.crlf();
    }
    co_return Next::keep;
}

awaitable<RespSession::Next> RespSession::exists_or_del(Args args, bool del) {
    if (args.size() < 2) {
        wrong_arity(del ? "del" : "exists");
        co_return Next::keep;
    }
    auto& store = *m_context.store;
    auto count = co_await offload(*m_context.blocking, [&]() -> std::optional<std::int64_t> {
        std::int64_t n = 0;
        for (std::size_t i = 1; i < args.size(); ++i) {
            const auto mapped = map_key(args[i]);
            if (!mapped) {
                continue;
            }
            auto found =
                del ? store.remove(mapped->ns, mapped->key) : store.exists(mapped->ns, mapped->key);
            if (!found) {
                return std::nullopt;
            }
            n += *found ? 1 : 0;
        }
        return n;
    });
    if (!count) {
        co_return refuse(del ? "DEL" : "EXISTS", "storage error");
    }
    Writer(m_out.bytes(), m_version).integer(*count);
    co_return Next::keep;
}

std::int64_t RespSession::key_count() const {
    return static_cast<std::int64_t>(m_context.store->entry_count());
}

awaitable<RespSession::Next> RespSession::dbsize() {
    Writer(m_out.bytes(), m_version).integer(key_count());
    co_return Next::keep;
}

} // namespace pt2cache::daemon
