// SPDX-License-Identifier: MIT
#include "proto/redis_reply.hpp"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <limits>
#include <utility>

#include <fmt/format.h>

namespace pt2cache::proto {

namespace {

// A bulk's buffer grows to at most twice what has arrived, or this much.
constexpr std::size_t k_bulk_step = 64 << 10;

std::string_view resp3_name(char type) {
    switch (type) {
    case '%':
        return "map";
    case '~':
        return "set";
    case '>':
        return "push";
    case '|':
        return "attribute";
    case '_':
        return "null";
    case ',':
        return "double";
    case '#':
        return "boolean";
    case '=':
        return "verbatim string";
    case '(':
        return "big number";
    case '!':
        return "blob error";
    default:
        return {};
    }
}

// A decimal int64: an optional '-' and digits only, nothing else.
std::optional<std::int64_t> parse_int64(std::string_view digits) {
    if (digits.empty() || digits == "-" || digits[0] == '+') {
        return std::nullopt;
    }
    std::int64_t value = 0;
    const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (ec != std::errc() || ptr != digits.data() + digits.size()) {
        return std::nullopt;
    }
    return value;
}

std::string printable(std::string_view text) {
    constexpr std::size_t k_shown = 32;
    std::string out;
    for (const char c : text.substr(0, k_shown)) {
        if (c >= 0x20 && c < 0x7f) {
            out += c;
        } else {
            out += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
        }
    }
    if (text.size() > k_shown) {
        out += "...";
    }
    return out;
}

} // namespace

std::string_view redis_type_name(RedisValue::Type type) {
    switch (type) {
    case RedisValue::Type::string:
        return "string";
    case RedisValue::Type::status:
        return "status";
    case RedisValue::Type::error:
        return "error";
    case RedisValue::Type::integer:
        return "integer";
    case RedisValue::Type::nil:
        return "nil";
    case RedisValue::Type::array:
        return "array";
    }
    return "unknown";
}

void encode_redis_value(const RedisValue& value, std::string& out) {
    switch (value.type) {
    case RedisValue::Type::string:
        out += fmt::format("${}\r\n", value.data.size());
        out += value.text();
        out += "\r\n";
        return;
    case RedisValue::Type::status:
    case RedisValue::Type::error:
        out += value.type == RedisValue::Type::status ? '+' : '-';
        out += value.text();
        out += "\r\n";
        return;
    case RedisValue::Type::integer:
        out += fmt::format(":{}\r\n", value.integer);
        return;
    case RedisValue::Type::nil:
        out += "$-1\r\n";
        return;
    case RedisValue::Type::array:
        out += fmt::format("*{}\r\n", value.elements.size());
        for (const auto& element : value.elements) {
            encode_redis_value(element, out);
        }
        return;
    }
}

RedisReplyReader::RedisReplyReader(RedisReplyLimits limits)
    : m_limits(limits) {}

bool RedisReplyReader::fail(std::string message) {
    if (!m_error) {
        m_error = std::move(message);
    }
    return false;
}

bool RedisReplyReader::idle() const {
    return !m_error && m_stage == Stage::header && m_line.empty() && !m_cr && m_open.empty() &&
           m_ready.empty();
}

std::optional<RedisValue> RedisReplyReader::next() {
    if (m_ready.empty()) {
        return std::nullopt;
    }
    auto value = std::move(m_ready.front());
    m_ready.pop_front();
    return value;
}

void RedisReplyReader::deliver(RedisValue value) {
    for (;;) {
        if (m_open.empty()) {
            m_ready.push_back(std::move(value));
            m_elements = 0;
            m_reply_bytes = 0;
            return;
        }
        auto& open = m_open.back();
        open.array.elements.push_back(std::move(value));
        if (open.array.elements.size() < open.expected) {
            return;
        }
        value = std::move(open.array);
        m_open.pop_back();
    }
}

void RedisReplyReader::grow_bulk(std::size_t want) {
    auto& data = m_bulk.data;
    if (data.capacity() - m_filled >= want) {
        return;
    }
    const std::uint64_t announced = m_filled + m_bulk_left;
    const std::uint64_t step = std::max<std::uint64_t>(k_bulk_step, 2 * std::uint64_t{m_filled});
    const auto target = static_cast<std::size_t>(std::min(announced, step));
    data.reserve(std::max(target, m_filled + want));
}

std::span<std::byte> RedisReplyReader::bulk_room(std::size_t max) {
    if (m_error || m_stage != Stage::bulk || m_bulk_left == 0 || max == 0) {
        return {};
    }
    const auto want = static_cast<std::size_t>(std::min<std::uint64_t>(max, m_bulk_left));
    grow_bulk(1);
    const std::size_t room = std::min(want, m_bulk.data.capacity() - m_filled);
    m_bulk.data.resize(m_filled + room);
    return {m_bulk.data.data() + m_filled, room};
}

void RedisReplyReader::commit(std::size_t written) {
    written = std::min(written, m_bulk.data.size() - m_filled);
    m_filled += written;
    m_bulk_left -= written;
    m_bulk.data.resize(m_filled);
    if (m_bulk_left == 0 && m_stage == Stage::bulk) {
        m_stage = Stage::bulk_cr;
    }
}

bool RedisReplyReader::take_reply_bytes(std::uint64_t bytes) {
    const std::uint64_t limit =
        m_limits.max_bulk + std::min(m_limits.max_reply_extra,
                                     std::numeric_limits<std::uint64_t>::max() - m_limits.max_bulk);
    if (bytes > limit - m_reply_bytes) {
        return fail(fmt::format("reply larger than {} bytes (the largest value, {} bytes, plus {})",
                                limit, m_limits.max_bulk, m_limits.max_reply_extra));
    }
    m_reply_bytes += bytes;
    return true;
}

bool RedisReplyReader::on_length(char type, std::string_view digits) {
    const auto length = parse_int64(digits);
    const std::string_view what = type == '$' ? "bulk length" : "array length";
    if (!length) {
        return fail(fmt::format("{} \"{}\" is not a number", what, printable(digits)));
    }
    if (*length == -1) {
        deliver(RedisValue{});
        return true;
    }
    if (*length < 0) {
        return fail(fmt::format("negative {} {}", what, *length));
    }
    const auto count = static_cast<std::uint64_t>(*length);
    if (type == '$') {
        if (count > m_limits.max_bulk) {
            return fail(
                fmt::format("bulk length {} over the limit of {} bytes", count, m_limits.max_bulk));
        }
        if (!take_reply_bytes(count + 2)) {
            return false;
        }
        m_bulk = RedisValue{.type = RedisValue::Type::string};
        m_filled = 0;
        m_bulk_left = count;
        m_stage = count == 0 ? Stage::bulk_cr : Stage::bulk;
        return true;
    }
    if (count > m_limits.max_elements - std::min(m_elements, m_limits.max_elements)) {
        return fail(fmt::format("array of {} elements: over the limit of {} elements in a reply",
                                count, m_limits.max_elements));
    }
    if (count == 0) {
        deliver(RedisValue{.type = RedisValue::Type::array});
        return true;
    }
    if (m_open.size() >= m_limits.max_depth) {
        return fail(fmt::format("arrays nested deeper than {} levels", m_limits.max_depth));
    }
    m_elements += count;
    m_open.push_back(Open{RedisValue{.type = RedisValue::Type::array}, count});
    return true;
}

bool RedisReplyReader::on_line() {
    const std::string_view line = m_line;
    if (line.empty()) {
        return fail("empty reply line");
    }
    if (!take_reply_bytes(line.size() + 2)) {
        return false;
    }
    const char type = line[0];
    const std::string_view rest = line.substr(1);
    switch (type) {
    case '+':
    case '-': {
        RedisValue value{.type = type == '+' ? RedisValue::Type::status : RedisValue::Type::error};
        const auto bytes = std::as_bytes(std::span(rest.data(), rest.size()));
        value.data.assign(bytes.begin(), bytes.end());
        deliver(std::move(value));
        return true;
    }
    case ':': {
        const auto number = parse_int64(rest);
        if (!number) {
            return fail(fmt::format("integer reply \"{}\" is not a number", printable(rest)));
        }
        deliver(RedisValue{.type = RedisValue::Type::integer, .integer = *number});
        return true;
    }
    case '$':
    case '*':
        return on_length(type, rest);
    default:
        break;
    }
    if (const auto name = resp3_name(type); !name.empty()) {
        return fail(fmt::format("RESP3 reply type '{}' ({}) not accepted: the remote tier speaks "
                                "RESP2",
                                type, name));
    }
    return fail(fmt::format("unknown reply type byte 0x{:02x} in \"{}\"",
                            static_cast<unsigned char>(type), printable(line)));
}

bool RedisReplyReader::feed(std::span<const std::byte> bytes) {
    if (m_error) {
        return false;
    }
    const auto* data = reinterpret_cast<const char*>(bytes.data());
    std::size_t pos = 0;
    const std::size_t size = bytes.size();
    while (pos < size) {
        switch (m_stage) {
        case Stage::header: {
            if (m_cr) {
                if (data[pos] != '\n') {
                    return fail(
                        fmt::format("CR not followed by LF after \"{}\"", printable(m_line)));
                }
                ++pos;
                m_cr = false;
                const bool ok = on_line();
                m_line.clear();
                if (!ok) {
                    return false;
                }
                break;
            }
            const std::string_view rest(data + pos, size - pos);
            const auto end = rest.find_first_of("\r\n");
            const auto take = std::min(end, rest.size());
            if (m_line.size() + take > m_limits.max_line) {
                return fail(fmt::format("reply line longer than {} bytes", m_limits.max_line));
            }
            m_line.append(rest.substr(0, take));
            pos += take;
            if (end == std::string_view::npos) {
                break;
            }
            if (rest[end] == '\n') {
                return fail(fmt::format("LF without CR after \"{}\"", printable(m_line)));
            }
            m_cr = true;
            ++pos;
            break;
        }
        case Stage::bulk: {
            const auto take =
                static_cast<std::size_t>(std::min<std::uint64_t>(m_bulk_left, size - pos));
            grow_bulk(take);
            const auto* from = bytes.data() + pos;
            m_bulk.data.insert(m_bulk.data.end(), from, from + take);
            m_filled += take;
            m_bulk_left -= take;
            pos += take;
            if (m_bulk_left == 0) {
                m_stage = Stage::bulk_cr;
            }
            break;
        }
        case Stage::bulk_cr:
        case Stage::bulk_lf: {
            const char want = m_stage == Stage::bulk_cr ? '\r' : '\n';
            if (data[pos] != want) {
                return fail(fmt::format("bulk string of {} bytes not followed by CRLF",
                                        m_bulk.data.size()));
            }
            ++pos;
            if (m_stage == Stage::bulk_cr) {
                m_stage = Stage::bulk_lf;
            } else {
                m_stage = Stage::header;
                m_filled = 0;
                deliver(std::exchange(m_bulk, RedisValue{}));
            }
            break;
        }
        }
    }
    return true;
}

} // namespace pt2cache::proto
