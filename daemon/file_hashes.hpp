// SPDX-License-Identifier: MIT
//
// HASH_FILES (docs/protocol.md, "Hashing files"): content hashes of files,
// remembered by (dev, inode, size, mtime_ns, ctime_ns) so that unchanged
// files cost one stat.
#pragma once

#include <chrono>
#include <cstdint>
#include <list>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "daemon/asio.hpp"
#include "proto/frame.hpp"
#include "proto/hash_files.hpp"

#include <tl/expected.hpp>

namespace pt2cache::daemon {

struct Context;

// How long one request (HASH_FILES, CXX_LOOKUP) may spend hashing files.
inline constexpr std::chrono::seconds k_hash_request_budget{2};

// The budget in force: k_hash_request_budget, or in debug builds (NDEBUG
// undefined) PT2CACHED_DEBUG_HASH_BUDGET_MS when set to an integer from 0 to
// 60000, so that a test can make CXX_LOOKUP answer UNDECIDED and HASH_FILES
// SKIPPED (docs/cxx.md). Read once; release builds ignore the variable.
std::chrono::milliseconds hash_request_budget();

// Identity of a file's content as stat sees it.
struct FileStamp {
    std::uint64_t dev = 0;
    std::uint64_t ino = 0;
    std::uint64_t size = 0;
    std::int64_t mtime_ns = 0;
    std::int64_t ctime_ns = 0;

    friend bool operator==(const FileStamp&, const FileStamp&) = default;
};

struct FileHashCounters {
    std::uint64_t hits = 0;   // answered from the cache
    std::uint64_t hashed = 0; // read and hashed
    std::uint64_t bytes_hashed = 0;
};

// A bounded LRU of path → (stamp, hash), by count and by bytes (paths may
// be 4 KiB long). Thread-safe.
class FileHashCache {
public:
    static constexpr std::size_t k_default_capacity = 65'536;
    static constexpr std::size_t k_default_max_bytes = 32u << 20;
    // What an entry costs beyond its path: the list node, the map's entry
    // and the stamp and hash (counted, not measured).
    static constexpr std::size_t k_entry_overhead = 160;
    static constexpr std::uint64_t k_max_file = 2ull << 30;
    // A file changed this recently is hashed but not remembered.
    static constexpr std::chrono::seconds k_racy_window{2};

    explicit FileHashCache(std::size_t capacity = k_default_capacity,
                           std::chrono::nanoseconds racy_window = k_racy_window,
                           std::size_t max_bytes = k_default_max_bytes)
        : m_capacity(capacity)
        , m_max_bytes(max_bytes)
        , m_racy_window(racy_window) {}

    // Stats `path` and answers its hash, from the cache when the stamp
    // matches, else by reading it (blocking: call from the worker pool);
    // SKIPPED when reading runs past `deadline`.
    proto::FileHash hash(const std::string& path, std::chrono::steady_clock::time_point deadline =
                                                      std::chrono::steady_clock::time_point::max());

    // Hashes `paths` in order; paths not reached before `deadline` are
    // answered SKIPPED.
    std::vector<proto::FileHash> hash_all(std::span<const std::string_view> paths,
                                          std::chrono::steady_clock::time_point deadline);

    std::size_t size() const;
    // What the remembered entries cost, as counted against max_bytes.
    std::size_t bytes() const;
    FileHashCounters counters() const;
    // Zeroes the counters (STATS with ZERO); the cached hashes stay.
    void reset_counters();

private:
    struct Node {
        std::string path;
        FileStamp stamp;
        proto::FileHash hash;
    };
    using List = std::list<Node>;

    static std::size_t cost(const Node& node) { return node.path.size() + k_entry_overhead; }
    bool lookup(const std::string& path, const FileStamp& stamp, proto::FileHash& out);
    void remember(const std::string& path, const FileStamp& stamp, const proto::FileHash& hash);

    const std::size_t m_capacity;
    const std::size_t m_max_bytes;
    const std::chrono::nanoseconds m_racy_window;
    std::size_t m_bytes = 0;
    mutable std::mutex m_mutex;
    List m_lru; // most recent first
    std::unordered_map<std::string_view, List::iterator> m_map;
    FileHashCounters m_counters;
};

// Serves one HASH_FILES body: the OK response body, or the error to answer.
// For a client that does not see the daemon's files (`peer_shares_files`
// false: another mount namespace or root) every path is answered SKIPPED,
// which the client hashes itself.
awaitable<tl::expected<std::vector<std::byte>, proto::Error>>
serve_hash_files(Context& context, std::span<const std::byte> body, bool peer_shares_files);

} // namespace pt2cache::daemon
