// SPDX-License-Identifier: MIT
#include "daemon/store/store.hpp"

#include <algorithm>
#include <chrono>

#include "daemon/store/log.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace pt2cache::daemon::store {

Store::Store(Stats& stats, StorePolicy policy, std::unique_ptr<MemoryTier> memory,
             std::unique_ptr<DiskTier> disk, std::unique_ptr<Tier> remote)
    : m_stats(stats)
    , m_policies{std::make_shared<const StorePolicy>(std::move(policy))}
    , m_memory(std::move(memory))
    , m_disk(std::move(disk))
    , m_remote(std::move(remote))
    , m_memory_on(m_memory && m_memory->enabled() ? m_memory.get() : nullptr)
    , m_disk_on(m_disk && m_disk->enabled() ? m_disk.get() : nullptr) {
    m_policy.store(m_policies.back().get(), std::memory_order_release);
}

Store::~Store() = default;

void Store::set_policy(StorePolicy policy) {
    auto fresh = std::make_shared<const StorePolicy>(std::move(policy));
    std::lock_guard lock(m_policies_mutex);
    m_policies.push_back(std::move(fresh));
    m_policy.store(m_policies.back().get(), std::memory_order_release);
}

std::shared_ptr<const StorePolicy> Store::policy() const {
    std::lock_guard lock(m_policies_mutex);
    return m_policies.back();
}

void Store::count_force_disabled_get(std::string_view ns, bool local, bool remote) {
    NamespaceCounters& counters = m_stats.ns(ns);
    if (local && m_memory_on != nullptr) {
        add(counters.tier(TierId::memory).misses);
    }
    if (local && m_disk_on != nullptr) {
        add(counters.tier(TierId::disk).misses);
    }
    if (remote) {
        add(counters.tier(TierId::remote).misses);
    }
}

void Store::count_force_disabled_put(std::string_view ns, bool local, bool remote) {
    NamespaceCounters& counters = m_stats.ns(ns);
    if (local && m_memory_on != nullptr) {
        add(counters.tier(TierId::memory).puts);
    }
    if (local && m_disk_on != nullptr) {
        add(counters.tier(TierId::disk).puts);
    }
    if (remote) {
        add(counters.tier(TierId::remote).puts);
    }
}

bool Store::remote_serves(const StorePolicy& policy, std::string_view ns) const {
    return m_remote &&
           (!policy.remote_namespaces || policy.remote_namespaces->contains(std::string(ns)));
}

std::string Store::remote_flight_key(std::string_view ns, std::string_view key) {
    std::string flight_key;
    flight_key.reserve(ns.size() + 1 + key.size());
    flight_key.append(ns).append(1, '\0').append(key);
    return flight_key;
}

