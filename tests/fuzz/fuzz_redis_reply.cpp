// SPDX-License-Identifier: MIT
// libFuzzer target for proto::RedisReplyReader, the remote tier's reader of
// untrusted Redis replies. Invariants, beyond "no crash":
// - the same bytes fed in one piece, in chunks whose sizes come from the
//   input, and through bulk_room()/commit() (as the connection reads large
//   values) give the same replies and the same error;
// - every reply re-encoded and read again is the same value;
// - memory follows the bytes: no bulk buffer holds more than the input.
// Small limits, so that the fuzzer reaches them.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "proto/redis_reply.hpp"

using pt2cache::proto::encode_redis_value;
using pt2cache::proto::RedisReplyLimits;
using pt2cache::proto::RedisReplyReader;
using pt2cache::proto::RedisValue;

namespace {

struct Outcome {
    std::vector<RedisValue> replies;
    std::optional<std::string> error;
    bool operator==(const Outcome&) const = default;
};

RedisReplyLimits limits() {
    RedisReplyLimits limits;
    limits.max_bulk = 4096;
    limits.max_line = 256;
    limits.max_depth = 4;
    limits.max_elements = 64;
    return limits;
}

void drain(RedisReplyReader& reader, Outcome& out) {
    while (auto value = reader.next()) {
        out.replies.push_back(std::move(*value));
    }
}

[[noreturn]] void broken(const char* what) {
    std::fprintf(stderr, "invariant broken: %s\n", what);
    std::abort();
}

std::size_t capacity_held(const RedisValue& value) {
    std::size_t held = value.data.capacity();
    for (const auto& element : value.elements) {
        held += capacity_held(element);
    }
    return held;
}

// Runs `step(reader, pos)` (which returns how far it got, or nothing on an
// error) until the input is read, collecting replies.
template <typename Step>
Outcome read_with(std::string_view input, Step step) {
    RedisReplyReader reader(limits());
    Outcome out;
    std::size_t pos = 0;
    while (pos < input.size()) {
        const auto next = step(reader, pos);
        drain(reader, out);
        if (!next) {
            break;
        }
        pos = *next;
    }
    out.error = reader.error();
    return out;
}

using Position = std::optional<std::size_t>;

Outcome whole(std::string_view input) {
    return read_with(input, [&](RedisReplyReader& reader, std::size_t) -> Position {
        return reader.feed(input) ? Position(input.size()) : std::nullopt;
    });
}

// Chunk sizes 1..16 taken from the input's own bytes.
Outcome chunked(std::string_view input) {
    std::size_t i = 0;
    return read_with(input, [&](RedisReplyReader& reader, std::size_t pos) -> Position {
        const auto byte = static_cast<unsigned char>(input[i++ % input.size()]);
        const auto size = std::min<std::size_t>(byte % 16 + 1, input.size() - pos);
        return reader.feed(input.substr(pos, size)) ? Position(pos + size) : std::nullopt;
    });
}

// As the connection reads: bulk bytes straight into the value's buffer.
Outcome direct(std::string_view input) {
    return read_with(input, [&](RedisReplyReader& reader, std::size_t pos) -> Position {
        const auto room = reader.bulk_room(7);
        if (room.empty()) {
            const auto size = std::min<std::size_t>(3, input.size() - pos);
            return reader.feed(input.substr(pos, size)) ? Position(pos + size) : std::nullopt;
        }
        if (room.size() > 7) {
            broken("bulk_room larger than asked");
        }
        const auto n = std::min(room.size(), input.size() - pos);
        std::memcpy(room.data(), input.data() + pos, n);
        reader.commit(n);
        return pos + n;
    });
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view input(reinterpret_cast<const char*>(data), size);
    const Outcome one = whole(input);
    if (chunked(input) != one) {
        broken("chunked feeding differs from one piece");
    }
    if (direct(input) != one) {
        broken("reading bulks through bulk_room differs from feeding");
    }
    for (const auto& reply : one.replies) {
        // Memory follows the bytes: a reply never holds more than twice the
        // input (bulk buffers grow in steps of at most what arrived, from
        // 64 KiB) -- with limits of 4 KiB, never more than the 64 KiB step.
        if (capacity_held(reply) > 2 * size + (64 << 10)) {
            broken("a reply holds more memory than its bytes");
        }
        std::string wire;
        encode_redis_value(reply, wire);
        RedisReplyReader again(limits());
        if (!again.feed(wire)) {
            broken("a re-encoded reply does not parse");
        }
        auto value = again.next();
        if (!value || !(*value == reply) || again.next() || !again.idle()) {
            broken("a re-encoded reply reads back differently");
        }
    }
    return 0;
}
