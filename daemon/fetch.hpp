// SPDX-License-Identifier: MIT
// The sessions' one way to read an entry: answered on the calling I/O thread
// when the store can tell at once (a memory hit, or a miss its indexes
// prove), otherwise by Store::get on the worker pool.
#pragma once

#include <optional>
#include <string_view>

#include "daemon/asio.hpp"
#include "daemon/context.hpp"

#include <tl/expected.hpp>

namespace pt2cache::daemon {

using FetchResult = tl::expected<std::optional<store::Entry>, store::StoreError>;

class Connection;
class OutputBatch;

// Replies a session has answered but not sent yet (its batch), in order. A
// large value that finds no room in the read budget sends them before it
// waits: they may hold the very room it waits for (the same client's
// earlier large values, pipelined, in an MGET or in an EXEC; a review: each
// such request waited out its 10 s and was refused).
struct PendingReplies {
    Connection& connection;
    OutputBatch& batch;
};

// `ns` and `key` must stay valid until the result is back; a hit stores its
// tier in `*hit_tier` when given. A large value on disk waits for room in the
// read budget (store/read_budget.hpp), up to k_inflight_patience; then the
// error says so (Failure::busy), counted as `reads_refused`.
awaitable<FetchResult> fetch(Context& context, std::string_view ns, std::string_view key,
                             store::LatencyTier* hit_tier = nullptr,
                             PendingReplies* pending = nullptr);

} // namespace pt2cache::daemon
