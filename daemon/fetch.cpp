// SPDX-License-Identifier: MIT
#include "daemon/fetch.hpp"

#include <algorithm>
#include <chrono>

#include "daemon/connection.hpp"
#include "daemon/offload.hpp"

#include <fmt/format.h>

namespace pt2cache::daemon {

namespace {
constexpr std::chrono::milliseconds k_longest_pause{50}; // between two asks while busy
} // namespace

awaitable<FetchResult> fetch(Context& context, std::string_view ns, std::string_view key,
                             store::LatencyTier* hit_tier, PendingReplies* pending) {
    auto& store = *context.store;
    if (auto quick = store.get_quick(ns, key, hit_tier)) {
        co_return std::move(*quick);
    }
    // A large value finds no room in the read budget while others are being
    // read or sent (Failure::busy): asked again, backing off, until there is
    // or k_inflight_patience has passed.
    const auto deadline = std::chrono::steady_clock::now() + k_inflight_patience;
    auto pause = std::chrono::milliseconds(1);
    for (;;) {
        auto result =
            co_await offload(*context.blocking, [&] { return store.get(ns, key, hit_tier); });
        if (result || result.error().failure != store::Failure::busy) {
            co_return result;
        }
        if (pending != nullptr && !pending->connection.send(pending->batch)) {
            co_return result; // the client is gone
        }
        if (std::chrono::steady_clock::now() + pause >= deadline) {
            context.stats.daemon().reads_refused++;
            result.error().message +=
                fmt::format(" within {} s", k_inflight_patience.count() / 1000);
            co_return result;
        }
        asio::steady_timer timer(co_await asio::this_coro::executor);
        timer.expires_after(pause);
        boost::system::error_code ec;
        co_await timer.async_wait(asio::redirect_error(use_awaitable, ec));
        pause = std::min(pause * 2, k_longest_pause);
    }
}

} // namespace pt2cache::daemon
