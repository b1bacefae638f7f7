// SPDX-License-Identifier: MIT
// Fuzz target: the Redis URL parser (config/redis_url.*).
// Invariants: a URL that parses formats to a canonical URL that parses to
// the same fields and formats to itself; a masked URL parses to the same
// fields with "***" for a password; an error names the accepted forms.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "config/redis_url.hpp"
#include "tests/fuzz/fuzz_check.hpp"

using namespace pt2cache::config;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    const auto url = parse_redis_url(text);
    if (!url) {
        FUZZ_CHECK(url.error().find(k_redis_url_forms) != std::string::npos);
        return 0;
    }
    FUZZ_CHECK(url->unix_socket.empty() != url->host.empty());
    FUZZ_CHECK(url->unix_socket.empty() == (url->port != 0));

    const auto canonical = format_redis_url(*url);
    const auto again = parse_redis_url(canonical);
    FUZZ_CHECK(again);
    FUZZ_CHECK(*again == *url);
    FUZZ_CHECK(format_redis_url(*again) == canonical);

    const auto masked = parse_redis_url(mask_redis_url(text));
    FUZZ_CHECK(masked);
    auto expected = *url;
    if (!expected.password.empty()) {
        expected.password = "***";
    }
    FUZZ_CHECK(*masked == expected);
    if (!url->password.empty()) {
        FUZZ_CHECK(mask_redis_url(canonical).find(":***@") != std::string::npos);
    }
    return 0;
}
