// SPDX-License-Identifier: MIT
//
// Host names of Redis endpoints, resolved off the request path.
//
// hiredis resolves a name with a blocking getaddrinfo that no timeout bounds
// (a slow DNS server holds the caller for seconds). Redis endpoints are
// opened by the threads that serve requests, and a cluster's nodes are named
// by the cluster itself (CLUSTER SLOTS, MOVED), so RedisConnection::open asks
// this resolver for a numeric address first and connects to that:
// - a numeric address is itself, at once;
// - a name resolved before is answered at once from memory; after
//   `refresh_after` (30 s; a failure after 1 s) it is looked up again in the
//   background while the last result (an address or a failure) is still
//   answered;
// - a name never resolved is looked up on a thread of its own, and the caller
//   waits until its deadline at most; the lookup goes on after that, for the
//   next caller.
// At most `k_max_lookups` lookups run at once and `k_max_names` names are
// kept, so names a hostile cluster announces cost bounded threads and memory.
// docs/remote.md, "Host names".
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>

#include <tl/expected.hpp>

namespace pt2cache::daemon::store {

class HostResolver {
public:
    using Clock = std::chrono::steady_clock;
    // One lookup: a numeric address, or why there is none.
    using Lookup = std::function<tl::expected<std::string, std::string>(const std::string& host)>;

    static constexpr std::chrono::seconds k_refresh_after{30};
    static constexpr std::size_t k_max_lookups = 8;
    static constexpr std::size_t k_max_names = 1024;

    // The daemon's resolver (getaddrinfo). Never destroyed: lookups still
    // running on their threads at exit use it.
    static HostResolver& shared();

    // `lookup` runs on the resolver's threads (tests give a slow one).
    explicit HostResolver(Lookup lookup, std::chrono::milliseconds refresh_after = k_refresh_after);
    HostResolver(const HostResolver&) = delete;
    HostResolver& operator=(const HostResolver&) = delete;
    // Waits for the lookups still running.
    ~HostResolver();

    // A numeric address for `host`, or why there is none by `deadline` (or
    // once `abort` is raised).
    tl::expected<std::string, std::string> resolve(const std::string& host,
                                                   Clock::time_point deadline,
                                                   const std::atomic<bool>* abort = nullptr);

    // Whether `host` is an IPv4 or IPv6 address (needs no lookup).
    static bool numeric(const std::string& host);
    // getaddrinfo: the first IPv4 address, else the first IPv6 one.
    static tl::expected<std::string, std::string> system_lookup(const std::string& host);

private:
    struct Name {
        bool resolved = false;  // `result` holds a lookup's outcome
        bool looking = false;   // a lookup runs
        unsigned waiters = 0;   // callers waiting for it (they hold references)
        Clock::time_point when; // of `result`
        tl::expected<std::string, std::string> result = tl::unexpected(std::string());
    };

    // Starts a lookup of `host` unless one runs or too many do (m_mutex held).
    bool start_lookup(const std::string& host, Name& name);

    Lookup m_lookup;
    std::chrono::milliseconds m_refresh_after;
    std::mutex m_mutex;
    std::condition_variable m_done;
    std::unordered_map<std::string, Name> m_names;
    std::size_t m_running = 0;
};

} // namespace pt2cache::daemon::store
