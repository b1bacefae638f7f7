// Runs blocking work (disk, Redis) on the worker pool and resumes the calling
// coroutine on its own executor, so the Asio threads never block.
#pragma once

#include <type_traits>

#include "daemon/asio.hpp"

#include <boost/asio/async_result.hpp>
#include <boost/asio/executor_work_guard.hpp>

namespace pt2cache::daemon {

// `fn` must not throw: report failures in its result (tl::expected).
template <typename Fn>
awaitable<std::invoke_result_t<Fn>> offload(asio::thread_pool& pool, Fn fn) {
    using Result = std::invoke_result_t<Fn>;
    auto initiation = [&pool, fn = std::move(fn)](auto handler) mutable {
        auto work = asio::make_work_guard(asio::get_associated_executor(handler));
        asio::post(pool, [handler = std::move(handler), fn = std::move(fn),
                          work = std::move(work)]() mutable {
            Result result = fn();
            auto executor = work.get_executor();
            asio::post(executor,
                       [handler = std::move(handler), result = std::move(result)]() mutable {
                           std::move(handler)(std::move(result));
                       });
        });
    };
    co_return co_await asio::async_initiate<const asio::use_awaitable_t<>&, void(Result)>(
        std::move(initiation), use_awaitable);
}

} // namespace pt2cache::daemon
