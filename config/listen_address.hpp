// SPDX-License-Identifier: MIT
//
// metrics.listen: where the daemon serves GET /metrics over HTTP. The rule
// (docs/configuration.md): HOST:PORT with HOST an IP address literal
// (IPv6 in brackets) or "localhost" (127.0.0.1), PORT 1..65535. No host
// names (nothing is resolved), and never a wildcard (0.0.0.0, [::]): a
// non-loopback address must name one interface's address explicitly.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <tl/expected.hpp>

namespace pt2cache::config {

struct ListenAddress {
    std::string host; // the address literal, without brackets ("127.0.0.1", "::1")
    std::uint16_t port = 0;
    bool ipv6 = false;
    bool loopback = false; // 127.0.0.0/8 or ::1
};

// "" is not an address (the endpoint is off): callers check for it first.
tl::expected<ListenAddress, std::string> parse_listen_address(std::string_view text);

} // namespace pt2cache::config
