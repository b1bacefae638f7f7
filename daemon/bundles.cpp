// SPDX-License-Identifier: MIT
#include "daemon/bundles.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <limits>
#include <memory>

#include "daemon/log.hpp"
#include "proto/autotune.hpp"
#include "proto/autotune_bundle.hpp"
#include "proto/python_json.hpp"

#include <nlohmann/json.hpp>

namespace pt2cache::daemon {

namespace autotune = proto::autotune;
using Json = nlohmann::ordered_json;

BundleRegistry::BundleRegistry(std::chrono::seconds idle_timeout, BundleLimits limits)
    : m_limits(limits)
    , m_idle_timeout(idle_timeout)
    , m_random(std::random_device{}()) {}

void BundleRegistry::erase(std::unordered_map<std::uint64_t, Bundle>::iterator at) {
    m_bytes -= at->second.bytes;
    m_bundles.erase(at);
}

void BundleRegistry::set_idle_timeout(std::chrono::seconds idle_timeout) {
    std::lock_guard lock(m_mutex);
    m_idle_timeout = idle_timeout;
}

std::uint64_t BundleRegistry::open(std::string key, bool hit) {
    const auto now = Clock::now();
    std::lock_guard lock(m_mutex);
    if (m_bundles.size() >= m_limits.open && !m_bundles.empty()) {
        erase(
            std::min_element(m_bundles.begin(), m_bundles.end(), [](const auto& a, const auto& b) {
                return a.second.last_used < b.second.last_used;
            }));
        ++m_refusals.dropped;
    }
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
        erase(found);
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
    if (bundle->state.hit || bundle->overflowed) {
        return true; // nothing (more) to collect: BUNDLE_END stores nothing
    }
    auto& entries = bundle->state.entries;
    const auto found = bundle->index.find(std::string(basename));
    const std::uint64_t replaced =
        found == bundle->index.end() ? 0 : basename.size() + entries[found->second].second.size();
    const std::uint64_t grown = bundle->bytes - replaced + basename.size() + json.size();
    if (grown > m_limits.bundle_bytes || m_bytes - bundle->bytes + grown > m_limits.total_bytes) {
        m_bytes -= bundle->bytes;
        bundle->bytes = 0;
        bundle->overflowed = true;
        entries.clear();
        bundle->index.clear();
        ++m_refusals.overflowed;
        return true;
    }
    m_bytes += grown - bundle->bytes;
    bundle->bytes = grown;
    if (found == bundle->index.end()) {
        bundle->index.emplace(std::string(basename), entries.size());
        entries.emplace_back(basename, std::move(json));
    } else {
        entries[found->second].second = std::move(json);
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
    m_bytes -= node.mapped().bytes;
    return std::move(node.mapped().state);
}

std::size_t BundleRegistry::expire(Clock::time_point now) {
    std::lock_guard lock(m_mutex);
    std::size_t expired = 0;
    for (auto it = m_bundles.begin(); it != m_bundles.end();) {
        const auto next = std::next(it);
        if (now - it->second.last_used >= m_idle_timeout) {
            erase(it);
            ++expired;
        }
        it = next;
    }
    return expired;
}

std::uint64_t BundleRegistry::bytes() const {
    std::lock_guard lock(m_mutex);
    return m_bytes;
}

BundleRegistry::Refusals BundleRegistry::refusals() const {
    std::lock_guard lock(m_mutex);
    return m_refusals;
}

std::size_t BundleRegistry::size() const {
    std::lock_guard lock(m_mutex);
    return m_bundles.size();
}

bool joins_bundle(std::string_view ns, std::string_view key) {
    return ns == autotune::k_namespace && autotune::is_local_key(key);
}

std::optional<std::string> bundle_entry_json(std::string_view value) {
    const auto parsed = proto::parse_json(value);
    if (!parsed.is_object()) {
        return std::nullopt; // also what a parse error gives (discarded)
    }
    return proto::python_json_dumps(parsed);
}

namespace {

// Entries a helper thread is worth: below this the caller writes alone.
constexpr std::size_t k_entries_per_helper = 64;

void add_saturating(std::atomic<std::uint64_t>& total, std::uint64_t value) {
    auto current = total.load(std::memory_order_relaxed);
    std::uint64_t next = 0;
    do {
        const auto room = std::numeric_limits<std::uint64_t>::max() - current;
        next = value > room ? std::numeric_limits<std::uint64_t>::max() : current + value;
    } while (!total.compare_exchange_weak(current, next, std::memory_order_relaxed));
}

// Runs fn(i) for every i in [0, count) on this thread and on up to `helpers`
// tasks of `pool`, and returns once every call has returned. Indices are
// handed out one at a time; a helper that starts after they ran out returns
// without touching `fn`'s captures, so it may outlive this call.
template <typename Fn>
void parallel_for(asio::thread_pool* pool, unsigned helpers, std::size_t count, const Fn& fn) {
    struct Shared {
        std::atomic<std::size_t> next{0};
        std::atomic<std::size_t> done{0};
        std::mutex mutex;
        std::condition_variable all_done;
    };
    const auto shared = std::make_shared<Shared>();
    const auto work = [shared, count, &fn] {
        for (auto i = shared->next.fetch_add(1); i < count; i = shared->next.fetch_add(1)) {
            fn(i);
            if (shared->done.fetch_add(1) + 1 == count) {
                std::lock_guard lock(shared->mutex);
                shared->all_done.notify_all();
            }
        }
    };
    for (unsigned i = 0; i < helpers; ++i) {
        asio::post(*pool, work);
    }
    work();
    std::unique_lock lock(shared->mutex);
    shared->all_done.wait(lock, [&] { return shared->done.load() == count; });
}

} // namespace

BundleRestore restore_bundle(store::Store& store, std::string_view key, const store::Entry& found,
                             asio::thread_pool* pool, unsigned helpers) {
    auto& log = logger("bundle");
    const auto ns = autotune::k_bundle_namespace;
    auto bundle = autotune::decode_bundle(found.value.text());
    if (!bundle) {
        store.stats().tier(ns, store::TierId::memory).corrupt++;
        log.warn("bundle {} is not a JSON object ({} bytes, {}), treated as a miss", key,
                 found.value.size(), bundle.error());
        return {};
    }
    if (bundle->skipped != 0) {
        log.debug("bundle {}: {} entries skipped", key, bundle->skipped);
    }

    // Memory first, so that every worker's per-kernel lookup hits as soon as
    // BUNDLE_BEGIN answers; the disk copies (one file each, the slow part)
    // are written by a background task on the worker pool, which the daemon
    // joins before it exits. Without a memory tier (or a pool) every entry
    // is stored in full here.
    const auto now = store::now_ms();
    auto* memory = store.memory_tier();
    const bool memory_first = memory != nullptr && memory->enabled() && pool != nullptr;
    std::vector<std::pair<std::string, store::Entry>> pending;
    pending.reserve(bundle->entries.size());
    std::uint32_t entries = 0;
    std::atomic<std::uint64_t> saved_ms{0};
    for (const auto& restored : bundle->entries) {
        store::Entry entry;
        entry.value = store::Blob::copy_of(restored.best_config);
        entry.created_ms = now;
        if (memory_first) {
            if (auto put = store.put_memory(autotune::k_namespace, restored.basename, entry);
                !put) {
                log.warn("bundle {}: entry {} not restored: {}", key, restored.basename,
                         put.error().message);
                continue;
            }
        } else if (auto stored = store.put(autotune::k_namespace, restored.basename, entry);
                   !stored) {
            log.warn("bundle {}: entry {} not restored: {}", key, restored.basename,
                     stored.error().message);
            continue;
        }
        ++entries;
        add_saturating(saved_ms, restored.time_taken_ms);
        if (memory_first) {
            pending.emplace_back(restored.basename, std::move(entry));
        }
    }
    if (!pending.empty()) {
        const auto shared = std::make_shared<decltype(pending)>(std::move(pending));
        const auto bundle = std::string(key);
        // Only where the entry in memory is still the restored one: a PUT
        // or DEL of the key acknowledged since must not be undone.
        const auto write = [&store, shared, bundle](std::size_t i) {
            auto& [basename, entry] = (*shared)[i];
            if (auto stored = store.put_disk_behind(autotune::k_namespace, basename, entry);
                !stored) {
                logger("bundle").warn("bundle {}: entry {} not written to disk: {}", bundle,
                                      basename, stored.error().message);
            }
        };
        const auto wanted = static_cast<unsigned>(
            std::min<std::size_t>(helpers, shared->size() / k_entries_per_helper));
        asio::post(*pool, [pool, wanted, shared, write] {
            parallel_for(pool, wanted, shared->size(), write);
        });
    }

    BundleRestore restore;
    restore.hit = true;
    restore.entries = entries;
    restore.time_saved_ms = saved_ms.load();
    log.debug("bundle {} restored: {} entries, {} ms saved", key, restore.entries,
              restore.time_saved_ms);
    return restore;
}

tl::expected<std::uint32_t, store::StoreError> store_bundle(store::Store& store,
                                                            const BundleRegistry::Closed& bundle) {
    if (bundle.hit || bundle.entries.empty()) {
        return 0;
    }
    // The entries are already in json.dumps form: joined, not re-encoded.
    const std::string text = autotune::encode_bundle(bundle.entries);
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
