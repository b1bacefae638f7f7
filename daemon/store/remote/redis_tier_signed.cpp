// SPDX-License-Identifier: MIT
// RedisTier's signed entries (docs/remote.md, "Signed entries"): the value
// and its companion `pt2sig:{key}` are written in one exchange and read with
// one MGET; a value without a valid signature is a miss, never served (so
// never backfilled into the local tiers).
#include <algorithm>

#include "daemon/store/remote/redis_tier.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace pt2cache::daemon::store {

namespace {

void add(std::atomic<std::uint64_t>& counter) {
    counter.fetch_add(1, std::memory_order_relaxed);
}

bool string_or_nil(const RedisReply& reply) {
    return reply.type == RedisReply::Type::string || reply.type == RedisReply::Type::nil;
}

} // namespace

void RedisTier::add_signature(std::vector<RedisCommand>& commands,
                              std::array<std::string, 2>& companion) const {
    // commands.front() is SET key value [EX|PX n]: the companion gets the
    // same TTL, so that it expires with its value.
    RedisCommand command = commands.front();
    const auto key = command.args[1];
    const auto value = command.args[2];
    companion[0] = signature_key(key);
    companion[1] = m_options.signer->sign(key, value);
    command.args[1] = companion[0];
    command.args[2] = companion[1];
    // After the value: a reader between the two sees a value whose signature
    // is missing or old (a miss), never a signature that vouches for nothing.
    commands.push_back(std::move(command));
}

tl::expected<std::optional<Entry>, StoreError> RedisTier::get_signed(const std::string& redis_key) {
    const auto companion = signature_key(redis_key);
    // One round trip for both; in a cluster, routed by the value's key (the
    // companion's hash tag puts it in the same slot). A key with a '}' of its
    // own may have its companion elsewhere: two GETs, each routed by its key,
    // assembled as the MGET's reply.
    const bool split = companion_elsewhere(redis_key);
    // The value's TTL comes along (RedisTier::get).
    const RedisCommand both[2] = {{{"MGET", redis_key, companion}, {RedisReply::Type::array}},
                                  {{"PTTL", redis_key}, {RedisReply::Type::integer}}};
    const RedisCommand gets[3] = {
        {{"GET", redis_key}, {RedisReply::Type::string, RedisReply::Type::nil}},
        {{"PTTL", redis_key}, {RedisReply::Type::integer}},
        {{"GET", companion}, {RedisReply::Type::string, RedisReply::Type::nil}}};
    auto replies =
        run_keyed(redis_key, std::span(split ? &gets[0] : &both[0], 2), Route::read, &m_abandon);
    if (replies && split) {
        auto second = run_keyed(companion, std::span(&gets[2], 1), Route::read, &m_abandon);
        if (!second) {
            replies = tl::make_unexpected(std::move(second.error()));
        } else {
            auto both = std::make_unique<RedisReply>();
            both->type = RedisReply::Type::array;
            both->elements.push_back(std::move(replies->front()));
            both->elements.push_back(std::move(second->front()));
            replies->front() = std::move(both);
        }
    }
    if (!replies) {
        const auto kind = replies.error().kind;
        if (kind == RedisErrorKind::suspended) {
            add(m_counters.skipped);
        }
        const bool timeout = kind == RedisErrorKind::timeout || kind == RedisErrorKind::exhausted;
        return tl::make_unexpected(StoreError{kind == RedisErrorKind::suspended
                                                  ? Failure::unavailable
                                              : timeout ? Failure::timeout
                                                        : Failure::io,
                                              replies.error().message});
    }
    const RedisReply& reply = *replies->front();
    if (reply.type != RedisReply::Type::array || reply.elements.size() != 2 ||
        !std::all_of(reply.elements.begin(), reply.elements.end(),
                     [](const auto& element) { return string_or_nil(*element); })) {
        add(m_counters.errors);
        return tl::make_unexpected(StoreError{
            Failure::io,
            fmt::format("MGET {:?}: Redis answered {}", redis_key,
                        reply.type == RedisReply::Type::error
                            ? fmt::format("{:?}", reply.text())
                            : fmt::format("{} of {} elements", proto::redis_type_name(reply.type),
                                          reply.elements.size()))});
    }
    const RedisReply& value = *reply.elements[0];
    const RedisReply& signature = *reply.elements[1];
    if (value.type == RedisReply::Type::nil) {
        add(m_counters.misses);
        return std::nullopt;
    }
    const bool unsigned_value = signature.type == RedisReply::Type::nil;
    if (unsigned_value || !m_options.signer->verify(redis_key, value.text(), signature.text())) {
        add(unsigned_value ? m_counters.rejected_unsigned : m_counters.rejected_bad_signature);
        if (const auto suppressed = m_rejection_log.take()) {
            remote_logger().warn(
                "Redis entry {:?} ({} bytes) rejected: {}; answered as a miss{}", redis_key,
                value.data.size(), unsigned_value ? "no signature" : "bad signature",
                *suppressed == 0 ? std::string()
                                 : fmt::format(" ({} more rejections not logged)", *suppressed));
        }
        return std::nullopt;
    }
    Entry entry;
    entry.value = value.data;
    entry.created_ms = now_ms();
    auto live = with_ttl(entry, *(*replies)[1], redis_key);
    if (!live) {
        return tl::make_unexpected(std::move(live.error()));
    }
    if (!*live) {
        add(m_counters.misses);
        return std::nullopt;
    }
    add(m_counters.hits);
    return entry;
}

} // namespace pt2cache::daemon::store
