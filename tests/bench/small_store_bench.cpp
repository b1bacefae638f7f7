// SPDX-License-Identifier: MIT
// Figures for the disk tier's small-entry store (docs/architecture.md, "Small
// entries in LMDB"). A program, not a test: run it by hand.
//
//   small_store_bench inodes  [N=100000] [DIR]  N 200-byte entries written
//       through the disk tier with disk.small_entry_max = 0 (one file each)
//       and = 16 KiB (small.mdb): inodes and du of each cache directory.
//   small_store_bench startup [N=1000000] [DIR] N 200-byte entries in a
//       small.mdb, then the time from constructing the disk tier (what the
//       daemon does at start) until its index answers a miss from memory
//       (known_absent), three runs.
//   small_store_bench overwrite [N=1000] [DIR]  the write queue's batches
//       under redis-benchmark -r N SETs of 1 KiB: 300 transactions, each of
//       the distinct keys among 2000 drawn from N (about one window's SETs
//       at 16 clients); the writing thread's CPU time per entry.
//   small_store_bench compact [N=200000] [DIR]  N 200-byte entries and N/10
//       of 12 KiB (overflow pages) in a small.mdb, every other one erased,
//       then three compactions: the time of each and the file's size.
//   small_store_bench fill N DIR  only writes those N entries, into
//       DIR/cache/small.mdb, and keeps DIR (tests/bench/daemon-startup-bench
//       then times whole daemons on it).
//
// DIR (default: a fresh directory under $TMPDIR or /tmp) is removed after,
// except by fill.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <random>
#include <set>
#include <string>
#include <sys/stat.h>
#include <vector>

#include "daemon/store/disk/disk_entry.hpp"
#include "daemon/store/disk/disk_layout.hpp"
#include "daemon/store/disk/disk_small_store.hpp"
#include "daemon/store/disk/disk_tier.hpp"
#include "daemon/store/log.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

using namespace pt2cache::daemon::store;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

struct Usage {
    std::uint64_t inodes = 0;
    std::uint64_t du_bytes = 0;
};

Usage usage_of(const fs::path& root) {
    Usage usage;
    for (const auto& item : fs::recursive_directory_iterator(root)) {
        struct stat info {};
        if (::lstat(item.path().c_str(), &info) == 0) {
            ++usage.inodes;
            usage.du_bytes += static_cast<std::uint64_t>(info.st_blocks) * 512;
        }
    }
    return usage;
}

Entry entry_of(std::size_t i) {
    std::string value = fmt::format("{{\"config\": {}, \"timing\": 0.0125}}", i);
    value.resize(200, ' ');
    Entry entry;
    entry.value = Blob::copy_of(value);
    entry.created_ms = 1'700'000'000'000;
    return entry;
}

DiskOptions options_with(std::uint64_t small_entry_max) {
    DiskOptions options;
    options.max_size = 100ULL << 30;
    options.write_mode = DiskWriteMode::async;
    options.small_entry_max = small_entry_max;
    return options;
}

int inodes(std::size_t count, const fs::path& base) {
    for (const std::uint64_t small_max : {std::uint64_t{0}, std::uint64_t{16} << 10}) {
        const fs::path root = base / fmt::format("cache-{}", small_max);
        Stats stats;
        const auto started = Clock::now();
        {
            DiskTier tier(root, options_with(small_max), stats);
            for (std::size_t i = 0; i < count; ++i) {
                if (!tier.put("autotune", fmt::format("key-{}", i), entry_of(i))) {
                    std::fprintf(stderr, "put failed\n");
                    return 1;
                }
            }
        }
        const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
        const Usage usage = usage_of(root);
        fmt::print("small_entry_max={:>6}: {} entries of 200 B: {} inodes, du {:.1f} MiB, "
                   "written in {:.1f} s\n",
                   small_max, count, usage.inodes, usage.du_bytes / 1048576.0, seconds);
        fs::remove_all(root);
    }
    return 0;
}

