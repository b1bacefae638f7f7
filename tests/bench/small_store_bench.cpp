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
//   small_store_bench fill N DIR  only writes those N entries, into
//       DIR/cache/small.mdb, and keeps DIR (tests/bench/daemon-startup-bench
//       then times whole daemons on it).
//
// DIR (default: a fresh directory under $TMPDIR or /tmp) is removed after,
// except by fill.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
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
    if (mode != "inodes" && mode != "startup" && !(mode == "fill" && argc == 4)) {
        std::fprintf(stderr, "usage: small_store_bench inodes|startup [N] [DIR]\n"
                             "       small_store_bench fill N DIR\n");
        return 2;
    }
    const std::size_t count = argc > 2           ? std::stoul(argv[2])
                              : mode == "inodes" ? 100'000
                                                 : 1'000'000;
    const char* tmp = std::getenv("TMPDIR");
    const fs::path base = argc > 3 ? fs::path(argv[3])
                                   : fs::path(tmp != nullptr ? tmp : "/tmp") /
                                         fmt::format("small-store-bench-{}", ::getpid());
    fs::create_directories(base);
    if (mode == "fill") {
        return fill(count, base / "cache");
    }
    const int rc = mode == "inodes" ? inodes(count, base) : startup(count, base);
    fs::remove_all(base);
    return rc;
}
