// Runs blocking work (disk, Redis) on the worker pool and resumes the calling
// coroutine on its own executor, so the Asio threads never block.
#pragma once

#include <exception>
#include <type_traits>

#include "daemon/asio.hpp"
#include "daemon/store/request_arrival.hpp"

#include <boost/asio/async_result.hpp>
#include <boost/asio/executor_work_guard.hpp>

namespace pt2cache::daemon {

// `fn` should report failures in its result (tl::expected). Should it throw
// anyway (std::bad_alloc from a hostile length that slipped a check, say),
// the exception is rethrown in the calling coroutine, where the session's
// top-level handler closes that one connection: a worker thread must never
// die with it, which would end the whole daemon.
template <typename Fn>
awaitable<std::invoke_result_t<Fn>> offload(asio::thread_pool& pool, Fn fn) {
    using Result = std::invoke_result_t<Fn>;
    static_assert(std::is_default_constructible_v<Result>);
    auto initiation = [&pool, fn = std::move(fn)](auto handler) mutable {
        auto work = asio::make_work_guard(asio::get_associated_executor(handler));
        asio::post(pool, [handler = std::move(handler), fn = std::move(fn), work = std::move(work),
                          posted = store::RequestArrival::Clock::now()]() mutable {
            const store::RequestArrival arrival(posted);
            std::exception_ptr error;
            Result result{};
            try {
                result = fn();
            } catch (...) {
                error = std::current_exception();
            }
            auto executor = work.get_executor();
            asio::post(executor,
                       [handler = std::move(handler), error, result = std::move(result)]() mutable {
                           std::move(handler)(error, std::move(result));
                       });
        });
    };
    co_return co_await asio::async_initiate<const asio::use_awaitable_t<Executor>&,
                                            void(std::exception_ptr, Result)>(std::move(initiation),
                                                                              use_awaitable);
}

} // namespace pt2cache::daemon
