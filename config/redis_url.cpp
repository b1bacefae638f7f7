// SPDX-License-Identifier: MIT
#include "config/redis_url.hpp"

#include <limits>
#include <optional>

#include "config/values.hpp"

#include <fmt/core.h>

namespace pt2cache::config {

namespace {

constexpr std::string_view k_scheme_separator = "://";
constexpr std::uint16_t k_default_port = 6379;
// Redis parses SELECT's argument as a signed 32-bit integer.
constexpr std::uint64_t k_max_db = std::numeric_limits<std::int32_t>::max();

int hex_value(char c) {
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }
    return -1;
}

std::optional<std::string> percent_decode(std::string_view text) {
    std::string result;
    for (std::size_t i = 0; i < text.size(); ++i) {
        if (text[i] != '%') {
            result += text[i];
            continue;
        }
        if (i + 2 >= text.size()) {
            return std::nullopt;
        }
        int high = hex_value(text[i + 1]);
        int low = hex_value(text[i + 2]);
        if (high < 0 || low < 0) {
            return std::nullopt;
        }
        result += static_cast<char>(high * 16 + low);
        i += 2;
    }
    return result;
}

std::string percent_encode(std::string_view text) {
    std::string result;
    for (const char c : text) {
        const bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                                (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' ||
                                c == '~';
        if (unreserved) {
            result += c;
        } else {
            result += fmt::format("%{:02X}", static_cast<unsigned char>(c));
        }
    }
    return result;
}

tl::expected<unsigned, std::string> parse_db(std::string_view text) {
    auto db = parse_integer(text, 0, k_max_db);
    if (!db) {
        return tl::make_unexpected(fmt::format("bad database number {}", quote(text)));
    }
    return static_cast<unsigned>(*db);
}

// Splits "host[:port]" or "[v6]:port" into `url`.
tl::expected<void, std::string> parse_host_port(std::string_view text, RedisUrl& url) {
    std::string_view host = text;
    std::string_view port;
    if (text.starts_with('[')) {
        auto close = text.find(']');
        if (close == std::string_view::npos) {
            return tl::make_unexpected("unterminated [IPv6 address]");
        }
        host = text.substr(1, close - 1);
        std::string_view after = text.substr(close + 1);
        if (!after.empty() && !after.starts_with(':')) {
            return tl::make_unexpected("unexpected text after ]");
        }
        port = after.empty() ? after : after.substr(1);
        if (after == ":") {
            return tl::make_unexpected("empty port");
        }
    } else if (auto colon = text.find(':'); colon != std::string_view::npos) {
        host = text.substr(0, colon);
        port = text.substr(colon + 1);
        if (port.empty()) {
            return tl::make_unexpected("empty port");
        }
    }
    if (host.empty()) {
        return tl::make_unexpected("missing host");
    }
    url.host = host;
    url.port = k_default_port;
    if (!port.empty()) {
        auto number = parse_integer(port, 1, 65535);
        if (!number) {
            return tl::make_unexpected(fmt::format("bad port {} (1 to 65535)", quote(port)));
        }
        url.port = static_cast<std::uint16_t>(*number);
    }
    return {};
}

tl::expected<void, std::string> parse_query(std::string_view query, RedisUrl& url) {
    while (!query.empty()) {
        auto amp = query.find('&');
        std::string_view param = query.substr(0, amp);
        query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
        if (param.empty()) {
            continue;
        }
        auto eq = param.find('=');
        std::string_view name = param.substr(0, eq);
        // redis-py's client-side options (protocol=2, socket_timeout=...,
        // health_check_interval=...) mean nothing to our pool: ignore them,
        // so that one TORCHINDUCTOR_REDIS_URL serves PyTorch and pt2cached.
        if (name != "db") {
            continue;
        }
        if (eq == std::string_view::npos) {
            return tl::make_unexpected("URL parameter \"db\" needs a value: db=N");
        }
        auto db = parse_db(param.substr(eq + 1));
        if (!db) {
            return tl::make_unexpected(db.error());
        }
        url.db = *db;
    }
    return {};
}

// Whether `url` (redis:// or rediss://) has an '@' past its authority: in
// the query (redis-py's options may hold one), or ending a password that
// holds a '/' or '?'.
bool at_past_authority(std::string_view url) {
    const auto separator = url.find(k_scheme_separator);
    if (separator == std::string_view::npos || url.starts_with("unix")) {
        return false;
    }
    const auto rest = url.substr(separator + k_scheme_separator.size());
    const auto authority = rest.substr(0, rest.find_first_of("/?"));
    return authority.find('@') == std::string_view::npos &&
           rest.find('@') != std::string_view::npos;
}

tl::expected<RedisUrl, std::string> parse(std::string_view text) {
    auto separator = text.find(k_scheme_separator);
    if (separator == std::string_view::npos) {
        return tl::make_unexpected("not a URL");
    }
    std::string_view scheme = text.substr(0, separator);
    bool is_unix = scheme == "unix";
    bool is_tls = scheme == "rediss";
    if (scheme != "redis" && !is_unix && !is_tls) {
        return tl::make_unexpected(fmt::format("unsupported scheme {}", quote(scheme)));
    }
    std::string_view rest = text.substr(separator + k_scheme_separator.size());

    std::string_view query;
    if (auto question = rest.find('?'); question != std::string_view::npos) {
        query = rest.substr(question + 1);
        rest = rest.substr(0, question);
    }
    auto slash = rest.find('/');
    std::string_view authority = rest.substr(0, slash);
    std::string_view path =
        slash == std::string_view::npos ? std::string_view() : rest.substr(slash);

    RedisUrl url;
    url.tls = is_tls;
    if (auto at = authority.rfind('@'); at != std::string_view::npos) {
        std::string_view userinfo = authority.substr(0, at);
        authority = authority.substr(at + 1);
        auto colon = userinfo.find(':');
        auto username = percent_decode(userinfo.substr(0, colon));
        auto password = percent_decode(
            colon == std::string_view::npos ? std::string_view() : userinfo.substr(colon + 1));
        if (!username || !password) {
            return tl::make_unexpected("bad percent-encoding in the user name or password");
        }
        if (username->find('\0') != std::string::npos ||
            password->find('\0') != std::string::npos) {
            return tl::make_unexpected("a NUL byte (%00) in the user name or password");
        }
        url.username = std::move(*username);
        url.password = std::move(*password);
    }

    if (is_unix) {
        if (!authority.empty()) {
            return tl::make_unexpected(
                "a unix:// URL takes no host: write unix:///absolute/path (three slashes)");
        }
        if (path.size() < 2) {
            return tl::make_unexpected("missing socket path");
        }
        url.unix_socket = path;
    } else {
        if (auto result = parse_host_port(authority, url); !result) {
            return tl::make_unexpected(result.error());
        }
        if (path.size() > 1) {
            auto db = parse_db(path.substr(1));
            if (!db) {
                return tl::make_unexpected(db.error());
            }
            url.db = *db;
        }
    }
    if (auto result = parse_query(query, url); !result) {
        return tl::make_unexpected(result.error());
    }
    return url;
}

} // namespace

tl::expected<RedisUrl, std::string> parse_redis_url(std::string_view url) {
    auto result = parse(url);
    if (!result && at_past_authority(url)) {
        // The '@' may end a password that holds an unencoded '/' or '?'
        // (the parts were then split in the wrong places, and the reason
        // could quote a piece of the password), or sit in the query.
        return tl::make_unexpected(
            fmt::format("malformed URL, or a user name or password holding '/' or '?' (percent-"
                        "encode them: %2F, %3F) in {}; expected {}",
                        quote(mask_redis_url(url)), k_redis_url_forms));
    }
    if (!result) {
        return tl::make_unexpected(fmt::format("{} in {}; expected {}", result.error(),
                                               quote(mask_redis_url(url)), k_redis_url_forms));
    }
    return result;
}

std::string format_redis_url(const RedisUrl& url) {
    std::string userinfo;
    if (!url.username.empty() || !url.password.empty()) {
        userinfo = percent_encode(url.username);
        if (!url.password.empty()) {
            userinfo += ":" + percent_encode(url.password);
        }
        userinfo += '@';
    }
    if (!url.unix_socket.empty()) {
        std::string text = fmt::format("unix://{}{}", userinfo, url.unix_socket);
        if (url.db != 0) {
            text += fmt::format("?db={}", url.db);
        }
        return text;
    }
    // A host that came from brackets ("[::1]") goes back into them.
    const bool bracket = url.host.find(':') != std::string::npos || url.host.starts_with('[');
    const std::string_view scheme = url.tls ? "rediss" : "redis";
    std::string text = bracket ? fmt::format("{}://{}[{}]:{}", scheme, userinfo, url.host, url.port)
                               : fmt::format("{}://{}{}:{}", scheme, userinfo, url.host, url.port);
    if (url.db != 0) {
        text += fmt::format("/{}", url.db);
    }
    return text;
}

std::string mask_redis_url(std::string_view url) {
    auto separator = url.find(k_scheme_separator);
    if (separator == std::string_view::npos) {
        return std::string(url);
    }
    // A URL that parses has its user information in its authority (a
    // socket path or a query may hold an '@' and a ':'). In one that does
    // not, the last '@' ends it, even one past a '/' or '?' of a password
    // that was not percent-encoded: there masking too much is harmless,
    // showing a password is not.
    std::size_t start = separator + k_scheme_separator.size();
    std::size_t end = url.size();
    if (parse(url)) {
        end = std::min(url.find_first_of("/?", start), url.size());
    }
    std::string_view authority = url.substr(start, end - start);
    auto at = authority.rfind('@');
    if (at == std::string_view::npos) {
        return std::string(url);
    }
    auto colon = authority.substr(0, at).find(':');
    if (colon == std::string_view::npos || colon + 1 == at) {
        return std::string(url);
    }
    std::string result(url);
    result.replace(start + colon + 1, at - colon - 1, "***");
    return result;
}

tl::expected<std::vector<RedisUrl>, std::string> parse_redis_url_list(std::string_view urls) {
    std::vector<RedisUrl> parsed;
    constexpr std::string_view k_separators = ", \t";
    // A separator ends a URL only before the next URL's scheme (or the
    // end): one inside an unencoded password would otherwise split it, and
    // the error would show the half before the '@' unmasked.
    const auto url_end = [&](std::size_t from) {
        for (auto at = urls.find_first_of(k_separators, from); at != std::string_view::npos;
             at = urls.find_first_of(k_separators, at + 1)) {
            const auto next = urls.find_first_not_of(k_separators, at);
            if (next == std::string_view::npos) {
                return at;
            }
            const auto tail = urls.substr(next);
            if (tail.starts_with("redis://") || tail.starts_with("rediss://") ||
                tail.starts_with("unix://")) {
                return at;
            }
        }
        return urls.size();
    };
    std::size_t start = urls.find_first_not_of(k_separators);
    while (start != std::string_view::npos) {
        const auto end = url_end(start);
        const auto one = urls.substr(start, end - start);
        auto url = parse_redis_url(one);
        if (!url) {
            return tl::make_unexpected(fmt::format("{}: {}", mask_redis_url(one), url.error()));
        }
        parsed.push_back(std::move(*url));
        start = urls.find_first_not_of(k_separators, end);
    }
    return parsed;
}

} // namespace pt2cache::config
