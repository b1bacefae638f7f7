// SPDX-License-Identifier: MIT
// Deletes under way in the disk tier (DEL of a key, CLEAR of a namespace).
// A delete first drops the key's queued write, then deletes the copies on
// disk, which can be several acknowledged writes older than the one dropped:
// until they are gone, a lookup that finds no queued write must answer a
// miss rather than read them.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "daemon/store/xxh3.hpp"

#include <absl/container/flat_hash_map.h>

namespace pt2cache::daemon::store {

class DeletesUnderWay {
public:
    // Marks one delete, of a key or of a namespace, for its lifetime.
    class [[nodiscard]] Scope {
    public:
        Scope(const Scope&) = delete;
        Scope& operator=(const Scope&) = delete;
        ~Scope() { m_owner.end(m_id, m_ns); }

    private:
        friend class DeletesUnderWay;
        Scope(DeletesUnderWay& owner, std::optional<Hash128> id, std::string ns)
            : m_owner(owner)
            , m_id(id)
            , m_ns(std::move(ns)) {
            m_owner.begin(m_id, m_ns);
        }
        DeletesUnderWay& m_owner;
        std::optional<Hash128> m_id; // else the namespace m_ns
        std::string m_ns;
    };

    Scope key(const Hash128& id) { return Scope(*this, id, {}); }
    Scope ns(std::string_view ns) { return Scope(*this, std::nullopt, std::string(ns)); }

    // Whether a delete of (ns, id) is under way. Ask it after the write
    // queue: a delete marks before it drops the queued write, so a lookup
    // that found none because it was dropped sees the mark.
    bool hides(std::string_view ns, const Hash128& id) const {
        if (m_active.load() == 0) {
            return false;
        }
        std::lock_guard lock(m_mutex);
        return m_keys.contains(id) || std::ranges::any_of(m_namespaces, [&](const auto& held) {
                   return held.first == ns;
               });
    }

    bool any() const { return m_active.load() != 0; }

private:
    void begin(const std::optional<Hash128>& id, const std::string& ns) {
        std::lock_guard lock(m_mutex);
        if (id) {
            ++m_keys[*id];
        } else if (const auto held = find_namespace(ns); held != m_namespaces.end()) {
            ++held->second;
        } else {
            m_namespaces.emplace_back(ns, 1);
        }
        m_active.fetch_add(1);
    }

    void end(const std::optional<Hash128>& id, const std::string& ns) {
        std::lock_guard lock(m_mutex);
        if (id) {
            const auto it = m_keys.find(*id);
            if (--it->second == 0) {
                m_keys.erase(it);
            }
        } else if (const auto held = find_namespace(ns); --held->second == 0) {
            m_namespaces.erase(held);
        }
        m_active.fetch_sub(1);
    }

    std::vector<std::pair<std::string, int>>::iterator find_namespace(std::string_view ns) {
        return std::ranges::find_if(m_namespaces,
                                    [&](const auto& held) { return held.first == ns; });
    }

    mutable std::mutex m_mutex;
    absl::flat_hash_map<Hash128, int, Hash128Low> m_keys;
    std::vector<std::pair<std::string, int>> m_namespaces; // a few CLEARs at most
    std::atomic<std::size_t> m_active{0}; // marks held: 0 lets lookups skip the lock
};

} // namespace pt2cache::daemon::store
