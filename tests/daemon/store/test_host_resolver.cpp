// SPDX-License-Identifier: MIT
//
// HostResolver: a name no lookup has answered yet costs a caller its
// deadline at most, never the lookup's time. A resolver with a slow lookup
// function stands in for a slow DNS server (the system's resolver
// configuration is not the test's to change); the real getaddrinfo answers
// "localhost" from /etc/hosts.
#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "daemon/store/remote/host_resolver.hpp"

#include <catch2/catch.hpp>

using pt2cache::daemon::store::HostResolver;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

// Answers "10.0.0.<n>" after `delay` (only for names that start with
// `slow_prefix`), n counting the lookups; names that start with "nx" fail.
struct SlowLookup {
    std::chrono::milliseconds delay;
    std::string slow_prefix;
    std::atomic<int> calls{0};

    HostResolver::Lookup function() {
        return [this](const std::string& host) -> tl::expected<std::string, std::string> {
            const int n = ++calls;
            if (host.starts_with(slow_prefix)) {
                std::this_thread::sleep_for(delay);
            }
            if (host.starts_with("nx")) {
                return tl::unexpected("cannot resolve " + host);
            }
            return "10.0.0." + std::to_string(n);
        };
    }
};

std::chrono::milliseconds since(Clock::time_point start) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
}

} // namespace

TEST_CASE("numeric addresses need no lookup", "[host_resolver]") {
    SlowLookup slow{1s};
    HostResolver resolver(slow.function());
    for (const std::string address : {"127.0.0.1", "10.1.2.3", "::1", "fe80::1"}) {
        CHECK(resolver.resolve(address, Clock::now()) == address);
    }
    CHECK(slow.calls == 0);
    CHECK_FALSE(HostResolver::numeric("localhost"));
    CHECK_FALSE(HostResolver::numeric("127.0.0.1.example"));
}

TEST_CASE("a slow name costs the caller its deadline, then answers at once", "[host_resolver]") {
    SlowLookup slow{400ms};
    HostResolver resolver(slow.function());
    auto start = Clock::now();
    auto first = resolver.resolve("slow.example", start + 50ms);
    REQUIRE_FALSE(first);
    CHECK_THAT(first.error(), Catch::Contains("takes longer than the request may wait"));
    CHECK(since(start) < 300ms);
    // A second caller joins the same lookup; it waits long enough this time.
    auto second = resolver.resolve("slow.example", Clock::now() + 5s);
    CHECK(second == "10.0.0.1");
    start = Clock::now();
    CHECK(resolver.resolve("slow.example", start) == "10.0.0.1");
    CHECK(since(start) < 100ms);
    CHECK(slow.calls == 1);
}

TEST_CASE("a failed lookup is answered as such until it is refreshed", "[host_resolver]") {
    SlowLookup slow{0ms};
    HostResolver resolver(slow.function(), 200ms);
    auto first = resolver.resolve("nx.example", Clock::now() + 5s);
    REQUIRE_FALSE(first);
    CHECK(first.error() == "cannot resolve nx.example");
    CHECK_FALSE(resolver.resolve("nx.example", Clock::now()));
    CHECK(slow.calls == 1);
    // After refresh_after: the last result at once, a new lookup behind it.
    CHECK(resolver.resolve("ok.example", Clock::now() + 5s) == "10.0.0.2");
    std::this_thread::sleep_for(250ms);
    CHECK(resolver.resolve("ok.example", Clock::now()) == "10.0.0.2");
    const auto deadline = Clock::now() + 5s;
    while (slow.calls < 3 && Clock::now() < deadline) {
        std::this_thread::sleep_for(5ms);
    }
    CHECK(slow.calls == 3);
    std::string now;
    while (now != "10.0.0.3" && Clock::now() < deadline) {
        now = resolver.resolve("ok.example", Clock::now()).value_or("");
    }
    CHECK(now == "10.0.0.3");
}

