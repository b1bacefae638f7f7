// SPDX-License-Identifier: MIT
#include "daemon/bundles.hpp"

#include <limits>

#include "daemon/log.hpp"
#include "proto/autotune.hpp"
#include "proto/python_json.hpp"

#include <nlohmann/json.hpp>

namespace pt2cache::daemon {

namespace autotune = proto::autotune;
using Json = nlohmann::ordered_json;

BundleRegistry::BundleRegistry(std::chrono::seconds idle_timeout)
    : m_idle_timeout(idle_timeout)
    , m_random(std::random_device{}()) {}

void BundleRegistry::set_idle_timeout(std::chrono::seconds idle_timeout) {
    std::lock_guard lock(m_mutex);
    m_idle_timeout = idle_timeout;
}

std::uint64_t BundleRegistry::open(std::string key, bool hit) {
    const auto now = Clock::now();
    std::lock_guard lock(m_mutex);
    std::uint64_t token = 0;
    while (token == 0 || m_bundles.contains(token)) {
        token = m_random();
    }
    Bundle& bundle = m_bundles[token];
    bundle.state.key = std::move(key);
    bundle.state.hit = hit;
    bundle.last_used = now;
    return token;
}

BundleRegistry::Bundle* BundleRegistry::find(std::uint64_t token, Clock::time_point now) {
    const auto found = m_bundles.find(token);
    if (found == m_bundles.end()) {
        return nullptr;
    }
    if (now - found->second.last_used >= m_idle_timeout) {
        m_bundles.erase(found);
        return nullptr;
    }
    found->second.last_used = now;
    return &found->second;
}

bool BundleRegistry::touch(std::uint64_t token) {
    const auto now = Clock::now();
    std::lock_guard lock(m_mutex);
    return find(token, now) != nullptr;
}

bool BundleRegistry::add(std::uint64_t token, std::string_view basename, std::string json) {
    const auto now = Clock::now();
    std::lock_guard lock(m_mutex);
    Bundle* bundle = find(token, now);
    if (bundle == nullptr) {
        return false;
    }
    if (bundle->state.hit) {
        return true; // a restored bundle is not stored again: nothing to collect
    }
    auto& entries = bundle->state.entries;
    const auto [slot, inserted] = bundle->index.try_emplace(std::string(basename), entries.size());
    if (inserted) {
        entries.emplace_back(basename, std::move(json));
    } else {
        entries[slot->second].second = std::move(json);
    }
    return true;
}

std::optional<BundleRegistry::Closed> BundleRegistry::close(std::uint64_t token) {
    const auto now = Clock::now();
    std::lock_guard lock(m_mutex);
    if (find(token, now) == nullptr) {
        return std::nullopt;
    }
    auto node = m_bundles.extract(token);
    return std::move(node.mapped().state);
}

std::size_t BundleRegistry::expire(Clock::time_point now) {
    std::lock_guard lock(m_mutex);
    return std::erase_if(
        m_bundles, [&](const auto& item) { return now - item.second.last_used >= m_idle_timeout; });
}

std::size_t BundleRegistry::size() const {
    std::lock_guard lock(m_mutex);
    return m_bundles.size();
}

bool joins_bundle(std::string_view ns, std::string_view key) {
    return ns == autotune::k_namespace && autotune::is_local_key(key);
}

std::optional<std::string> bundle_entry_json(std::string_view value) {
    const auto parsed = Json::parse(value, nullptr, false);
    if (!parsed.is_object()) {
        return std::nullopt; // also what a parse error gives (discarded)
    }
    return proto::python_json_dumps(parsed);
}

namespace {

constexpr auto k_max_ms = std::numeric_limits<std::uint64_t>::max();

// The time_taken_ms a restored entry saves; what is not a non-negative
// integer counts as nothing.
std::uint64_t time_taken_ms(const Json& best_config) {
    const auto found = best_config.find("time_taken_ms");
    if (found == best_config.end()) {
        return 0;
    }
    if (found->is_number_unsigned()) {
        return found->get<std::uint64_t>();
    }
    return 0; // negative, float, or not a number at all
}

} // namespace

BundleRestore restore_bundle(store::Store& store, std::string_view key) {
    auto& log = logger("bundle");
    const auto ns = autotune::k_bundle_namespace;
    auto found = store.get(ns, key);
    if (!found) {
        log.warn("bundle {} could not be read, treated as a miss: {}", key, found.error().message);
        return {};
    }
    if (!*found) {
        return {};
    }
    const auto bundle = Json::parse((*found)->value.text(), nullptr, false);
    if (!bundle.is_object()) {
        store.stats().tier(ns, store::TierId::memory).corrupt++;
        log.warn("bundle {} is not a JSON object ({} bytes), treated as a miss", key,
                 (*found)->value.size());
        return {};
    }
    BundleRestore restore;
    restore.hit = true;
    const auto now = store::now_ms();
    for (const auto& [basename, best_config] : bundle.items()) {
        // Inductor's reader ignores anything but a dict; the key must name
        // a local best-config file.
        if (!autotune::is_local_key(basename) || !best_config.is_object()) {
            log.debug("bundle {}: entry {:?} skipped", key, basename);
            continue;
        }
        store::Entry entry;
        entry.value = store::Blob::copy_of(proto::python_json_dumps(best_config));
        entry.created_ms = now;
        auto stored = store.put(autotune::k_namespace, basename, std::move(entry));
        if (!stored) {
            log.warn("bundle {}: entry {} not restored: {}", key, basename, stored.error().message);
            continue;
        }
        ++restore.entries;
        const auto saved = time_taken_ms(best_config);
        restore.time_saved_ms =
            saved > k_max_ms - restore.time_saved_ms ? k_max_ms : restore.time_saved_ms + saved;
    }
    log.debug("bundle {} restored: {} entries, {} ms saved", key, restore.entries,
              restore.time_saved_ms);
    return restore;
}

tl::expected<std::uint32_t, store::StoreError> store_bundle(store::Store& store,
                                                            const BundleRegistry::Closed& bundle) {
    if (bundle.hit || bundle.entries.empty()) {
        return 0;
    }
    // {"<basename>": <best_config>, ...} as json.dumps writes the dict: the
    // entries are already in that form, so they are joined, not re-encoded.
    std::string text = "{";
    for (const auto& [basename, json] : bundle.entries) {
        if (text.size() > 1) {
            text += ", ";
        }
        proto::python_json_dump(Json(basename), text);
        text += ": ";
        text += json;
    }
    text += '}';
    store::Entry entry;
    entry.value = store::Blob::copy_of(text);
    entry.created_ms = store::now_ms();
    auto stored = store.put(autotune::k_bundle_namespace, bundle.key, std::move(entry));
    if (!stored) {
        return tl::make_unexpected(std::move(stored.error()));
    }
    logger("bundle").debug("bundle {} stored: {} entries, {} bytes", bundle.key,
                           bundle.entries.size(), text.size());
    return static_cast<std::uint32_t>(bundle.entries.size());
}

} // namespace pt2cache::daemon
