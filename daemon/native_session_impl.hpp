// SPDX-License-Identifier: MIT
// The native protocol's session (docs/protocol.md): native_session.cpp reads
// frames and dispatches them, native_session_data.cpp serves the data and
// bundle operations.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/asio.hpp"
#include "daemon/bundles.hpp"
#include "daemon/connection.hpp"
#include "daemon/context.hpp"
#include "daemon/inflight_budget.hpp"
#include "daemon/io_buffers.hpp"
#include "daemon/latency_recorder.hpp"
#include "proto/frame.hpp"
#include "proto/messages.hpp"

#include <tl/expected.hpp>

namespace pt2cache::daemon::native {

using proto::Op;
using proto::Status;
using store::LatencyOp;
using store::LatencyTier;
using store::RequestResult;

constexpr std::string_view k_server_name = "pt2cached " PT2CACHE_VERSION;

class NativeSession {
public:
    explicit NativeSession(Connection& connection)
        : m_connection(connection)
        , m_context(connection.context())
        , m_latency(m_context.stats) {}

    awaitable<void> run();

private:
    using Owner = std::shared_ptr<const std::vector<std::byte>>;

    // Handles one request; false when the connection must close afterwards.
    awaitable<bool> handle(const proto::Header& header, std::span<const std::byte> body,
                           const Owner& owner);
    // Records the latency of the request just handled (while its body is
    // still valid), or restarts the clock when it was not measured.
    void measured();
    // Receives the body of a large frame, `first` being what the input
    // buffer already holds, into a buffer that grows with the bytes that
    // arrive (never from the header's length alone), each step taken from
    // the daemon's in-flight budget through `lease`. Null when the peer left
    // or the budget had no room (then an error reply is queued).
    awaitable<std::shared_ptr<std::vector<std::byte>>>
    receive_body(const proto::Header& header, std::span<const std::byte> first,
                 InflightLease& lease);
    // A GET without a bundle token that the store answers at once (a memory
    // hit, a miss its indexes prove), served without a coroutine frame or a
    // scheduler hop, so that a pipeline of them is answered in one pass.
    // Whether the connection stays open, or nullopt: nothing was done; take
    // handle().
    std::optional<bool> quick(const proto::Header& header, std::span<const std::byte> body);
    // Takes a PUT that quick() would serve into m_puts: true when taken.
    // flush_puts() stores and answers it, before the next request that is
    // not such a PUT runs and before the session reads again, so replies
    // keep their order and every later request sees it.
    bool defer_put(const proto::Header& header, std::span<const std::byte> body);
    // Stores m_puts, the store taking each run of them that needs no waiting
    // in one call (Store::put_quick_many: a lock of each tier per run, not
    // per PUT); one it does not take is put on a worker thread. Answers each
    // in order; false when the connection must close.
    awaitable<bool> flush_puts();
    // flush_puts(), then, when the connection must close, writes its replies
    // first; false then.
    awaitable<bool> settle_puts();
    // Whether m_deferred holds a batch's worth.
    bool deferred_full() const;
    // The reply to a GET; counts the compile-cache lookup.
    void answer_get(const proto::Header& header, std::string_view ns, std::string_view key,
                    std::optional<store::Entry>& entry);
    // The entry a PUT stores (value borrowed from `owner` when given, else copied).
    static store::Entry put_entry(const proto::PutRequest& request, const Owner& owner);
    // The reply to a PUT; returns whether the connection stays open.
    bool answer_put(const proto::Header& header, std::string_view ns, std::string_view key,
                    const tl::expected<store::PutOutcome, store::StoreError>& outcome);
    awaitable<bool> handle_get(const proto::Header& header, std::span<const std::byte> body);
    awaitable<bool> handle_put(const proto::Header& header, std::span<const std::byte> body,
                               const Owner& owner);
    awaitable<bool> handle_key_op(const proto::Header& header, std::span<const std::byte> body);
    awaitable<bool> handle_list(const proto::Header& header, std::span<const std::byte> body);
    awaitable<bool> handle_clear(const proto::Header& header, std::span<const std::byte> body);
    awaitable<bool> handle_bundle_begin(const proto::Header& header,
                                        std::span<const std::byte> body);
    awaitable<bool> handle_bundle_end(const proto::Header& header, std::span<const std::byte> body);
    awaitable<bool> handle_cxx_lookup(const proto::Header& header, std::span<const std::byte> body);
    bool handle_hello(const proto::Header& header, std::span<const std::byte> body);

    // Measures the request being handled as `op` on `ns` (which must stay
    // valid until the request is answered); `tier` is where a GET hit.
    void measure(std::string_view ns, LatencyOp op) {
        m_measured_ns = ns;
        m_measured_op = op;
    }

    // Answers with an error; returns whether the connection stays open.
    bool fail(const proto::Header& header, const proto::Error& error);
    void reply(const proto::Header& header, Status status, std::span<const std::byte> body = {});

    store::Store& store() { return *m_context.store; }
    BundleRegistry& bundles() { return m_context.bundles; }
    asio::thread_pool& pool() { return *m_context.blocking; }

    Connection& m_connection;
    Context& m_context;
    OutputBatch m_out;
    bool m_greeted = false;
    LatencyRecorder m_latency;
    // The request being handled, when measured (docs/operations.md, "Latency").
    std::string_view m_measured_ns;
    LatencyOp m_measured_op = LatencyOp::get;
    LatencyTier m_measured_tier = LatencyTier::none;
    RequestResult m_measured_result = RequestResult::ok;
    // Pipelined PUTs waiting for flush_puts(): their headers, their ids'
    // bytes in m_put_ids (the input buffer moves on), their entries, and the
    // bytes of their values.
    struct DeferredPut {
        proto::Header header;
        std::size_t ns_at = 0;
        std::size_t ns_size = 0;
        std::size_t key_size = 0; // the key follows the namespace
        store::Entry entry;
    };
    std::vector<DeferredPut> m_deferred;
    std::string m_put_ids;
    std::uint64_t m_deferred_bytes = 0;
    std::vector<store::QuickPut> m_puts; // flush_puts()' scratch
};

} // namespace pt2cache::daemon::native