tl::expected<std::optional<Entry>, StoreError> Store::remote_get(const StorePolicy& policy,
                                                                 std::string_view ns,
                                                                 std::string_view key, bool local,
                                                                 TierId* found_locally) {
    const std::string flight_key = remote_flight_key(ns, key);
    const auto wait_deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(policy.remote_wait_ms);
    auto outcome = m_remote_flights.run(flight_key, wait_deadline, [&] {
        // Marked before the local look below: a put answered between that
        // look and the mark would count as before it, and the backfill would
        // write Redis's older value over it (a review: 73 of 147,842 without
        // the memory tier, also after a restart).
        const auto stripe = stripe_of(ns, key);
        const auto mark = quiet_mark(stripe);
        // A DEL deletes from Redis after its local write: while one is under
        // way, what Redis answers is on its way out, and copied back it
        // would outlive the DEL (a review: 5 of 300, also after a restart).
        // One that begins later changes `mark` (its local write).
        const bool no_remote_delete = quiet_remote_deletes(stripe).has_value();
        // Another flight for this key may have ended, its backfill done,
        // between this caller's local lookups and its own flight: the entry
        // is local now, and asking Redis again would break single flight.
        // The backfill reaches memory last: without memory, the disk.
        if (local && m_memory_on != nullptr) {
            if (auto entry = m_memory_on->lookup(ns, key)) {
                if (found_locally != nullptr) {
                    *found_locally = TierId::memory;
                }
                return tl::expected<std::optional<Entry>, StoreError>(std::move(entry));
            }
        } else if (local && m_disk_on != nullptr) {
            auto entry = m_disk_on->get(ns, key);
            if (entry && *entry) {
                if (found_locally != nullptr) {
                    *found_locally = TierId::disk;
                }
                return entry;
            }
            if (!entry && entry.error().failure == Failure::busy) {
                return entry; // not read from Redis instead: asked again
            }
        }
        auto result = m_remote->get(ns, key);
        if (result && *result && local && mark && no_remote_delete &&
            (m_disk_on != nullptr || m_memory_on != nullptr)) {
            if (m_disk_on != nullptr) {
                // Under the stripe's mutex, which a write takes to begin:
                // this disk write is wholly before any later local put's.
                // (An I/O thread does not wait for it: put_quick_many.)
                std::lock_guard lock(m_stripes[stripe]);
                if (unchanged(stripe, *mark)) {
                    if (auto stored = m_disk_on->put(ns, key, **result); !stored) {
                        add(m_stats.tier(ns, TierId::disk).errors);
                        logger().warn("disk refill {}/{:?} failed: {}", ns, key,
                                      stored.error().message);
                    }
                }
            }
            backfill_memory(ns, key, **result, stripe, mark);
            add(m_stats.remote().backfills);
        }
        // After the copies above, which must not keep the charge; the gets
        // sharing this flight share it.
        if (result && *result && m_reads != nullptr &&
            (*result)->value.size() >= SharedReads::k_min_value_size) {
            auto& value = (*result)->value;
            value = m_reads->hold(value.size()).attach(value);
        }
        return result;
    });
    if (!outcome.leader) {
        add(m_stats.remote().coalesced);
    }
    if (!outcome.result) {
        return tl::make_unexpected(
            StoreError{Failure::timeout, fmt::format("waited {} ms for a concurrent remote get",
                                                     policy.remote_wait_ms)});
    }
    return std::move(*outcome.result);
}

std::optional<std::optional<Entry>> Store::get_quick(std::string_view ns, std::string_view key,
                                                     LatencyTier* hit_tier) {
    const StorePolicy* policy = m_policy.load(std::memory_order_acquire);
    if (policy->force_disable || !is_local(*policy, ns)) {
        return std::nullopt;
    }
    if (m_memory_on != nullptr) {
        if (auto entry = m_memory_on->lookup(ns, key)) {
            TierCounters& counters = m_stats.tier(ns, TierId::memory);
            add(counters.hits);
            add(counters.bytes_out, entry->value.size());
            if (hit_tier != nullptr) {
                *hit_tier = LatencyTier::memory;
            }
            return std::optional<Entry>(std::move(entry));
        }
    }
    if (remote_serves(*policy, ns)) {
        return std::nullopt;
    }
    if (m_disk_on != nullptr && !m_disk_on->known_absent(ns, key)) {
        return std::nullopt;
    }
    NamespaceCounters& counters = m_stats.ns(ns);
    if (m_memory_on != nullptr) {
        add(counters.tier(TierId::memory).misses);
    }
    if (m_disk_on != nullptr) {
        add(counters.tier(TierId::disk).misses);
    }
    return std::optional<Entry>();
}

