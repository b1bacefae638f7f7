// SPDX-License-Identifier: MIT
#include "daemon/store/remote/host_resolver.hpp"

#include <arpa/inet.h>
#include <array>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <system_error>
#include <thread>
#include <utility>

#include <fmt/format.h>

namespace pt2cache::daemon::store {

namespace {

// How often a wait looks at the abort flag.
constexpr std::chrono::milliseconds k_abort_poll{50};
// When a failed lookup is repeated (a success: after refresh_after).
constexpr std::chrono::milliseconds k_retry_failure_after{1000};

} // namespace

HostResolver& HostResolver::shared() {
    static auto* resolver = new HostResolver(&HostResolver::system_lookup);
    return *resolver;
}

HostResolver::HostResolver(Lookup lookup, std::chrono::milliseconds refresh_after)
    : m_lookup(std::move(lookup))
    , m_refresh_after(refresh_after) {}

HostResolver::~HostResolver() {
    std::unique_lock lock(m_mutex);
    m_done.wait(lock, [this] { return m_running == 0; });
}

bool HostResolver::numeric(const std::string& host) {
    std::array<unsigned char, sizeof(in6_addr)> address{};
    return ::inet_pton(AF_INET, host.c_str(), address.data()) == 1 ||
           ::inet_pton(AF_INET6, host.c_str(), address.data()) == 1;
}

tl::expected<std::string, std::string> HostResolver::system_lookup(const std::string& host) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (const int error = ::getaddrinfo(host.c_str(), nullptr, &hints, &found); error != 0) {
        return tl::unexpected(fmt::format("cannot resolve {}: {}", host, ::gai_strerror(error)));
    }
    const addrinfo* pick = nullptr;
    for (const addrinfo* at = found; at != nullptr; at = at->ai_next) {
        if (at->ai_family == AF_INET) {
            pick = at;
            break;
        }
        if (at->ai_family == AF_INET6 && pick == nullptr) {
            pick = at;
        }
    }
    std::array<char, INET6_ADDRSTRLEN> text{};
    const char* written = nullptr;
    if (pick != nullptr && pick->ai_family == AF_INET) {
        written =
            ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(pick->ai_addr)->sin_addr,
                        text.data(), text.size());
    } else if (pick != nullptr) {
        written =
            ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(pick->ai_addr)->sin6_addr,
                        text.data(), text.size());
    }
    ::freeaddrinfo(found);
    if (written == nullptr) {
        return tl::unexpected(fmt::format("cannot resolve {}: no IPv4 or IPv6 address", host));
    }
    return std::string(written);
}

bool HostResolver::start_lookup(const std::string& host, Name& name) {
    if (name.looking) {
        return true;
    }
    if (m_running >= k_max_lookups) {
        return false;
    }
    try {
        std::thread([this, host] {
            auto result = m_lookup(host);
            std::lock_guard lock(m_mutex);
            auto& done = m_names[host];
            done.looking = false;
            done.resolved = true;
            done.when = Clock::now();
            done.result = std::move(result);
            --m_running;
            m_done.notify_all();
        }).detach();
    } catch (const std::system_error&) {
        return false; // no thread now (a limit): the caller fails, the next one tries
    }
    name.looking = true;
    ++m_running;
    return true;
}

tl::expected<std::string, std::string> HostResolver::resolve(const std::string& host,
                                                             Clock::time_point deadline,
                                                             const std::atomic<bool>* abort) {
    if (numeric(host)) {
        return host;
    }
    std::unique_lock lock(m_mutex);
    if (m_names.size() >= k_max_names && !m_names.contains(host)) {
        std::erase_if(m_names, [](const auto& entry) {
            return !entry.second.looking && entry.second.waiters == 0;
        });
    }
    Name& name = m_names[host];
    if (name.resolved) {
        // A failure is asked again sooner: a name that appears later (a
        // service still starting) should not wait for the full period.
        const auto period =
            name.result ? m_refresh_after : std::min(m_refresh_after, k_retry_failure_after);
        if (Clock::now() - name.when >= period) {
            start_lookup(host, name); // in the background; the last result meanwhile
        }
        return name.result;
    }
    if (!start_lookup(host, name)) {
        return tl::unexpected(fmt::format("cannot resolve {} now: {} other host name lookups are "
                                          "running, or no thread could be started",
                                          host, k_max_lookups));
    }
    // `name` stays valid while waited for: eviction passes over names with
    // waiters (and a rehash moves no element).
    ++name.waiters;
    for (;;) {
        const auto step = std::min(deadline, Clock::now() + k_abort_poll);
        m_done.wait_until(lock, step, [&] { return name.resolved; });
        if (name.resolved) {
            --name.waiters;
            return name.result;
        }
        const bool aborted = abort != nullptr && abort->load(std::memory_order_relaxed);
        if (aborted || Clock::now() >= deadline) {
            --name.waiters;
            return tl::unexpected(fmt::format("resolving {} takes longer than the request may "
                                              "wait; it goes on in the background",
                                              host));
        }
    }
}

} // namespace pt2cache::daemon::store