// N 200-byte "autotune" entries written straight into root/small.mdb.
int fill(std::size_t count, const fs::path& root) {
    fs::create_directories(root);
    {
        bool recovered = false;
        auto store = SmallStore::open((root / "small.mdb").string(), 64ULL << 30, recovered);
        if (!store) {
            std::fprintf(stderr, "%s\n", store.error().c_str());
            return 1;
        }
        constexpr std::size_t k_batch = 20'000;
        std::vector<std::vector<std::byte>> encoded;
        std::vector<SmallWrite> writes;
        for (std::size_t start = 0; start < count; start += k_batch) {
            encoded.clear();
            writes.clear();
            for (std::size_t i = start; i < std::min(count, start + k_batch); ++i) {
                const std::string key = fmt::format("key-{}", i);
                encoded.push_back(encode("autotune", key, entry_of(i), 1ULL << 40, 1));
            }
            for (std::size_t i = start; i < std::min(count, start + k_batch); ++i) {
                const std::string key = fmt::format("key-{}", i);
                writes.push_back(
                    SmallWrite{"autotune",
                               entry_hash("autotune", key),
                               {std::span<const std::byte>(encoded[i - start]), {}, {}},
                               1'700'000'000'000 + static_cast<UnixMs>(i)});
            }
            if (auto written = (*store)->write(writes, 1); !written) {
                std::fprintf(stderr, "%s\n", written.error().message.c_str());
                return 1;
            }
        }
    }
    const Usage usage = usage_of(root);
    fmt::print("{} entries of 200 B in small.mdb: {:.1f} MiB\n", count, usage.du_bytes / 1048576.0);
    return 0;
}

// N 200-byte entries and N/10 of 12 KiB, then every other one erased; times
// three compactions of what is left.
int compact(std::size_t count, const fs::path& base) {
    const fs::path root = base / "cache";
    fs::create_directories(root);
    const std::string path = (root / "small.mdb").string();
    bool recovered = false;
    auto store = SmallStore::open(path, 64ULL << 30, recovered);
    if (!store) {
        std::fprintf(stderr, "%s\n", store.error().c_str());
        return 1;
    }
    std::vector<SmallKeyRef> erased;
    std::vector<std::string> keys;
    keys.reserve(count + count / 10);
    constexpr std::size_t k_batch = 10'000;
    for (std::size_t start = 0; start < count + count / 10; start += k_batch) {
        std::vector<std::vector<std::byte>> encoded;
        std::vector<SmallWrite> writes;
        for (std::size_t i = start; i < std::min(count + count / 10, start + k_batch); ++i) {
            keys.push_back(fmt::format("key-{}", i));
            Entry entry = entry_of(i);
            if (i >= count) {
                entry.value = Blob::copy_of(std::string(12 << 10, 'v'));
            }
            encoded.push_back(encode("autotune", keys.back(), entry, 1ULL << 40, 1));
        }
        for (std::size_t i = start; i < start + encoded.size(); ++i) {
            writes.push_back(SmallWrite{"autotune",
                                        entry_hash("autotune", keys[i]),
                                        {std::span<const std::byte>(encoded[i - start]), {}, {}},
                                        0});
        }
        if (auto written = (*store)->write(writes, 1'700'000'000'000); !written) {
            std::fprintf(stderr, "%s\n", written.error().message.c_str());
            return 1;
        }
    }
    for (std::size_t i = 0; i < keys.size(); i += 2) {
        erased.push_back(SmallKeyRef{"autotune", entry_hash("autotune", keys[i])});
    }
    if (auto done = (*store)->erase(erased); !done) {
        std::fprintf(stderr, "%s\n", done.error().c_str());
        return 1;
    }
    fmt::print("{} entries of 200 B and {} of 12 KiB, every other one erased: small.mdb {:.1f} "
               "MiB\n",
               count, count / 10, static_cast<double>(fs::file_size(path)) / 1048576.0);
    for (int run = 0; run < 3; ++run) {
        const auto started = Clock::now();
        if (auto done = (*store)->compact(); !done) {
            std::fprintf(stderr, "%s\n", done.error().c_str());
            return 1;
        }
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - started).count();
        fmt::print("compaction {}: {:.0f} ms, small.mdb {:.1f} MiB, {} entries\n", run + 1, ms,
                   static_cast<double>(fs::file_size(path)) / 1048576.0, (*store)->size());
    }
    return 0;
}

double thread_cpu_seconds() {
    timespec now{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
    return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) / 1e9;
}

