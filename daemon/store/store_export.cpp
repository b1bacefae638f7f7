// SPDX-License-Identifier: MIT
// Store's side of export and import: SCAN, DUMP and RESTORE
// (docs/protocol.md, "Export and import").
#include <mutex>

#include "daemon/store/log.hpp"
#include "daemon/store/store.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace pt2cache::daemon::store {

tl::expected<ScanPage, StoreError> Store::scan(std::string_view cursor, std::size_t limit,
                                               UnixMs since_ms,
                                               const std::vector<std::string>& namespaces) {
    if (m_disk_on == nullptr) {
        return ScanPage{};
    }
    return m_disk_on->scan_entries(cursor, limit, since_ms, namespaces);
}

tl::expected<std::optional<Entry>, StoreError> Store::dump(std::string_view ns,
                                                           std::string_view key) {
    if (m_disk_on != nullptr) {
        return m_disk_on->peek(ns, key);
    }
    if (m_memory_on != nullptr) {
        return m_memory_on->peek(ns, key);
    }
    return std::nullopt;
}

tl::expected<PutOutcome, StoreError> Store::restore(std::string_view ns, std::string_view key,
                                                    Entry entry, bool replace) {
    const StorePolicy* policy = m_policy.load(std::memory_order_acquire);
    if (auto refused = check_value_size(*policy, entry); !refused) {
        return tl::make_unexpected(std::move(refused.error()));
    }
    const UnixMs now = now_ms();
    if (entry.created_ms == 0) {
        entry.created_ms = now;
    }
    const bool local = !policy->locally_disabled.contains(std::string(ns)) &&
                       (m_memory_on != nullptr || m_disk_on != nullptr);
    if (policy->force_disable || !local || entry.expired(now)) {
        return PutOutcome::not_stored;
    }
    const WriteScope write(*this, stripe_of(ns, key)); // the check and the write, atomic
    if (!replace) {
        // The disk tier holds every local entry; the memory tier only
        // without one.
        auto existing =
            m_disk_on != nullptr ? m_disk_on->peek(ns, key) : m_memory_on->peek(ns, key);
        if (!existing) {
            return tl::make_unexpected(std::move(existing.error()));
        }
        if (*existing && (*existing)->created_ms >= entry.created_ms) {
            return PutOutcome::not_stored;
        }
    }
    if (auto stored = put_local(ns, key, entry); !stored) {
        return tl::make_unexpected(std::move(stored.error()));
    }
    return PutOutcome::stored;
}

} // namespace pt2cache::daemon::store
