// SPDX-License-Identifier: MIT
#include "daemon/file_hashes.hpp"

#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <memory>
#include <string_view>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/context.hpp"
#include "daemon/log.hpp"
#include "daemon/offload.hpp"

#include <xxhash.h>

namespace pt2cache::daemon {

namespace {

constexpr std::size_t k_read_chunk = 1u << 20;

std::int64_t to_ns(const struct timespec& t) {
    return static_cast<std::int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

FileStamp stamp_of(const struct stat& st) {
    return {static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino),
            static_cast<std::uint64_t>(st.st_size), to_ns(st.st_mtim), to_ns(st.st_ctim)};
}

proto::FileHash status_only(proto::FileStatus status) {
    proto::FileHash hash;
    hash.status = status;
    return hash;
}

struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
};

struct StateDeleter {
    void operator()(XXH3_state_t* state) const { XXH3_freeState(state); }
};

// Reads and hashes an open regular file; false when it could not be read to
// the size fstat gave (changed or failing under us). Past `deadline` it
// stops and answers SKIPPED.
bool hash_fd(int fd, std::uint64_t size, std::chrono::steady_clock::time_point deadline,
             proto::FileHash& out) {
    std::unique_ptr<XXH3_state_t, StateDeleter> state(XXH3_createState());
    if (!state || XXH3_128bits_reset(state.get()) != XXH_OK) {
        return false;
    }
    // Sized by the file, but never tiny: a file whose size stat does not
    // know (procfs says 0) would be read a byte per call.
    std::vector<char> buffer(std::clamp<std::uint64_t>(size, 64 * 1024, k_read_chunk));
    std::uint64_t total = 0;
    for (;;) {
        const ssize_t n = ::read(fd, buffer.data(), buffer.size());
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            return false;
        }
        if (n == 0) {
            break;
        }
        if (std::chrono::steady_clock::now() >= deadline) {
            out.status = proto::FileStatus::skipped;
            return false;
        }
        total += static_cast<std::uint64_t>(n);
        XXH3_128bits_update(state.get(), buffer.data(), static_cast<std::size_t>(n));
    }
    XXH128_canonical_t canonical;
    XXH128_canonicalFromHash(&canonical, XXH3_128bits_digest(state.get()));
    std::memcpy(out.hash.data(), canonical.digest, out.hash.size());
    out.size = total;
    out.status = proto::FileStatus::ok;
    return total == size;
}

} // namespace

proto::FileHash FileHashCache::hash(const std::string& path,
                                    std::chrono::steady_clock::time_point deadline) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
        return status_only(errno == ENOENT || errno == ENOTDIR ? proto::FileStatus::not_found
                                                               : proto::FileStatus::unreadable);
    }
    if (!S_ISREG(st.st_mode)) {
        return status_only(proto::FileStatus::not_regular);
    }
    if (static_cast<std::uint64_t>(st.st_size) > k_max_file) {
        return status_only(proto::FileStatus::too_large);
    }
    const auto stamp = stamp_of(st);
    proto::FileHash out;
    if (lookup(path, stamp, out)) {
        return out;
    }
    // O_NONBLOCK: should the path become a FIFO between stat and open, open
    // must not wait for a writer; fstat below then refuses it.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
        return status_only(errno == ENOENT || errno == ENOTDIR ? proto::FileStatus::not_found
                                                               : proto::FileStatus::unreadable);
    }
    FdCloser closer{fd};
    struct stat opened {};
    if (::fstat(fd, &opened) != 0) {
        return status_only(proto::FileStatus::unreadable);
    }
    if (!S_ISREG(opened.st_mode)) {
        return status_only(proto::FileStatus::not_regular);
    }
    if (static_cast<std::uint64_t>(opened.st_size) > k_max_file) {
        return status_only(proto::FileStatus::too_large);
    }
    const auto opened_stamp = stamp_of(opened);
    const bool complete = hash_fd(fd, opened_stamp.size, deadline, out);
    if (out.status == proto::FileStatus::skipped) {
        return status_only(proto::FileStatus::skipped);
    }
    if (out.status != proto::FileStatus::ok) {
        return status_only(proto::FileStatus::unreadable);
    }
    {
        std::lock_guard lock(m_mutex);
        m_counters.hashed++;
        m_counters.bytes_hashed += out.size;
    }
    struct stat after {};
    const bool unchanged = complete && ::fstat(fd, &after) == 0 && stamp_of(after) == opened_stamp;
    const auto now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
    const auto racy_ns = m_racy_window.count();
    const bool settled =
        now_ns - opened_stamp.mtime_ns >= racy_ns && now_ns - opened_stamp.ctime_ns >= racy_ns;
    if (unchanged && settled) {
        remember(path, opened_stamp, out);
    }
    return out;
}

