// SPDX-License-Identifier: MIT
//
// Store's puts: the general one (conditional ones decided under the key's
// write lock), the I/O threads' quick ones, and Redis's write-behind.
#include <bitset>

#include "daemon/store/log.hpp"
#include "daemon/store/store.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace pt2cache::daemon::store {

tl::expected<void, StoreError> Store::put_local(std::string_view ns, std::string_view key,
                                                const Entry& entry) {
    NamespaceCounters& counters = m_stats.ns(ns);
    if (m_memory_on != nullptr) {
        m_memory_on->put(ns, key, entry);
        add(counters.tier(TierId::memory).puts);
        add(counters.tier(TierId::memory).bytes_in, entry.value.size());
    }
    if (m_disk_on != nullptr) {
        auto stored = m_disk_on->put(ns, key, entry);
        if (!stored) {
            add(counters.tier(TierId::disk).errors);
            logger().warn("disk put {}/{:?} failed: {}", ns, key, stored.error().message);
            return stored;
        }
        add(counters.tier(TierId::disk).puts);
        add(counters.tier(TierId::disk).bytes_in, entry.value.size());
    }
    return {};
}

tl::expected<void, StoreError> Store::check_value_size(const StorePolicy& policy,
                                                       const Entry& entry) {
    if (entry.value.size() > policy.max_value_size) {
        return tl::make_unexpected(StoreError{
            Failure::too_large, fmt::format("value of {} bytes exceeds the limit of {} bytes",
                                            entry.value.size(), policy.max_value_size)});
    }
    return {};
}

