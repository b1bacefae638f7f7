// One storage tier (memory, disk, remote) behind one interface; `Store` chains
// them. Tiers are thread-safe. The memory tier never blocks for long; the disk
// and remote tiers block and are called off the Asio threads.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/store/blob.hpp"

#include <tl/expected.hpp>

namespace pt2cache::daemon::store {

enum class Failure {
    io,          // the operating system refused (disk full, permissions...)
    corrupt,     // stored bytes failed verification
    too_large,   // over a configured limit
    timeout,     // a remote deadline passed
    unavailable, // the tier is suspended or disabled
    busy,        // no room in the ReadBudget for this value now: ask again later
};

struct StoreError {
    Failure failure;
    std::string message;
};

// Milliseconds since the Unix epoch.
using UnixMs = std::int64_t;

struct Entry {
    Blob value;
    UnixMs created_ms = 0;
    UnixMs expires_ms = 0; // 0: never

    bool expired(UnixMs now) const { return expires_ms != 0 && expires_ms <= now; }
};

// One put of a batch (Store::put_quick_many): the entry of `ns`/`key`.
struct QuickPut {
    std::string_view ns;
    std::string_view key;
    Entry entry;
};

struct EntryInfo {
    std::string key;
    std::uint64_t size = 0;
    UnixMs mtime_ms = 0;
};

struct ListPage {
    std::vector<EntryInfo> entries;
    std::string next_cursor; // empty: no more entries
};

// An entry as SCAN lists it (docs/protocol.md, "Export and import").
struct ScanEntry {
    std::string ns;
    std::string key;
    std::uint64_t size = 0;
    UnixMs created_ms = 0;
    UnixMs expires_ms = 0;
};

struct ScanPage {
    std::vector<ScanEntry> entries;
    std::string next_cursor; // empty: no more entries
};

class Tier {
public:
    virtual ~Tier() = default;

    // "memory", "disk" or "remote": the name used in stats and logs.
    virtual std::string_view name() const = 0;

    // A live entry, std::nullopt for a miss (an expired entry is a miss).
    virtual tl::expected<std::optional<Entry>, StoreError> get(std::string_view ns,
                                                               std::string_view key) = 0;

    virtual tl::expected<void, StoreError> put(std::string_view ns, std::string_view key,
                                               const Entry& entry) = 0;

    // True when an entry was removed.
    virtual tl::expected<bool, StoreError> remove(std::string_view ns, std::string_view key) = 0;

    // Removes every entry of `ns`; returns how many.
    virtual tl::expected<std::uint64_t, StoreError> clear(std::string_view ns) = 0;

    // Shutdown's drain deadline has passed: requests in progress stop as soon
    // as they can (failing), and later ones fail at once. For a tier whose
    // requests can outlast that deadline (the remote one); others need not.
    virtual void abandon_requests() {}
};

UnixMs now_ms();

} // namespace pt2cache::daemon::store