std::vector<proto::FileHash>
FileHashCache::hash_all(std::span<const std::string_view> paths,
                        std::chrono::steady_clock::time_point deadline) {
    std::vector<proto::FileHash> hashes;
    hashes.reserve(paths.size());
    std::string path;
    for (const auto view : paths) {
        if (std::chrono::steady_clock::now() >= deadline) {
            hashes.push_back(status_only(proto::FileStatus::skipped));
            continue;
        }
        path.assign(view);
        hashes.push_back(hash(path, deadline));
    }
    return hashes;
}

bool FileHashCache::lookup(const std::string& path, const FileStamp& stamp, proto::FileHash& out) {
    std::lock_guard lock(m_mutex);
    const auto it = m_map.find(path);
    if (it == m_map.end()) {
        return false;
    }
    if (it->second->stamp != stamp) {
        const auto node = it->second;
        m_map.erase(it);
        m_bytes -= cost(*node);
        m_lru.erase(node);
        return false;
    }
    m_lru.splice(m_lru.begin(), m_lru, it->second);
    out = it->second->hash;
    m_counters.hits++;
    return true;
}

void FileHashCache::remember(const std::string& path, const FileStamp& stamp,
                             const proto::FileHash& hash) {
    if (m_capacity == 0) {
        return;
    }
    List fresh;
    fresh.push_back(Node{path, stamp, hash});
    List dropped; // freed after the lock is released
    std::lock_guard lock(m_mutex);
    if (const auto it = m_map.find(path); it != m_map.end()) {
        const auto node = it->second;
        m_map.erase(it);
        m_bytes -= cost(*node);
        dropped.splice(dropped.end(), m_lru, node);
    }
    m_lru.splice(m_lru.begin(), fresh);
    m_map.emplace(std::string_view(m_lru.front().path), m_lru.begin());
    m_bytes += cost(m_lru.front());
    while (!m_lru.empty() && (m_lru.size() > m_capacity || m_bytes > m_max_bytes)) {
        m_map.erase(std::string_view(m_lru.back().path));
        m_bytes -= cost(m_lru.back());
        dropped.splice(dropped.end(), m_lru, std::prev(m_lru.end()));
    }
}

std::size_t FileHashCache::bytes() const {
    std::lock_guard lock(m_mutex);
    return m_bytes;
}

std::size_t FileHashCache::size() const {
    std::lock_guard lock(m_mutex);
    return m_lru.size();
}

FileHashCounters FileHashCache::counters() const {
    std::lock_guard lock(m_mutex);
    return m_counters;
}

void FileHashCache::reset_counters() {
    std::lock_guard lock(m_mutex);
    m_counters = FileHashCounters{};
}

std::chrono::milliseconds hash_request_budget() {
    static const std::chrono::milliseconds budget = [] {
        const std::chrono::milliseconds standard = k_hash_request_budget;
        constexpr const char* k_variable = "PT2CACHED_DEBUG_HASH_BUDGET_MS";
        const char* text = std::getenv(k_variable);
        if (text == nullptr) {
            return standard;
        }
#ifdef NDEBUG
        logger("cxx").warn("{} is ignored: this pt2cached is a release build", k_variable);
        return standard;
#else
        std::int64_t ms = -1;
        const std::string_view view(text);
        const auto [end, ec] = std::from_chars(view.data(), view.data() + view.size(), ms);
        if (ec != std::errc() || end != view.data() + view.size() || ms < 0 || ms > 60'000) {
            logger("cxx").warn("{}=\"{}\" is ignored: expected milliseconds, 0 to 60000",
                               k_variable, text);
            return standard;
        }
        logger("cxx").warn("{}: file hashing limited to {} ms per request (a debug hook)",
                           k_variable, ms);
        return std::chrono::milliseconds(ms);
#endif
    }();
    return budget;
}

awaitable<tl::expected<std::vector<std::byte>, proto::Error>>
serve_hash_files(Context& context, std::span<const std::byte> body, bool peer_shares_files) {
    auto paths = proto::parse_hash_files(body);
    if (!paths) {
        co_return tl::unexpected(paths.error());
    }
    if (!peer_shares_files) {
        const std::vector<proto::FileHash> skipped(
            paths->size(), proto::FileHash{.status = proto::FileStatus::skipped});
        co_return proto::encode_hash_files_body(skipped);
    }
    const auto deadline = std::chrono::steady_clock::now() + hash_request_budget();
    auto& pool = context.hashing != nullptr ? *context.hashing : *context.blocking;
    auto hashes =
        co_await offload(pool, [&] { return context.file_hashes.hash_all(*paths, deadline); });
    co_return proto::encode_hash_files_body(hashes);
}

} // namespace pt2cache::daemon