tl::expected<PutOutcome, StoreError> Store::put(std::string_view ns, std::string_view key,
                                                Entry entry, PutMode mode, PutExpiry expiry) {
    const StorePolicy* policy = m_policy.load(std::memory_order_acquire);
    if (auto refused = check_value_size(*policy, entry); !refused) {
        return tl::make_unexpected(std::move(refused.error()));
    }
    const bool remote = remote_serves(*policy, ns) && !policy->remote_read_only;
    if (policy->force_disable) {
        count_force_disabled_put(ns, is_local(*policy, ns), remote);
        return PutOutcome::stored;
    }
    if (entry.created_ms == 0) {
        entry.created_ms = now_ms();
    }
    const bool local = is_local(*policy, ns) && (m_memory_on != nullptr || m_disk_on != nullptr);
    const bool conditional = mode == PutMode::only_if_present || expiry == PutExpiry::keep_stored;
    const bool keep = expiry == PutExpiry::keep_stored;
    const std::size_t stripe = stripe_of(ns, key);
    std::optional<WriteScope> write;
    // Redis is asked before the key's lock is taken (its round trip must not
    // hold up the stripe's other puts), and only when the local tiers hold
    // nothing. Its answer stands only if no other write or delete of the
    // stripe began between the question and the lock, and no delete from
    // Redis was under way (a remove deletes from Redis after its local
    // write): a DEL that ran meanwhile made it stale (reviews: the XX's value
    // outlived the DEL). Otherwise it is asked again, and on the last try
    // under the lock, where a delete from Redis still under way means the
    // key is going: absent. (The stripe's: another key's delete counts too,
    // and the XX then stores nothing, as a cache may always decline.)
    constexpr int k_tries = 3;
    for (int tries = 1; conditional; ++tries) {
        const bool last = tries == k_tries;
        std::optional<tl::expected<std::optional<UnixMs>, StoreError>> from_remote;
        std::optional<std::uint64_t> mark;
        std::optional<std::uint64_t> remote_mark;
        if (remote_serves(*policy, ns) && !last) {
            bool held_locally = false;
            if (local) {
                const auto held = local_expiry(ns, key, false);
                held_locally = held && held->has_value();
            }
            if (!held_locally) {
                mark = quiet_mark(stripe);
                remote_mark = quiet_remote_deletes(stripe);
                from_remote = remote_expiry(ns, key);
            }
        }
        // Also for a namespace only Redis keeps: a DEL of it takes the same
        // lock, and the put is queued for Redis under it (a review: XX and
        // DEL of a remote-only key, both answered, left the XX's value).
        write.emplace(*this, stripe);
        // The expiry time of the entry replaced (0: none); nullopt: none.
        tl::expected<std::optional<UnixMs>, StoreError> current = std::nullopt;
        if (local) {
            current = local_expiry(ns, key, keep);
        }
        if (current && !*current && remote_serves(*policy, ns)) {
            const bool fresh = from_remote && mark && only_write_since(stripe, *mark) &&
                               remote_mark && quiet_remote_deletes(stripe) == remote_mark;
            if (fresh) {
                current = std::move(*from_remote);
            } else if (last && remote_delete_under_way(stripe)) {
                // Looked before Redis is asked: under the lock no delete can
                // begin, and one that ends during the question would leave
                // its answer stale (a review: 4 of 981).
                current = std::nullopt;
            } else if (last) {
                current = remote_expiry(ns, key);
            } else {
                write.reset();
                continue;
            }
        }
        if (!current) {
            return tl::make_unexpected(std::move(current.error()));
        }
        if (mode == PutMode::only_if_present && !*current) {
            return PutOutcome::not_stored;
        }
        if (keep) {
            entry.expires_ms = current->value_or(0);
        }
        break;
    }
    if (local && !write) {
        write.emplace(*this, stripe);
    }
    tl::expected<void, StoreError> local_result;
    if (local) {
        if (mode == PutMode::only_if_absent) {
            if (m_memory_on != nullptr && m_memory_on->contains(ns, key)) {
                return PutOutcome::not_stored;
            }
            if (m_disk_on != nullptr) {
                const auto exists = m_disk_on->exists(ns, key);
                if (exists && *exists) {
                    return PutOutcome::not_stored;
                }
                if (!exists) {
                    add(m_stats.tier(ns, TierId::disk).errors);
                    logger().warn("disk exists {}/{:?} failed: {}", ns, key,
                                  exists.error().message);
                }
            }
        }
        local_result = put_local(ns, key, entry);
        // Queued for Redis (the write-behind queue: no round trip) before
        // the key's lock is let go: a DEL that follows finds the write in
        // the queue and drops it. Queued after, it landed in Redis after
        // the DEL's delete there, and the deleted value came back (a
        // re-review, racing SET XX and DEL).
        if (remote) {
            (void)put_remote(ns, key, entry);
        }
        write.reset();
    } else if (remote) {
        // Under the key's lock when conditional (see above).
        auto stored = put_remote(ns, key, entry);
        write.reset();
        if (!stored) {
            return tl::make_unexpected(std::move(stored.error()));
        }
    }
    if (!local_result) {
        return tl::make_unexpected(std::move(local_result.error()));
    }
    return PutOutcome::stored;
}

tl::expected<std::optional<UnixMs>, StoreError>
Store::local_expiry(std::string_view ns, std::string_view key, bool exact) {
    if (m_memory_on != nullptr) {
        if (auto entry = m_memory_on->lookup(ns, key)) {
            return entry->expires_ms;
        }
    }
    if (m_disk_on == nullptr) {
        return std::nullopt;
    }
    if (!exact) {
        // Presence only: the entry's header, not its value.
        auto found = m_disk_on->exists(ns, key);
        if (!found) {
            return tl::make_unexpected(std::move(found.error()));
        }
        return *found ? std::optional<UnixMs>(0) : std::nullopt;
    }
    auto entry = m_disk_on->peek(ns, key);
    if (!entry) {
        return tl::make_unexpected(std::move(entry.error()));
    }
    return *entry ? std::optional<UnixMs>((*entry)->expires_ms) : std::nullopt;
}

