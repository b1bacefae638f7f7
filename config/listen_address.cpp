// SPDX-License-Identifier: MIT
#include "config/listen_address.hpp"

#include <arpa/inet.h>
#include <charconv>
#include <cstring>

#include <fmt/core.h>

namespace pt2cache::config {

namespace {

constexpr std::string_view k_form = "expected HOST:PORT with HOST an IP address (IPv6 in "
                                    "brackets) or localhost, e.g. 127.0.0.1:9464 or [::1]:9464";

} // namespace

tl::expected<ListenAddress, std::string> parse_listen_address(std::string_view text) {
    const auto bad = [&](std::string_view why) {
        return tl::make_unexpected(fmt::format("\"{}\": {}", text, why));
    };
    ListenAddress address;
    std::string_view host;
    std::string_view port;
    if (text.starts_with('[')) {
        const auto close = text.find(']');
        if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
            return bad(k_form);
        }
        host = text.substr(1, close - 1);
        port = text.substr(close + 2);
        address.ipv6 = true;
    } else {
        const auto colon = text.rfind(':');
        if (colon == std::string_view::npos || text.find(':') != colon) {
            return bad(k_form);
        }
        host = text.substr(0, colon);
        port = text.substr(colon + 1);
    }
    unsigned number = 0;
    const auto [end, error] = std::from_chars(port.data(), port.data() + port.size(), number);
    if (port.empty() || error != std::errc() || end != port.data() + port.size() || number == 0 ||
        number > 65535) {
        return bad("the port must be a number from 1 to 65535");
    }
    address.port = static_cast<std::uint16_t>(number);
    if (!address.ipv6 && host == "localhost") {
        host = "127.0.0.1";
    }
    address.host = std::string(host);
    if (address.ipv6) {
        in6_addr ip{};
        if (::inet_pton(AF_INET6, address.host.c_str(), &ip) != 1) {
            return bad(fmt::format("\"{}\" is not an IPv6 address; {}", host, k_form));
        }
        if (IN6_IS_ADDR_UNSPECIFIED(&ip)) {
            return bad("[::] listens on every interface; name one address (e.g. [::1] for "
                       "loopback)");
        }
        address.loopback = IN6_IS_ADDR_LOOPBACK(&ip) != 0;
    } else {
        in_addr ip{};
        if (::inet_pton(AF_INET, address.host.c_str(), &ip) != 1) {
            return bad(fmt::format("\"{}\" is not an IPv4 address (host names are not resolved); "
                                   "{}",
                                   host, k_form));
        }
        const auto value = ntohl(ip.s_addr);
        if (value == 0) {
            return bad("0.0.0.0 listens on every interface; name one address (e.g. 127.0.0.1 "
                       "for loopback)");
        }
        address.loopback = (value >> 24) == 127;
    }
    return address;
}

} // namespace pt2cache::config
