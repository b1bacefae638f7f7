// SPDX-License-Identifier: MIT
//
// The Redis URL forms that TORCHINDUCTOR_REDIS_URL and remote.url accept:
//   redis://[[username]:password@]host[:port][/db][?db=N]
//   unix://[[username]:password@]/path[?db=N]
// User name and password may be percent-encoded.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <tl/expected.hpp>

namespace pt2cache::config {

struct RedisUrl {
    std::string host;        // empty for unix://
    std::uint16_t port = 0;  // 6379 when the URL has none; 0 for unix://
    std::string unix_socket; // empty for redis://
    std::string username;
    std::string password;
    unsigned db = 0;

    bool operator==(const RedisUrl&) const = default;
};

// The forms above, for error messages.
inline constexpr std::string_view k_redis_url_forms =
    "redis://[user:password@]host[:port][/db] or unix:///path[?db=N]";

// Parses `url`. The error names the problem and the accepted forms, and never
// repeats the password.
tl::expected<RedisUrl, std::string> parse_redis_url(std::string_view url);

// A list of URLs separated by commas and/or spaces (remote.cluster_nodes);
// empty for an empty list. The error names the bad entry (password masked).
tl::expected<std::vector<RedisUrl>, std::string> parse_redis_url_list(std::string_view urls);

// The canonical URL of `url`: user name and password percent-encoded (all
// but [A-Za-z0-9-._~]), the port always written, the database as /N (redis)
// or ?db=N (unix, when not 0). parse_redis_url() reads it back to `url`.
std::string format_redis_url(const RedisUrl& url);

// `url` with the password (if any) replaced by "***", for display.
std::string mask_redis_url(std::string_view url);

} // namespace pt2cache::config