tl::expected<std::optional<UnixMs>, StoreError> Store::remote_expiry(std::string_view ns,
                                                                     std::string_view key) {
    auto entry = m_remote->get(ns, key);
    if (!entry) {
        if (entry.error().failure == Failure::unavailable) {
            return std::nullopt;
        }
        return tl::make_unexpected(std::move(entry.error()));
    }
    return *entry ? std::optional<UnixMs>((*entry)->expires_ms) : std::nullopt;
}

std::optional<tl::expected<PutOutcome, StoreError>>
Store::put_quick(std::string_view ns, std::string_view key, const Entry& entry, PutMode mode) {
    if (mode != PutMode::overwrite) {
        return std::nullopt;
    }
    const QuickPut put{ns, key, entry};
    if (put_quick_many(std::span(&put, 1)) == 0) {
        return std::nullopt;
    }
    return PutOutcome::stored;
}

std::size_t Store::put_quick_many(std::span<const QuickPut> puts) {
    const StorePolicy* policy = m_policy.load(std::memory_order_acquire);
    if (policy->force_disable || (m_memory_on == nullptr && m_disk_on == nullptr)) {
        return 0;
    }
    std::size_t count = 0;
    while (count < puts.size() && puts[count].entry.created_ms != 0 &&
           puts[count].entry.value.size() <= policy->max_value_size &&
           is_local(*policy, puts[count].ns)) {
        ++count;
    }
    if (m_disk_on != nullptr && !m_disk_on->async_writes()) {
        return 0; // the disk writes in the caller's thread: not here
    }
    // Each stripe once (its mutex is not recursive), only tried: a stripe
    // another write holds leaves the rest of the run to the worker path.
    thread_local std::vector<std::size_t> stripes; // kept: no allocation per pipeline
    stripes.clear();
    std::bitset<k_stripe_count> held;
    std::size_t taken = 0;
    for (const QuickPut& put : puts.first(count)) {
        const auto stripe = stripe_of(put.ns, put.key);
        if (!held[stripe]) {
            if (!try_begin_write(stripe)) {
                break;
            }
            held[stripe] = true;
            stripes.push_back(stripe);
        }
        ++taken;
    }
    count = taken;
    if (m_disk_on != nullptr) {
        // First, so that a full write queue leaves the rest undone.
        count = m_disk_on->try_put_many(puts.first(count));
    }
    puts = puts.first(count);
    if (m_memory_on != nullptr) {
        m_memory_on->put_many(puts);
    }
    for (const QuickPut& put : puts) {
        if (remote_serves(*policy, put.ns) && !policy->remote_read_only) {
            // Queued before the stripes are let go, as put() does.
            (void)put_remote(put.ns, put.key, put.entry);
        }
    }
    for (const auto stripe : stripes) {
        end_write(stripe);
    }
    for (const QuickPut& put : puts) {
        NamespaceCounters& counters = m_stats.ns(put.ns);
        const std::uint64_t size = put.entry.value.size();
        if (m_disk_on != nullptr) {
            add(counters.tier(TierId::disk).puts);
            add(counters.tier(TierId::disk).bytes_in, size);
        }
        if (m_memory_on != nullptr) {
            add(counters.tier(TierId::memory).puts);
            add(counters.tier(TierId::memory).bytes_in, size);
        }
    }
    return count;
}

tl::expected<void, StoreError> Store::put_remote(std::string_view ns, std::string_view key,
                                                 const Entry& entry) {
    TierCounters& counters = m_stats.tier(ns, TierId::remote);
    auto stored = m_remote->put(ns, key, entry);
    if (stored) {
        add(counters.puts);
        add(counters.bytes_in, entry.value.size());
    } else if (stored.error().failure != Failure::unavailable) {
        add(counters.errors);
        if (const auto left_out = m_remote_put_log.take()) {
            logger().warn("{} put {}/{:?} failed: {}{}", m_remote->name(), ns, key,
                          stored.error().message, left_out_note(*left_out));
        }
    }
    return stored;
}

} // namespace pt2cache::daemon::store
