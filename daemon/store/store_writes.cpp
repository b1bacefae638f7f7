// SPDX-License-Identifier: MIT
//
// Store's write counts (store.hpp, Store::WriteCounts): what keeps a
// backfill from bringing back a value a later put replaced or a delete
// removed.
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
    if (!m_remote) {
        // No remote hit is copied to disk: nothing to wait for.
        m_writes[stripe].begun.fetch_add(1);
        return;
    }
    std::lock_guard lock(m_stripes[stripe]);
    m_writes[stripe].begun.fetch_add(1);
}

bool Store::try_begin_write(std::size_t stripe) {
    if (!m_remote) {
        m_writes[stripe].begun.fetch_add(1);
        return true;
    }
    std::unique_lock lock(m_stripes[stripe], std::try_to_lock);
    if (!lock) {
        return false;
    }
    m_writes[stripe].begun.fetch_add(1);
    return true;
}

void Store::end_write(std::size_t stripe) {
    m_writes[stripe].ended.fetch_add(1);
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
