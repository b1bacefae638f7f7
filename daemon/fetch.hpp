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

// `ns` and `key` must stay valid until the result is back; a hit stores its
// tier in `*hit_tier` when given. A large value on disk waits for room in the
// read budget (store/read_budget.hpp), up to k_inflight_patience; then the
// error says so (Failure::busy), counted as `reads_refused`.
awaitable<FetchResult> fetch(Context& context, std::string_view ns, std::string_view key,
                             store::LatencyTier* hit_tier = nullptr);

} // namespace pt2cache::daemon