tl::expected<std::optional<Entry>, StoreError> Store::get(std::string_view ns, std::string_view key,
                                                          LatencyTier* hit_tier) {
    const StorePolicy* policy = m_policy.load(std::memory_order_acquire);
    const bool local = is_local(*policy, ns);
    const bool remote = remote_serves(*policy, ns);
    if (policy->force_disable) {
        count_force_disabled_get(ns, local, remote);
        return std::nullopt;
    }
    NamespaceCounters& counters = m_stats.ns(ns);
    bool answered = false; // some tier gave a clean answer
    std::optional<StoreError> last_error;

    const auto hit = [&](TierId tier, const Entry& entry) {
        add(counters.tier(tier).hits);
        add(counters.tier(tier).bytes_out, entry.value.size());
        if (hit_tier != nullptr) {
            *hit_tier = latency_tier(tier);
        }
    };

    if (local && m_memory_on != nullptr) {
        if (auto entry = m_memory_on->lookup(ns, key)) {
            hit(TierId::memory, *entry);
            return entry;
        }
        answered = true;
    }
    if (local && m_disk_on != nullptr) {
        const auto stripe = stripe_of(ns, key);
        const auto mark = quiet_mark(stripe);
        auto result = m_disk_on->get(ns, key);
        if (!result && result.error().failure == Failure::busy) {
            // Not counted: the caller asks again (fetch), and counts the
            // request if it gives up.
            return result;
        }
        if (m_memory_on != nullptr) {
            add(counters.tier(TierId::memory).misses);
        }
        if (result && *result) {
            hit(TierId::disk, **result);
            // Memory keeps the value, not the read budget's charge on it.
            Entry kept = **result;
            kept.value = kept.value.without_charge();
            backfill_memory(ns, key, kept, stripe, mark);
            return std::move(*result);
        }
        add(counters.tier(TierId::disk).misses);
        if (result) {
            answered = true;
        } else {
            add(counters.tier(TierId::disk).errors);
            logger().warn("disk get {}/{:?} failed: {}", ns, key, result.error().message);
            last_error = std::move(result.error());
        }
    } else if (local && m_memory_on != nullptr) {
        add(counters.tier(TierId::memory).misses);
    }
    if (remote) {
        auto found_locally = TierId::remote;
        auto result = remote_get(*policy, ns, key, local, &found_locally);
        if (!result && result.error().failure == Failure::busy) {
            return result; // as the disk's above
        }
        if (result && *result) {
            // Found locally after all (a concurrent get's backfill): a
            // memory or disk hit, after the miss counted above.
            hit(found_locally, **result);
            return std::move(*result);
        }
        if (result) {
            add(counters.tier(TierId::remote).misses);
            answered = true;
        } else if (result.error().failure != Failure::unavailable) {
            add(counters.tier(TierId::remote).misses);
            add(counters.tier(TierId::remote).errors);
            if (const auto left_out = m_remote_get_log.take()) {
                logger().warn("{} get {}/{:?} failed: {}{}", m_remote->name(), ns, key,
                              result.error().message, left_out_note(*left_out));
            }
            last_error = std::move(result.error());
        }
    }
    if (!answered && last_error) {
        return tl::make_unexpected(std::move(*last_error));
    }
    return std::nullopt;
}

tl::expected<bool, StoreError> Store::exists(std::string_view ns, std::string_view key) {
    const StorePolicy* policy = m_policy.load(std::memory_order_acquire);
    if (policy->force_disable) {
        return false;
    }
    std::optional<StoreError> error;
    if (is_local(*policy, ns)) {
        if (m_memory_on != nullptr && m_memory_on->contains(ns, key)) {
            return true;
        }
        if (m_disk_on != nullptr) {
            auto found = m_disk_on->exists(ns, key);
            if (found && *found) {
                return true;
            }
            if (!found) {
                add(m_stats.tier(ns, TierId::disk).errors);
                error = std::move(found.error());
            }
        }
    }
    if (remote_serves(*policy, ns)) {
        auto found = remote_get(*policy, ns, key, is_local(*policy, ns));
        if (found) {
            return found->has_value();
        }
        if (found.error().failure != Failure::unavailable) {
            add(m_stats.tier(ns, TierId::remote).errors);
            error = std::move(found.error());
        }
    }
    if (error) {
        return tl::make_unexpected(std::move(*error));
    }
    return false;
}

