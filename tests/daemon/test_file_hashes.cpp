// SPDX-License-Identifier: MIT
#include <chrono>
#include <fstream>
#include <string>
#include <sys/stat.h>
#include <sys/time.h>

#include "daemon/file_hashes.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

using pt2cache::daemon::FileHashCache;
using pt2cache::proto::FileStatus;

namespace {

std::string write(const std::string& path, const std::string& text, bool old = true) {
    std::ofstream(path, std::ios::binary) << text;
    if (old) { // out of the racy window: mtime an hour ago (ctime stays now)
        const struct timeval times[2] = {{::time(nullptr) - 3600, 0}, {::time(nullptr) - 3600, 0}};
        ::utimes(path.c_str(), times);
    }
    return path;
}

} // namespace

TEST_CASE("file hashes follow content and status", "[daemon][file_hashes]") {
    pt2cache::tests::TempDir dir;
    FileHashCache cache;
    const auto a = write((dir / "a").string(), "same bytes");
    const auto b = write((dir / "b").string(), "same bytes");
    const auto c = write((dir / "c").string(), "other bytes");
    const auto ha = cache.hash(a);
    REQUIRE(ha.status == FileStatus::ok);
    CHECK(ha.size == 10);
    CHECK(cache.hash(b).hash == ha.hash);
    CHECK(cache.hash(c).hash != ha.hash);
    CHECK(cache.hash((dir / "absent").string()).status == FileStatus::not_found);
    CHECK(cache.hash(a + "/under-a-file").status == FileStatus::not_found);
    CHECK(cache.hash(dir.path().string()).status == FileStatus::not_regular);
    const auto fifo = (dir / "fifo").string();
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    CHECK(cache.hash(fifo).status == FileStatus::not_regular);
}

TEST_CASE("file hash cache: recent files are hashed, not remembered", "[daemon][file_hashes]") {
    pt2cache::tests::TempDir dir;
    FileHashCache cache;
    const auto a = write((dir / "a").string(), "alpha");
    // The ctime of a file written just now is inside the racy window.
    REQUIRE(cache.hash(a).status == FileStatus::ok);
    REQUIRE(cache.hash(a).status == FileStatus::ok);
    CHECK(cache.size() == 0);
    CHECK(cache.counters().hashed == 2);
    CHECK(cache.counters().hits == 0);
}

TEST_CASE("file hash cache: stat changes, bound and deadline", "[daemon][file_hashes]") {
    pt2cache::tests::TempDir dir;
    FileHashCache cache(2, std::chrono::nanoseconds(0)); // remembers at once
    const auto a = write((dir / "a").string(), "alpha");
    const auto first = cache.hash(a);
    CHECK(cache.size() == 1);
    CHECK(cache.hash(a).hash == first.hash);
    CHECK(cache.counters().hits == 1);
    CHECK(cache.counters().hashed == 1);

    // Same size, same (old) mtime: the ctime still moves, so it is read again.
    write(a, "alphb");
    const auto second = cache.hash(a);
    CHECK(second.hash != first.hash);
    CHECK(cache.counters().hashed == 2);

    // At most `capacity` files are remembered.
    cache.hash(write((dir / "b").string(), "b"));
    cache.hash(write((dir / "c").string(), "c"));
    CHECK(cache.size() == 2);

    // And at most max_bytes of them: a long path takes more room.
    const auto longer = write((dir / std::string(200, 'l')).string(), "l");
    const auto d = write((dir / "d").string(), "d");
    const auto e = write((dir / "e").string(), "e");
    const std::size_t long_cost = longer.size() + FileHashCache::k_entry_overhead;
    const std::size_t short_cost = d.size() + FileHashCache::k_entry_overhead;
    FileHashCache by_bytes(100, std::chrono::nanoseconds(0), long_cost + 2 * short_cost - 1);
    by_bytes.hash(longer);
    by_bytes.hash(d);
    CHECK(by_bytes.size() == 2);
    CHECK(by_bytes.bytes() == long_cost + short_cost);
    by_bytes.hash(e); // the long one, least recent, makes room
    CHECK(by_bytes.size() == 2);
    CHECK(by_bytes.bytes() == 2 * short_cost);
    by_bytes.hash(longer); // read again, then d makes room
    CHECK(by_bytes.counters().hashed == 4);
    CHECK(by_bytes.size() == 2);
    CHECK(by_bytes.bytes() == long_cost + short_cost);
    by_bytes.hash(e);
    CHECK(by_bytes.counters().hits == 1);

    // A deadline already passed: every file is skipped.
    const std::string_view paths[] = {a, a};
    const auto skipped =
        cache.hash_all(paths, std::chrono::steady_clock::now() - std::chrono::seconds(1));
    CHECK(skipped[0].status == FileStatus::skipped);
    CHECK(skipped[1].status == FileStatus::skipped);
}
