// SPDX-License-Identifier: MIT
// A bounded, incremental reader of RESP2 replies, for the remote tier: the
// bytes come from a Redis (or whatever answers on its port) and are untrusted.
// The grammar and limits are in docs/remote.md ("Replies from Redis are
// untrusted input"). Pure: no I/O, no logging.
//
// Memory is committed as bytes arrive, never from an announced length or
// count: a bulk's buffer grows in bounded steps, an array's elements as they
// are parsed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace pt2cache::proto {

struct RedisReplyLimits {
    std::uint64_t max_bulk = 512ULL << 20; // Redis's proto-max-bulk-len
    std::size_t max_line = 64 << 10;       // a header line, CRLF excluded
    unsigned max_depth = 8;                // nested arrays
    std::uint64_t max_elements = 65536;    // array elements, summed over one reply
    // One reply as a whole (its header lines and bulk strings, nesting
    // included) may hold at most `max_bulk` plus this much: a GET's value, or
    // an MGET's value and its companion signature, or a CLUSTER SLOTS reply.
    // Without it, an array of many bulks just under `max_bulk` would commit
    // memory (and earn transfer time) without bound.
    std::uint64_t max_reply_extra = 16ULL << 20;
};

// One reply. A bulk string's bytes are in `data`, a vector the caller can
// move into its own buffer type without a copy.
struct RedisValue {
    enum class Type { string, status, error, integer, nil, array };

    Type type = Type::nil;
    std::int64_t integer = 0;
    std::vector<std::byte> data = {}; // string, status and error
    std::vector<RedisValue> elements = {};

    std::string_view text() const {
        return {reinterpret_cast<const char*>(data.data()), data.size()};
    }
    bool operator==(const RedisValue&) const = default;
};

// The RESP2 encoding of `value` (for tests and the fuzz target's round trip).
void encode_redis_value(const RedisValue& value, std::string& out);

// "string", "status", ... for messages.
std::string_view redis_type_name(RedisValue::Type type);

class RedisReplyReader {
public:
    explicit RedisReplyReader(RedisReplyLimits limits = {});

    // The limits of the replies parsed from now on (a command whose reply is
    // of another shape by nature: CLUSTER SLOTS). Call between replies.
    void set_limits(const RedisReplyLimits& limits) { m_limits = limits; }
    const RedisReplyLimits& limits() const { return m_limits; }

    // Parses `bytes` (any split: one byte at a time works). Complete replies
    // queue up for `next()`. Returns false on a protocol error: `error()` says
    // which, and every later call fails the same way.
    bool feed(std::span<const std::byte> bytes);
    bool feed(std::string_view bytes) {
        return feed(std::as_bytes(std::span(bytes.data(), bytes.size())));
    }

    // For reading a large bulk value straight into its buffer: while the
    // reader is inside a bulk's bytes, a writable span of at most `max`
    // bytes at the end of the value (growing the buffer by a bounded step);
    // empty otherwise. Write into it, then call `commit(n)`.
    std::span<std::byte> bulk_room(std::size_t max);
    void commit(std::size_t written);

    // The oldest complete reply not yet taken.
    std::optional<RedisValue> next();
    std::size_t ready() const { return m_ready.size(); }

    // True when no reply is in progress and none is waiting.
    bool idle() const;
    const std::optional<std::string>& error() const { return m_error; }

private:
    enum class Stage { header, bulk, bulk_cr, bulk_lf };
    struct Open {
        RedisValue array;
        std::uint64_t expected = 0;
    };

    bool fail(std::string message);
    bool on_line();
    bool on_length(char type, std::string_view digits);
    // Adds `bytes` to the reply in progress; false when that is over the limit.
    bool take_reply_bytes(std::uint64_t bytes);
    void deliver(RedisValue value);
    // Grows the bulk buffer so that `want` more bytes fit, by a bounded step.
    void grow_bulk(std::size_t want);

    RedisReplyLimits m_limits;
    Stage m_stage = Stage::header;
    std::string m_line; // the header line so far, without CRLF
    bool m_cr = false;  // the line's last byte was CR
    RedisValue m_bulk;  // the bulk being read; data.size() == m_filled after a commit
    std::size_t m_filled = 0;
    std::uint64_t m_bulk_left = 0;
    std::uint64_t m_elements = 0;    // announced elements in the reply in progress
    std::uint64_t m_reply_bytes = 0; // header lines and announced bulks of the reply in progress
    std::vector<Open> m_open;        // arrays being filled, outermost first
    std::deque<RedisValue> m_ready;
    std::optional<std::string> m_error;
};

} // namespace pt2cache::proto