int overwrite(std::size_t keys, const fs::path& base) {
    const fs::path root = base / "cache";
    fs::create_directories(root);
    bool recovered = false;
    auto store = SmallStore::open((root / "small.mdb").string(), 1ULL << 30, recovered);
    if (!store) {
        std::fprintf(stderr, "%s\n", store.error().c_str());
        return 1;
    }
    constexpr int k_batches = 300;
    constexpr std::size_t k_drawn = 2000;
    std::vector<std::vector<std::byte>> encoded;
    std::vector<Hash128> ids;
    for (std::size_t i = 0; i < keys; ++i) {
        const std::string key = fmt::format("key:{:012}", i);
        Entry entry;
        entry.value = Blob::copy_of(std::string(1024, 'x'));
        entry.created_ms = 1'700'000'000'000;
        encoded.push_back(encode("redis", key, entry, 1ULL << 40, 1));
        ids.push_back(entry_hash("redis", key));
    }
    std::mt19937 random(1);
    double cpu = 0;
    std::size_t written = 0;
    const auto started = Clock::now();
    for (int batch = 0; batch < k_batches; ++batch) {
        std::set<std::size_t> drawn; // the queue writes a key put twice once
        for (std::size_t i = 0; i < k_drawn; ++i) {
            drawn.insert(random() % keys);
        }
        std::vector<SmallWrite> writes;
        for (const std::size_t i : drawn) {
            writes.push_back(SmallWrite{"redis", ids[i], {std::span(encoded[i]), {}, {}}, 0});
        }
        const double before = thread_cpu_seconds();
        if (auto done = (*store)->write(writes, 1'700'000'000'000); !done) {
            std::fprintf(stderr, "%s\n", done.error().message.c_str());
            return 1;
        }
        cpu += thread_cpu_seconds() - before;
        written += writes.size();
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
    fmt::print("{} transactions of {:.0f} distinct 1 KiB entries (of {} keys): {:.2f} us of CPU "
               "per entry, {:.1f} ms a transaction\n",
               k_batches, static_cast<double>(written) / k_batches, keys,
               cpu * 1e6 / static_cast<double>(written), seconds * 1e3 / k_batches);
    return 0;
}

int startup(std::size_t count, const fs::path& base) {
    const fs::path root = base / "cache";
    if (const int rc = fill(count, root); rc != 0) {
        return rc;
    }
    for (int run = 0; run < 3; ++run) {
        Stats stats;
        const auto started = Clock::now();
        DiskTier tier(root, options_with(16 << 10), stats);
        const auto constructed = Clock::now();
        while (!tier.known_absent("autotune", "missing-key")) {
            std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
        const auto ready = Clock::now();
        const auto ms = [](Clock::duration d) {
            return std::chrono::duration<double, std::milli>(d).count();
        };
        fmt::print("run {}: constructed in {:.1f} ms, first miss answered from the index after "
                   "{:.1f} ms ({} entries indexed)\n",
                   run + 1, ms(constructed - started), ms(ready - started), tier.count());
    }
    return 0;
}

} // namespace

int main(int argc, char** argv) {
    logger().set_level(spdlog::level::warn);
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode != "inodes" && mode != "startup" && mode != "overwrite" && mode != "compact" &&
        !(mode == "fill" && argc == 4)) {
        std::fprintf(stderr, "usage: small_store_bench inodes|startup|overwrite|compact [N] [DIR]\n"
                             "       small_store_bench fill N DIR\n");
        return 2;
    }
    const std::size_t count = argc > 2              ? std::stoul(argv[2])
                              : mode == "inodes"    ? 100'000
                              : mode == "overwrite" ? 1000
                              : mode == "compact"   ? 200'000
                                                    : 1'000'000;
    const char* tmp = std::getenv("TMPDIR");
    const fs::path base = argc > 3 ? fs::path(argv[3])
                                   : fs::path(tmp != nullptr ? tmp : "/tmp") /
                                         fmt::format("small-store-bench-{}", ::getpid());
    fs::create_directories(base);
    if (mode == "fill") {
        return fill(count, base / "cache");
    }
    const int rc = mode == "inodes"      ? inodes(count, base)
                   : mode == "overwrite" ? overwrite(count, base)
                   : mode == "compact"   ? compact(count, base)
                                         : startup(count, base);
    fs::remove_all(base);
    return rc;
}
