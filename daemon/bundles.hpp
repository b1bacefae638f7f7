// SPDX-License-Identifier: MIT
// Autotune bundles (docs/protocol.md, "Bundles"): the registry of open
// bundle tokens, shared by every connection, and the blocking restore and
// store steps that run on the worker pool.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "daemon/asio.hpp"
#include "daemon/store/store.hpp"

namespace pt2cache::daemon {

// What open bundles may hold: clients open them at will, and each holds
// what it collects until BUNDLE_END or the idle timeout.
struct BundleLimits {
    // Open tokens; opening one more drops the one idle longest.
    std::size_t open = 65'536;
    // Bytes one bundle collects (basenames and JSON). A bundle past it, or
    // one whose entry would take the registry past `total_bytes`, drops what
    // it collected and collects nothing more (BUNDLE_END stores nothing):
    // Inductor's bundles hold some 300 bytes per kernel.
    std::uint64_t bundle_bytes = 64ULL << 20;
    std::uint64_t total_bytes = 512ULL << 20;
};

// Open bundles by token. Thread-safe; every call is short (no I/O).
class BundleRegistry {
public:
    using Clock = std::chrono::steady_clock;

    explicit BundleRegistry(std::chrono::seconds idle_timeout, BundleLimits limits = {});

    // Applies to tokens already open too (SIGHUP).
    void set_idle_timeout(std::chrono::seconds idle_timeout);

    // Opens a bundle collecting under `key` and returns its token: random,
    // never 0, unique among open tokens. A bundle that was a `hit` collects
    // nothing (BUNDLE_END does not store it again).
    std::uint64_t open(std::string key, bool hit);

    // Marks `token` used; false when it is unknown, expired or ended.
    bool touch(std::uint64_t token);

    // Adds the best-config `json` (canonical JSON text) under `basename`;
    // a basename already there keeps its place and takes the new value, as
    // in Inductor's dict. False when the token is unknown, expired or ended.
    bool add(std::uint64_t token, std::string_view basename, std::string json);

    struct Closed {
        std::string key;
        bool hit = false;
        // basename -> best-config JSON text, in the order they joined.
        std::vector<std::pair<std::string, std::string>> entries;
    };

    // Ends `token` and hands back what it collected; nullopt when the token
    // is unknown, expired or already ended.
    std::optional<Closed> close(std::uint64_t token);

    // Drops the bundles idle for longer than the timeout at `now`; returns
    // how many.
    std::size_t expire(Clock::time_point now = Clock::now());

    std::size_t size() const;
    // Bytes the open bundles hold.
    std::uint64_t bytes() const;

    // What the limits cost so far: bundles dropped to open others, and
    // bundles that stopped collecting.
    struct Refusals {
        std::uint64_t dropped = 0;
        std::uint64_t overflowed = 0;
    };
    Refusals refusals() const;

private:
    struct Bundle {
        Closed state;
        std::unordered_map<std::string, std::size_t> index; // basename -> entries slot
        Clock::time_point last_used;
        std::uint64_t bytes = 0;
        bool overflowed = false;
    };

    // The live bundle of `token`, or null (an expired one is dropped).
    Bundle* find(std::uint64_t token, Clock::time_point now);
    // Removes `at`, returning its bytes to the registry.
    void erase(std::unordered_map<std::uint64_t, Bundle>::iterator at);

    const BundleLimits m_limits;
    mutable std::mutex m_mutex;
    std::unordered_map<std::uint64_t, Bundle> m_bundles;
    std::uint64_t m_bytes = 0;
    Refusals m_refusals;
    Clock::duration m_idle_timeout;
    std::mt19937_64 m_random;
};

// True when an entry of `ns` under `key` can join a bundle: namespace
// `autotune`, key "<64 hex>.best_config".
bool joins_bundle(std::string_view ns, std::string_view key);

// The text a best-config joins a bundle with: `value` re-written as Python's
// json.dumps writes it, or nullopt when it is not a JSON object.
std::optional<std::string> bundle_entry_json(std::string_view value);

struct BundleRestore {
    bool hit = false;
    std::uint32_t entries = 0;
    std::uint64_t time_saved_ms = 0;
};

// BUNDLE_BEGIN's restore (blocking: run it on the worker pool) of `found`,
// the bundle read from `key` in namespace `autotune-bundle` (by the session,
// as a GET reads: a large bundle waits for room in the read budget): writes
// each entry into namespace `autotune` and sums their time_taken_ms. A
// bundle that is not a JSON object is a miss, counted as `corrupt` of
// namespace autotune-bundle (memory tier row). Large bundles
// are written by the calling thread and up to `helpers` tasks posted to
// `pool` (helpers that start after the work ran out return at once, so a
// busy pool never holds the caller up).
BundleRestore restore_bundle(store::Store& store, std::string_view key, const store::Entry& found,
                             asio::thread_pool* pool = nullptr, unsigned helpers = 0);

// BUNDLE_END's store (blocking): writes `{basename: best_config, ...}` as
// json.dumps would under the bundle key in `autotune-bundle`. Returns how
// many entries it stored: 0 for a bundle that was a hit or collected
// nothing.
tl::expected<std::uint32_t, store::StoreError> store_bundle(store::Store& store,
                                                            const BundleRegistry::Closed& bundle);

} // namespace pt2cache::daemon
