// SPDX-License-Identifier: MIT
#include "daemon/fetch.hpp"

#include "daemon/offload.hpp"

namespace pt2cache::daemon {

awaitable<FetchResult> fetch(Context& context, std::string_view ns, std::string_view key,
                             store::LatencyTier* hit_tier) {
    auto& store = *context.store;
    if (auto quick = store.get_quick(ns, key, hit_tier)) {
        co_return std::move(*quick);
    }
    co_return co_await offload(*context.blocking, [&] { return store.get(ns, key, hit_tier); });
}

} // namespace pt2cache::daemon
