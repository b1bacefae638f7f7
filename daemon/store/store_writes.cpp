// SPDX-License-Identifier: MIT
//
// Store's write counts (store.hpp, Store::WriteCounts): what keeps a
// backfill from bringing back a value a later put replaced or a delete
// removed; and the stripes' mutexes, which every local write of a key holds
// from its first tier to its last, so that the tiers end in the same state.
#include "daemon/store/disk/disk_tier.hpp"
#include "daemon/store/memory/memory_tier.hpp"
#include "daemon/store/store.hpp"
#include "daemon/store/xxh3.hpp"

namespace pt2cache::daemon::store {

namespace {

std::size_t stripe_index(std::string_view ns, std::string_view key, std::size_t count) {
    // Two one-shot hashes: every put computes this, and a streaming state
    // costs several times as much for keys this short.
    const auto bytes = [](std::string_view text) {
        return std::as_bytes(std::span(text.data(), text.size()));
    };
    const std::uint64_t hash =
        Xxh3Hash64::of(bytes(key)) ^ (Xxh3Hash64::of(bytes(ns)) * 0x9E3779B97F4A7C15ULL);
    return static_cast<std::size_t>(hash % count);
}

} // namespace

std::size_t Store::stripe_of(std::string_view ns, std::string_view key) {
    return stripe_index(ns, key, k_stripe_count);
}

void Store::begin_write(std::size_t stripe) {
    m_stripes[stripe].lock();
    m_writes[stripe].begun.fetch_add(1);
}

bool Store::try_begin_write(std::size_t stripe) {
    if (!m_stripes[stripe].try_lock()) {
        return false;
    }
    m_writes[stripe].begun.fetch_add(1);
    return true;
}

void Store::end_write(std::size_t stripe) {
    m_writes[stripe].ended.fetch_add(1);
    m_stripes[stripe].unlock();
}

std::optional<std::uint64_t> Store::quiet_mark(std::size_t stripe) const {
    // Begun first: a write that begins and ends between the two loads makes
    // them differ, as one under way does.
    const auto begun = m_writes[stripe].begun.load();
    const auto ended = m_writes[stripe].ended.load();
    return begun == ended ? std::optional(begun) : std::nullopt;
}

bool Store::unchanged(std::size_t stripe, std::uint64_t mark) const {
    return m_writes[stripe].begun.load() == mark;
}

bool Store::only_write_since(std::size_t stripe, std::uint64_t mark) const {
    return m_writes[stripe].begun.load() == mark + 1;
}

std::optional<std::uint64_t> Store::quiet_remote_deletes(std::size_t stripe) const {
    const auto begun = m_writes[stripe].remote_deletes_begun.load();
    const auto ended = m_writes[stripe].remote_deletes_ended.load();
    return begun == ended ? std::optional(begun) : std::nullopt;
}

bool Store::remote_delete_under_way(std::size_t stripe) const {
    return m_writes[stripe].remote_deletes_begun.load() !=
           m_writes[stripe].remote_deletes_ended.load();
}

void Store::backfill_memory(std::string_view ns, std::string_view key, const Entry& entry,
                            std::size_t stripe, std::optional<std::uint64_t> mark) {
    if (m_memory_on == nullptr || !mark) {
        return;
    }
    // Checked under the memory tier's lock: a write that begins after the
    // check puts its own value in memory after this one.
    m_memory_on->put_if(ns, key, entry, [&] { return unchanged(stripe, *mark); });
}

tl::expected<void, StoreError> Store::put_memory(std::string_view ns, std::string_view key,
                                                 const Entry& entry) {
    if (m_memory_on == nullptr) {
        return {};
    }
    const WriteScope write(*this, stripe_of(ns, key));
    return m_memory_on->put(ns, key, entry);
}

tl::expected<bool, StoreError> Store::put_disk_behind(std::string_view ns, std::string_view key,
                                                      const Entry& entry) {
    if (m_disk_on == nullptr || m_memory_on == nullptr) {
        return false;
    }
    const WriteScope write(*this, stripe_of(ns, key));
    // Memory still holds this very value only if no write of the key came
    // after put_memory (an overwrite replaces it, a delete removes it); an
    // eviction loses the disk copy too, which only costs a miss.
    const auto current = m_memory_on->peek(ns, key);
    if (!current || current->value.bytes().data() != entry.value.bytes().data()) {
        return false;
    }
    NamespaceCounters& counters = m_stats.ns(ns);
    if (auto stored = m_disk_on->put(ns, key, entry); !stored) {
        counters.tier(TierId::disk).errors.fetch_add(1, std::memory_order_relaxed);
        return tl::make_unexpected(std::move(stored.error()));
    }
    counters.tier(TierId::disk).puts.fetch_add(1, std::memory_order_relaxed);
    counters.tier(TierId::disk).bytes_in.fetch_add(entry.value.size(), std::memory_order_relaxed);
    return true;
}

tl::expected<std::uint64_t, StoreError> Store::clear(std::string_view ns) {
    // Every key of `ns` may be written: every stripe.
    std::vector<std::unique_ptr<WriteScope>> writes;
    for (std::size_t stripe = 0; stripe < k_stripe_count; ++stripe) {
        writes.push_back(std::make_unique<WriteScope>(*this, stripe));
    }
    std::uint64_t removed = 0;
    if (m_memory_on != nullptr) {
        removed = m_memory_on->clear(ns).value_or(0);
    }
    if (m_disk_on != nullptr) {
        auto from_disk = m_disk_on->clear(ns);
        if (!from_disk) {
            return from_disk;
        }
        removed = std::max(removed, *from_disk);
    }
    return removed;
}

} // namespace pt2cache::daemon::store