TEST_CASE("a failed name is asked again after a second", "[host_resolver]") {
    SlowLookup slow{0ms};
    HostResolver resolver(slow.function(), std::chrono::hours(1));
    CHECK_FALSE(resolver.resolve("nx.example", Clock::now() + 5s));
    CHECK_FALSE(resolver.resolve("nx.example", Clock::now()));
    CHECK(slow.calls == 1);
    std::this_thread::sleep_for(1100ms);
    CHECK_FALSE(resolver.resolve("nx.example", Clock::now()));
    const auto deadline = Clock::now() + 5s;
    while (slow.calls < 2 && Clock::now() < deadline) {
        std::this_thread::sleep_for(5ms);
    }
    CHECK(slow.calls == 2);
}

TEST_CASE("lookups running at once are bounded", "[host_resolver]") {
    SlowLookup slow{300ms};
    HostResolver resolver(slow.function());
    for (std::size_t i = 0; i < HostResolver::k_max_lookups; ++i) {
        CHECK_FALSE(resolver.resolve("name" + std::to_string(i) + ".example", Clock::now()));
    }
    auto refused = resolver.resolve("one-more.example", Clock::now() + 5s);
    REQUIRE_FALSE(refused);
    CHECK_THAT(refused.error(), Catch::Contains("host name lookups are running"));
    // Their threads may take a while to start (ASan); the refused one never
    // does.
    const auto started_by = Clock::now() + 5s;
    while (slow.calls < static_cast<int>(HostResolver::k_max_lookups) &&
           Clock::now() < started_by) {
        std::this_thread::sleep_for(5ms);
    }
    CHECK(slow.calls == static_cast<int>(HostResolver::k_max_lookups));
    // Once they end, a new name is looked up.
    CHECK(resolver.resolve("name0.example", Clock::now() + 5s));
    CHECK(resolver.resolve("one-more.example", Clock::now() + 5s));
}

TEST_CASE("past k_max_names, names are forgotten but never one waited for", "[host_resolver]") {
    SlowLookup slow{0ms};
    HostResolver resolver(slow.function());
    // A name with a caller waiting for it, then the map filled to its bound
    // (only that name's lookup is slow).
    SlowLookup slower{300ms, "slow"};
    HostResolver waited(slower.function());
    for (std::size_t i = 0; i + 1 < HostResolver::k_max_names; ++i) {
        REQUIRE(waited.resolve("n" + std::to_string(i), Clock::now() + 5s));
    }
    // Callers of names the map lacks evict those no lookup runs for while
    // this one waits for its lookup (ASan: a use after free before).
    tl::expected<std::string, std::string> answer = tl::unexpected(std::string("unset"));
    std::thread waiter([&] { answer = waited.resolve("slow.example", Clock::now() + 5s); });
    const auto until = Clock::now() + 600ms;
    int fresh = 0;
    while (Clock::now() < until) {
        (void)waited.resolve("fresh" + std::to_string(fresh++) + ".example", Clock::now());
        std::this_thread::sleep_for(1ms);
    }
    waiter.join();
    REQUIRE(answer);
    CHECK(answer->starts_with("10.0.0."));
    // The plain resolver keeps answering past its bound.
    for (std::size_t i = 0; i < HostResolver::k_max_names + 10; ++i) {
        REQUIRE(resolver.resolve("m" + std::to_string(i), Clock::now() + 5s));
    }
    CHECK(resolver.resolve("m0", Clock::now() + 5s)); // forgotten, asked again
    CHECK(slow.calls == static_cast<int>(HostResolver::k_max_names + 11));
}

TEST_CASE("an abort ends the wait", "[host_resolver]") {
    SlowLookup slow{600ms};
    HostResolver resolver(slow.function());
    std::atomic<bool> abort{false};
    std::thread raise([&] {
        std::this_thread::sleep_for(100ms);
        abort = true;
    });
    const auto start = Clock::now();
    CHECK_FALSE(resolver.resolve("slow.example", start + 10s, &abort));
    CHECK(since(start) < 500ms);
    raise.join();
}

TEST_CASE("the system's lookup answers localhost", "[host_resolver]") {
    auto address = HostResolver::system_lookup("localhost");
    REQUIRE(address);
    CHECK((*address == "127.0.0.1" || *address == "::1"));
    CHECK(HostResolver::numeric(*address));
}
