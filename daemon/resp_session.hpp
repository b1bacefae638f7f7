// The Redis-protocol front door (RESP2/RESP3) on the daemon's socket: enough
// of Redis for redis-py 4 to 8 (what Inductor's remote caches use), redis-cli,
// hiredis and redis-benchmark. Keys map to namespaces through
// proto/inductor_keys.hpp. See docs/torch.md.
//
// A GET or SET that cannot be served (storage error, key or value over a
// limit) is never answered with -ERR, which would crash an Inductor compile:
// it is logged, counted and the connection is closed, which Inductor treats
// as an unavailable cache.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/asio.hpp"
#include "daemon/inflight_budget.hpp"
#include "daemon/io_buffers.hpp"
#include "daemon/latency_recorder.hpp"
#include "daemon/store/tier.hpp"

namespace pt2cache::daemon {

class Connection;
struct Context;

awaitable<void> serve_resp(Connection& connection);

class RespSession {
public:
    explicit RespSession(Connection& connection);
    // Gives back what the session held (commands queued by MULTI): the
    // connection's last writes are not watched for it.
    ~RespSession();
    RespSession(const RespSession&) = delete;
    RespSession& operator=(const RespSession&) = delete;

    awaitable<void> run();

private:
    enum class Next { keep, close };
    using Args = std::span<const std::string_view>;

    awaitable<Next> execute(Args args);
    // A GET that the store answers at once (a memory hit, a miss its indexes
    // prove), served without a coroutine frame or a scheduler hop, so that a
    // pipeline of them is answered in one pass. nullopt: nothing was done;
    // take execute().
    std::optional<Next> quick(Args args);
    // Takes a SET without options (of a value up to k_quick_value_max) into
    // m_sets: true when taken. flush_sets() stores and answers it, before the
    // next command that is not such a SET runs and before the session reads
    // again, so replies keep their order and every later command sees it.
    bool defer_set(Args args);
    // Stores m_sets, the store taking each run of them that needs no waiting
    // in one call (Store::put_quick_many: a lock of each tier per run, not
    // per SET); one it does not take goes the full way (execute). Answers
    // each in order.
    awaitable<Next> flush_sets();
    // Runs one command (after authentication and MULTI queueing).
    awaitable<Next> dispatch(const std::string& name, Args args);
    // MULTI, EXEC, DISCARD; queueing inside a transaction.
    awaitable<Next> exec();
    awaitable<Next> queue(const std::string& name, Args args);
    // What a queued command's copies count (its arguments and their strings).
    static std::uint64_t queued_bytes(Args args);
    // Ends a transaction without running it (DISCARD, RESET).
    void discard_transaction();
    // Shrinks the queued commands' lease to `bytes`, and tells the connection.
    void release_queue(std::uint64_t bytes);
    // Tells the connection what the queued commands hold, from 1 MiB (reads
    // are then watched for stalls).
    void hold_queue();

    // Data commands (resp_data.cpp, with quick, defer_set and flush_sets).
    awaitable<Next> get(Args args);
    // The reply to a GET (a bulk string, or null for a miss), measured.
    void answer_get(std::string_view ns, store::LatencyTier tier,
                    std::optional<store::Entry>& entry);
    awaitable<Next> set(Args args);
    awaitable<Next> mget(Args args);
    awaitable<Next> exists_or_del(Args args, bool del);
    awaitable<Next> dbsize();
    std::int64_t key_count() const;

    // Connection and server commands (resp_admin.cpp).
    Next hello(Args args);
    Next auth(Args args);
    // Checks a password (and user, when `user_named`), as AUTH and HELLO's
    // AUTH option do: nullopt and authenticated, or the error to answer.
    std::optional<std::string_view> authenticate(std::string_view user, std::string_view given,
                                                 bool user_named);
    Next client(Args args);
    // The error of a CLIENT subcommand that is unknown or has the wrong
    // number of arguments, checked where Redis checks it: before MULTI
    // queues the command.
    static std::optional<std::string> client_subcommand_error(Args args);
    Next select(Args args);
    Next info(Args args);
    Next command(Args args);
    Next config(Args args);
    void reset();
    bool authenticated() const;

    void wrong_arity(std::string_view name);
    // Closes the connection instead of answering (see the file comment).
    Next refuse(std::string_view command, std::string_view why);

    Connection& m_connection;
    Context& m_context;
    OutputBatch m_out;
    // The last command's argument vector, handed back to the parser.
    std::vector<std::string_view> m_args;
    // Pipelined SETs waiting for flush_sets(), their Redis keys' bytes in
    // m_set_keys (the input buffer moves on), and the bytes of their values.
    struct DeferredSet {
        std::size_t key_at = 0;
        std::size_t key_size = 0;
        store::Entry entry;
    };
    std::vector<DeferredSet> m_sets;
    std::string m_set_keys;
    std::uint64_t m_set_bytes = 0;
    std::vector<store::QuickPut> m_puts; // flush_sets()' scratch
    LatencyRecorder m_latency;
    int m_version = 2;
    bool m_authenticated = false;
    std::string m_name;
    // Inside MULTI: the queued commands (copies: the input buffer moves on),
    // and whether one was refused, which makes EXEC abort as in Redis.
    bool m_in_multi = false;
    bool m_multi_failed = false;
    std::vector<std::vector<std::string>> m_queued;
    std::uint64_t m_queued_bytes = 0; // their arguments
    InflightLease m_queue_lease;      // the same bytes, from the in-flight budget
};

} // namespace pt2cache::daemon
