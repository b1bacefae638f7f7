// The RESP session's data commands: GET, SET (deferred and batched when
// pipelined), MGET, EXISTS, DEL, DBSIZE. resp_session.cpp reads and
// dispatches commands; resp_admin.cpp serves the connection and server ones.
#include <array>

#include "daemon/connection.hpp"
#include "daemon/fetch.hpp"
#include "daemon/log.hpp"
#include "daemon/offload.hpp"
#include "daemon/resp_session.hpp"
#include "daemon/resp_util.hpp"
#include "proto/resp.hpp"

#include <fmt/format.h>

namespace pt2cache::daemon {

using namespace resp_detail;
using proto::resp::Writer;

std::optional<RespSession::Next> RespSession::quick(Args args) {
    if (args.size() != 2 || !is_command(args[0], "GET") || m_in_multi || !authenticated()) {
        return std::nullopt;
    }
    const auto mapped = map_key(args[1]);
    if (!mapped) {
        return std::nullopt;
    }
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
        const auto answered = LatencyRecorder::now_ns();
        for (std::size_t i = done; i < done + stored; ++i) {
            reply.simple("OK");
            m_latency.finish_at(answered, m_puts[i].ns, store::LatencyOp::put,
                                store::LatencyTier::none, store::RequestResult::ok);
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
    PendingReplies pending{m_connection, m_out};
    auto found = co_await fetch(m_context, mapped->ns, mapped->key, &tier, &pending);
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
    // Options as Redis parses them: EX and PX exclude each other and
    // KEEPTTL (the last EX or PX wins), NX excludes XX; the expire time is
    // checked after the loop.
    std::optional<std::string_view> expire;
    bool expire_in_ms = false;
    bool keepttl = false;
    bool nx = false;
    bool xx = false;
    for (std::size_t i = 3; i < args.size(); ++i) {
        const auto option = args[i]; // compared in place: it may be long
        const bool has_next = i + 1 < args.size();
        if (is_command(option, "EX") && has_next && !keepttl && !(expire && expire_in_ms)) {
            expire = args[++i];
            expire_in_ms = false;
        } else if (is_command(option, "PX") && has_next && !keepttl && !(expire && !expire_in_ms)) {
            expire = args[++i];
            expire_in_ms = true;
        } else if (is_command(option, "NX") && !xx) {
            nx = true;
        } else if (is_command(option, "XX") && !nx) {
            xx = true;
        } else if (is_command(option, "KEEPTTL") && !expire) {
            keepttl = true;
        } else {
            reply.error("ERR syntax error");
            co_return Next::keep;
        }
    }
    std::int64_t ttl_ms = 0;
    if (expire) {
        const auto amount = to_int(*expire);
        if (!amount) {
            reply.error("ERR value is not an integer or out of range");
            co_return Next::keep;
        }
        if (*amount <= 0 || *amount > (std::int64_t(1) << 46)) {
            reply.error("ERR invalid expire time in 'set' command");
            co_return Next::keep;
        }
        ttl_ms = expire_in_ms ? *amount : *amount * 1000;
    }
    const auto mapped = map_key(args[1]);
    if (!mapped) {
        co_return refuse("SET", unstorable_key(args[1]));
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
    const auto mode = nx   ? store::PutMode::only_if_absent
                      : xx ? store::PutMode::only_if_present
                           : store::PutMode::overwrite;
    const auto expiry = keepttl ? store::PutExpiry::keep_stored : store::PutExpiry::as_given;
    // A plain SET that cannot block is done right here.
    std::optional<tl::expected<store::PutOutcome, store::StoreError>> quick;
    if (!xx && !keepttl) {
        quick = store.put_quick(mapped->ns, mapped->key, entry, mode);
    }
    if (!quick) {
        quick = co_await offload(*m_context.blocking, [&]() {
            return store.put(mapped->ns, mapped->key, entry, mode, expiry);
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

namespace {

// Keys one task of a multi-key command handles on the worker pool.
constexpr std::size_t k_keys_per_task = 512;
// Bytes of values read from disk or Redis that one slice of MGET holds
// before it is sent (its last value may take it past this).
constexpr std::uint64_t k_mget_slice_bytes = 16 << 20;

} // namespace

awaitable<RespSession::Next> RespSession::mget(Args args) {
    if (args.size() < 2) {
        wrong_arity("mget");
        co_return Next::keep;
    }
    auto& store = *m_context.store;
    // Answered slice by slice: a slice's values are fetched (memory hits and
    // known misses here, the rest as one task on the worker pool, so that a
    // million keys do not hold the pool from everyone else), appended, and
    // sent before the next slice is fetched. A slice ends after
    // k_mget_slice_bytes of values read from disk or Redis: one MGET of
    // sixty 48 MiB values kept on disk held all of them (3 GB).
    std::vector<std::optional<store::Entry>> entries;
    std::vector<std::size_t> missing;
    bool begun = false; // part of the reply is out
    for (std::size_t from = 1; from < args.size(); from += k_keys_per_task) {
        const std::size_t to = std::min(args.size(), from + k_keys_per_task);
        entries.assign(to - from, std::nullopt);
        missing.clear();
        for (std::size_t i = from; i < to; ++i) {
            if (const auto mapped = map_key(args[i])) {
                if (auto quick = store.get_quick(mapped->ns, mapped->key)) {
                    entries[i - from] = std::move(*quick);
                } else {
                    missing.push_back(i);
                }
            }
        }
        // Sent in parts: each ends after k_mget_slice_bytes fetched, or at a
        // large value finding no room in the read budget.
        std::size_t sent = from; // the first key whose entry is not sent
        std::size_t fetched = 0; // how many of `missing` are fetched
        while (sent < to) {
            std::size_t end = to;
            if (fetched < missing.size()) {
                bool busy = false;
                auto upto =
                    co_await offload(*m_context.blocking, [&]() -> std::optional<std::size_t> {
                        std::uint64_t bytes = 0;
                        for (std::size_t m = fetched; m < missing.size(); ++m) {
                            if (bytes >= k_mget_slice_bytes) {
                                return m;
                            }
                            const std::size_t i = missing[m];
                            const auto mapped = map_key(args[i]);
                            auto found = store.get(mapped->ns, mapped->key);
                            if (!found && found.error().failure == store::Failure::busy) {
                                busy = true;
                                return m;
                            }
                            if (!found) {
                                return std::nullopt;
                            }
                            bytes += *found ? (*found)->value.size() : 0;
                            entries[i - from] = std::move(*found);
                        }
                        return missing.size();
                    });
                if (busy && upto == fetched) {
                    // The first of the slice: fetch() waits for room.
                    const std::size_t i = missing[fetched];
                    const auto mapped = map_key(args[i]);
                    // This MGET's own slices sent so far may hold the room.
                    PendingReplies pending{m_connection, m_out};
                    auto found =
                        co_await fetch(m_context, mapped->ns, mapped->key, nullptr, &pending);
                    if (found) {
                        entries[i - from] = std::move(*found);
                        upto = fetched + 1;
                    } else {
                        upto.reset();
                    }
                }
                if (!upto && !begun) {
                    co_return refuse("MGET", "storage error");
                }
                if (!upto) {
                    // Part of the array has gone out: it cannot be finished.
                    logger("session").warn("[{}] MGET: storage error after {} of {} keys; "
                                           "closing",
                                           m_connection.id(), sent - 1, args.size() - 1);
                    co_return Next::close;
                }
                fetched = *upto;
                end = fetched < missing.size() ? missing[fetched] : to;
            }
            Writer reply(m_out.bytes(), m_version);
            if (!begun) {
                reply.array(args.size() - 1);
                begun = true;
            }
            for (std::size_t i = sent; i < end; ++i) {
                auto& entry = entries[i - from];
                if (!entry) {
                    reply.null();
                } else {
                    reply.bulk_header(entry->value.size());
                    m_out.append_blob(std::move(entry->value));
                    reply.crlf();
                }
            }
            sent = end;
            // A large reply goes out as it is built, as a pipeline's does.
            if (m_connection.needs_room(m_out)) {
                const bool room = co_await m_connection.make_room(m_out);
                if (!room) {
                    co_return Next::close;
                }
            }
        }
    }
    co_return Next::keep;
}

awaitable<RespSession::Next> RespSession::exists_or_del(Args args, bool del) {
    if (args.size() < 2) {
        wrong_arity(del ? "del" : "exists");
        co_return Next::keep;
    }
    auto& store = *m_context.store;
    std::int64_t count = 0;
    // In slices, as MGET's.
    for (std::size_t from = 1; from < args.size(); from += k_keys_per_task) {
        const auto to = std::min(args.size(), from + k_keys_per_task);
        auto n = co_await offload(*m_context.blocking, [&]() -> std::optional<std::int64_t> {
            std::int64_t found_here = 0;
            for (std::size_t i = from; i < to; ++i) {
                const auto mapped = map_key(args[i]);
                if (!mapped) {
                    continue;
                }
                auto found = del ? store.remove(mapped->ns, mapped->key)
                                 : store.exists(mapped->ns, mapped->key);
                if (!found) {
                    return std::nullopt;
                }
                found_here += *found ? 1 : 0;
            }
            return found_here;
        });
        if (!n) {
            co_return refuse(del ? "DEL" : "EXISTS", "storage error");
        }
        count += *n;
    }
    Writer(m_out.bytes(), m_version).integer(count);
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
