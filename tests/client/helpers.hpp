// SPDX-License-Identifier: MIT
//
// Shared by the client tests: value patterns and the daemon guard.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "client/client.hpp"
#include "client/pt2cache.h"
#include "tests/support/daemon_process.hpp"

#include <catch2/catch.hpp>

namespace pt2cache::tests {

// Tests that need the real daemon return early (with a warning) when
// $PT2CACHED is not set, e.g. when the daemon is not built.
#define PT2CACHE_REQUIRE_DAEMON()                                                                  \
    do {                                                                                           \
        if (!::pt2cache::tests::DaemonProcess::executable()) {                                     \
            WARN("PT2CACHED is not set: skipped");                                                 \
            return;                                                                                \
        }                                                                                          \
    } while (false)

// Closes a C API handle at the end of the scope.
struct CapiHandle {
    explicit CapiHandle(const char* path)
        : client(pt2cache_open(path)) {}
    ~CapiHandle() { pt2cache_close(client); }
    CapiHandle(const CapiHandle&) = delete;
    CapiHandle& operator=(const CapiHandle&) = delete;
    pt2cache_client* client;
};

// `size` bytes that neither repeat nor compress well.
inline client::Bytes pattern(std::size_t size, std::uint64_t seed = 1) {
    client::Bytes out(size);
    std::uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
    for (auto& byte : out) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        byte = static_cast<std::byte>(state >> 56);
    }
    return out;
}

inline client::Bytes bytes_of(std::string_view text) {
    const auto* data = reinterpret_cast<const std::byte*>(text.data());
    return client::Bytes(data, data + text.size());
}

inline client::Options options_for(const DaemonProcess& daemon) {
    client::Options options;
    options.socket_path = daemon.socket_path();
    options.client_name = "test_client";
    return options;
}

// Catch2 output for failed expectations.
inline std::string describe(const client::Error& error) {
    return std::string(client::kind_name(error.kind)) + " (" +
           std::string(client::status_name(error.status)) + "): " + error.message;
}

} // namespace pt2cache::tests
