// Helpers shared by the RESP session's files (resp_session.cpp, resp_data.cpp):
// command names, integers and key mapping. Internal to the daemon.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "proto/frame.hpp"
#include "proto/inductor_keys.hpp"

#include <fmt/format.h>

namespace pt2cache::daemon::resp_detail {

// Values a deferred SET takes (RespSession::defer_set). Larger ones go
// straight to the full path: they are the ones likely to need compression (at
// disk.compress_threshold) or room the write queue lacks.
inline constexpr std::size_t k_quick_value_max = 16 << 10;

// Deferred SETs are stored once this many wait, or values of this many bytes.
// The copies are outside daemon.max_inflight_bytes (a connection waits for room
// in the write queue holding them): keep them near the input buffer every
// connection holds outside it (InputBuffer::k_base, 16 KiB).
inline constexpr std::size_t k_max_deferred_sets = 64;
inline constexpr std::uint64_t k_max_deferred_bytes = 32 << 10;

// Command names and options are ASCII, compared as Redis does in the C
// locale; std::toupper would be a library call per character.
constexpr char ascii_upper(char c) {
    return c >= 'a' && c <= 'z' ? static_cast<char>(c - 'a' + 'A') : c;
}

inline std::string upper(std::string_view text) {
    std::string out(text);
    std::transform(out.begin(), out.end(), out.begin(), ascii_upper);
    return out;
}

// An integer as Redis reads one (string2ll): an optional '-', then "0" alone
// or digits without a leading zero; no '+', spaces or "-0". A SET with
// `EX 010` is an error there, not ten seconds.
inline std::optional<std::int64_t> to_int(std::string_view text) {
    const std::string_view digits = text.starts_with('-') ? text.substr(1) : text;
    if (digits.empty() || digits.front() < '0' || digits.front() > '9' ||
        (digits.front() == '0' && text.size() > 1)) {
        return std::nullopt;
    }
    std::int64_t value = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size()) {
        return std::nullopt;
    }
    return value;
}

// Whether `name` is the command `upper_name` (given in upper case), in any case.
inline bool is_command(std::string_view name, std::string_view upper_name) {
    return name.size() == upper_name.size() &&
           std::equal(name.begin(), name.end(), upper_name.begin(),
                      [](char a, char b) { return ascii_upper(a) == b; });
}

// What an error reply quotes of a client's argument: its first 128 bytes, as
// Redis quotes an unknown command or subcommand ("%.128s").
inline std::string_view quoted(std::string_view arg) {
    return arg.substr(0, 128);
}

// Why a SET of `redis_key`, which map_key refused, cannot be stored.
inline std::string unstorable_key(std::string_view redis_key) {
    if (redis_key.size() > proto::k_max_key) {
        return fmt::format("key of {} bytes is over the {} byte limit", redis_key.size(),
                           proto::k_max_key);
    }
    return "the key maps to an empty native key";
}

// The namespaced key for a Redis key, or nullopt when it cannot be stored
// (longer than the native key limit).
inline std::optional<proto::NamespacedKey> map_key(std::string_view redis_key) {
    auto mapped = proto::from_redis_key(redis_key);
    if (mapped.key.empty() || mapped.key.size() > proto::k_max_key) {
        return std::nullopt;
    }
    return mapped;
}

} // namespace pt2cache::daemon::resp_detail