tl::expected<bool, StoreError> Store::remove(std::string_view ns, std::string_view key) {
    bool removed = false;
    std::optional<StoreError> error;
    const auto take = [&](tl::expected<bool, StoreError> result) {
        if (result) {
            removed = removed || *result;
        } else if (!error) {
            error = std::move(result.error());
        }
    };
    const StorePolicy* policy = m_policy.load(std::memory_order_acquire);
    const bool remote = remote_serves(*policy, ns) && !policy->remote_read_only;
    const std::size_t stripe = stripe_of(ns, key);
    {
        const WriteScope write(*this, stripe);
        // Counted under the key's lock, before Redis is asked: a SET XX or
        // KEEPTTL that takes the lock after this local delete knows Redis's
        // copy is going too (Store::put).
        if (remote) {
            m_writes[stripe].remote_deletes_begun.fetch_add(1);
        }
        if (m_memory_on != nullptr) {
            take(m_memory_on->remove(ns, key));
        }
        if (m_disk_on != nullptr) {
            take(m_disk_on->remove(ns, key));
        }
    }
    if (remote) {
        auto result = m_remote->remove(ns, key);
        m_writes[stripe].remote_deletes_ended.fetch_add(1);
        // A get in progress may have read Redis's copy before this delete: a
        // get that begins after the DEL is answered must not wait for it
        // and serve that copy (a review: 10 of 10 with 64 MiB values).
        m_remote_flights.detach(remote_flight_key(ns, key));
        // A suspended remote keeps its copy: the delete is answered locally.
        if (result || result.error().failure != Failure::unavailable) {
            take(std::move(result));
        }
    }
    if (error) {
        return tl::make_unexpected(std::move(*error));
    }
    return removed;
}

tl::expected<ListPage, StoreError> Store::list(std::string_view ns, std::string_view cursor,
                                               std::size_t limit) {
    if (m_disk_on != nullptr) {
        return m_disk_on->list(ns, cursor, limit);
    }
    if (m_memory_on != nullptr) {
        return m_memory_on->list(ns, cursor, limit);
    }
    return ListPage{};
}

std::size_t Store::entry_count() const {
    if (m_disk) {
        return m_disk->entry_count();
    }
    return m_memory ? m_memory->count() : 0;
}

nlohmann::json Store::tier_summary() const {
    nlohmann::json out = nlohmann::json::object();
    out["memory"] = nullptr;
    out["disk"] = nullptr;
    out["remote"] = nullptr;
    if (m_memory) {
        out["memory"] = {
            {"bytes", m_memory->size_bytes()},
            {"count", m_memory->count()},
            {"capacity", m_memory->capacity()},
        };
    }
    if (m_disk) {
        out["disk"] = {
            {"bytes", m_disk->size_bytes()},
            {"count", m_disk->count()},
            {"capacity", m_disk->capacity()},
            {"scan_complete", m_disk->scan_complete()},
            {"write_mode", m_disk->options().write_mode == DiskWriteMode::async ? "async" : "sync"},
        };
        if (m_disk->small_store() != nullptr) {
            // Times in ms; p50, p99 and max to within the histogram's 12.5 %.
            const auto writes = m_stats.daemon().small_store_writes.snapshot();
            out["disk"]["small_store_writes"] = {
                {"count", writes.count()},
                {"sum_ms", static_cast<double>(writes.sum_ns) / 1e6},
                {"p50_ms", writes.quantile_ns(0.5) / 1e6},
                {"p99_ms", writes.quantile_ns(0.99) / 1e6},
                {"max_ms", writes.quantile_ns(1.0) / 1e6},
            };
        }
        if (m_disk->async_writes()) {
            const std::chrono::duration<double> age = m_disk->oldest_queued_age();
            out["disk"]["write_queue"] = {
                {"entries", m_disk->queued_writes()},
                {"bytes", m_disk->queued_bytes()},
                {"capacity", m_disk->options().write_queue_bytes},
                {"oldest_age_s", age.count()},
            };
        }
    }
    if (m_remote) {
        out["remote"] = {{"name", m_remote->name()}};
    }
    return out;
}

} // namespace pt2cache::daemon::store
