// SPDX-License-Identifier: MIT
#include <cstring>

#include "daemon/store/disk/disk_entry.hpp"
#include "daemon/store/disk/disk_layout.hpp"
#include "daemon/store/disk/shared_reads.hpp"
#include "daemon/store/xxh3.hpp"
#include "tests/daemon/store/alloc_probe.hpp"
#include "tests/daemon/store/helpers.hpp"

#include <catch2/catch.hpp>

using namespace pt2cache::daemon::store;
using pt2cache::tests::make_entry;
using pt2cache::tests::random_bytes;
using pt2cache::tests::text_bytes;

namespace {

constexpr std::uint64_t k_threshold = 4096;
constexpr int k_level = 3;

// Offsets of header fields (see disk_entry.hpp).
constexpr std::size_t k_off_version = 4;
constexpr std::size_t k_off_flags = 6;
constexpr std::size_t k_off_key_length = 9;
constexpr std::size_t k_off_created = 11;
constexpr std::size_t k_off_value_length = 27;
constexpr std::size_t k_off_payload_length = 35;

void set_le(std::vector<std::byte>& file, std::size_t offset, std::uint64_t value,
            std::size_t width) {
    for (std::size_t i = 0; i < width; ++i) {
        file[offset + i] = static_cast<std::byte>((value >> (8 * i)) & 0xFFU);
    }
}

// Recomputes the trailing checksum after a deliberate edit, so that the
// check under test is the one that fires.
void reseal(std::vector<std::byte>& file) {
    const auto body = std::span<const std::byte>(file).first(file.size() - 8);
    set_le(file, file.size() - 8, Xxh3Hash64::of(body), 8);
}

std::string reason_of(std::span<const std::byte> file) {
    const auto decoded = decode(file);
    REQUIRE_FALSE(decoded);
    return decoded.error();
}

} // namespace

TEST_CASE("disk entry round trip", "[store][disk_entry]") {
    const std::size_t size = GENERATE(0U, 1U, 1024U, 1024U * 1024U);
    const Entry entry = make_entry(random_bytes(size, size), 1'800'000'000'000);
    const auto file = encode("fx-graph", "some key", entry, k_threshold, k_level);
    CHECK(file.size() == k_entry_header_size + 8 + 8 + size + k_entry_trailer_size);

    const auto decoded = decode(file);
    REQUIRE(decoded);
    CHECK(decoded->ns == "fx-graph");
    CHECK(decoded->key == "some key");
    CHECK_FALSE(decoded->compressed);
    CHECK(decoded->entry.created_ms == entry.created_ms);
    CHECK(decoded->entry.expires_ms == 1'800'000'000'000);
    REQUIRE(decoded->entry.value.size() == size);
    CHECK(std::equal(entry.value.bytes().begin(), entry.value.bytes().end(),
                     decoded->entry.value.bytes().begin()));

    const auto header = decode_header(file);
    REQUIRE(header);
    CHECK(header->ns == "fx-graph");
    CHECK(header->key == "some key");
    CHECK(header->value_size == size);
    CHECK(header->payload_size == size);
    CHECK(header->file_size() == file.size());
    CHECK(header->created_ms == entry.created_ms);
    CHECK(header->expires_ms == entry.expires_ms);
}

TEST_CASE("disk entry compresses a compressible value", "[store][disk_entry]") {
    const Entry entry = make_entry(text_bytes(256 * 1024));
    const auto file = encode("pgo", "k", entry, k_threshold, k_level);
    CHECK(file.size() < 256 * 1024 / 10);
    CHECK((static_cast<unsigned>(file[k_off_flags]) & 1U) == 1U);

    const auto decoded = decode(file);
    REQUIRE(decoded);
    CHECK(decoded->compressed);
    CHECK(decoded->stored_size < 256 * 1024);
    REQUIRE(decoded->entry.value.size() == 256 * 1024);
    CHECK(std::equal(entry.value.bytes().begin(), entry.value.bytes().end(),
                     decoded->entry.value.bytes().begin()));

    const auto header = decode_header(file);
    REQUIRE(header);
    CHECK(header->compressed());
    CHECK(header->value_size == 256 * 1024);
    CHECK(header->file_size() == file.size());
}

TEST_CASE("disk entry stores incompressible or small values raw", "[store][disk_entry]") {
    SECTION("random 256 KiB") {
        const Entry entry = make_entry(random_bytes(256 * 1024, 7));
        const auto file = encode("pgo", "k", entry, k_threshold, k_level);
        CHECK(file.size() == k_entry_header_size + 3 + 1 + 256 * 1024 + k_entry_trailer_size);
        const auto decoded = decode(file);
        REQUIRE(decoded);
        CHECK_FALSE(decoded->compressed);
    }
    SECTION("compressible but under the threshold") {
        const Entry entry = make_entry(text_bytes(4095));
        const auto file = encode("pgo", "k", entry, k_threshold, k_level);
        CHECK(file.size() == k_entry_header_size + 3 + 1 + 4095 + k_entry_trailer_size);
    }
}

TEST_CASE("disk entry decoded from a Blob shares its buffer", "[store][disk_entry]") {
    const Entry entry = make_entry(random_bytes(1000));
    const Blob file = Blob::adopt(encode("pgo", "k", entry, k_threshold, k_level));
    const auto decoded = decode(file);
    REQUIRE(decoded);
    CHECK(decoded->entry.value.shares_buffer_with(file));
    CHECK(decoded->entry.value.bytes().data() == file.bytes().data() + k_entry_header_size + 4);
}

TEST_CASE("a BlobBuilder's bytes become the Blob it finishes", "[store][disk_entry]") {
    BlobBuilder builder(8);
    REQUIRE(builder.bytes().size() == 8);
    std::memcpy(builder.bytes().data(), "abcdefgh", 8);
    const std::byte* filled = builder.bytes().data();
    const Blob blob = std::move(builder).finish(5);
    CHECK(blob.text() == "abcde");
    CHECK(blob.bytes().data() == filled); // no copy
    CHECK(builder.bytes().empty());
    CHECK(BlobBuilder(4).finish(9).size() == 4); // never past its size
}

TEST_CASE("disk entry rejects any flipped byte", "[store][disk_entry]") {
    const bool compressed = GENERATE(false, true);
    const Entry entry = make_entry(compressed ? text_bytes(8192) : random_bytes(300));
    const auto good = encode("autotune", "key-1", entry, k_threshold, k_level);
    REQUIRE(decode(good));
    REQUIRE(decode(good)->compressed == compressed);
    for (std::size_t i = 0; i < good.size(); ++i) {
        auto bad = good;
        bad[i] ^= std::byte{0x20};
        const auto decoded = decode(bad);
        INFO("flipped byte " << i << " of " << good.size());
        REQUIRE_FALSE(decoded);
        // Bytes that no structural check looks at fail the checksum.
        const bool structural =
            i < k_off_created || (i >= k_off_value_length && i < k_entry_header_size);
        if (!structural) {
            CHECK_THAT(decoded.error(), Catch::Contains("checksum"));
        }
    }
}

TEST_CASE("disk entry rejects truncated and extended files", "[store][disk_entry]") {
    const auto good =
        encode("autotune", "key-1", make_entry(random_bytes(500)), k_threshold, k_level);
    const std::size_t cut = GENERATE(0U, 1U, 4U, 20U, 42U, 43U, 50U, 300U, 555U);
    REQUIRE(cut < good.size());
    const auto truncated = std::span<const std::byte>(good).first(cut);
    CHECK_FALSE(decode(truncated));
    CHECK_FALSE(decode(std::span<const std::byte>(good).first(good.size() - 1)));

    auto extended = good;
    extended.push_back(std::byte{0});
    CHECK_FALSE(decode(extended));
}

TEST_CASE("disk entry rejects bad magic, version and flags", "[store][disk_entry]") {
    auto file = encode("pgo", "k", make_entry("value"), k_threshold, k_level);
    SECTION("magic") {
        file[0] = std::byte{'X'};
        reseal(file);
        CHECK_THAT(reason_of(file), Catch::Contains("magic"));
        CHECK_FALSE(decode_header(file));
    }
    SECTION("version") {
        set_le(file, k_off_version, 2, 2);
        reseal(file);
        CHECK_THAT(reason_of(file), Catch::Contains("version 2"));
        CHECK_FALSE(decode_header(file));
    }
    SECTION("unknown flag") {
        set_le(file, k_off_flags, 0x8000, 2);
        reseal(file);
        CHECK_THAT(reason_of(file), Catch::Contains("flags"));
    }
    SECTION("not a zstd frame") {
        set_le(file, k_off_flags, 1, 2);
        reseal(file);
        CHECK_FALSE(decode(file));
    }
}

TEST_CASE("disk entry rejects huge length claims without allocating", "[store][disk_entry]") {
    const auto good = encode("pgo", "k", make_entry(random_bytes(100)), k_threshold, k_level);
    constexpr std::uint64_t k_huge = 1ULL << 60;
    auto bad = good;
    SECTION("payload length") {
        set_le(bad, k_off_payload_length, k_huge, 8);
    }
    SECTION("value length") {
        set_le(bad, k_off_value_length, k_huge, 8);
    }
    SECTION("both lengths, raw") {
        set_le(bad, k_off_value_length, k_huge, 8);
        set_le(bad, k_off_payload_length, k_huge, 8);
    }
    SECTION("value length of a compressed payload") {
        set_le(bad, k_off_flags, 1, 2);
        set_le(bad, k_off_value_length, k_huge, 8);
    }
    SECTION("key length") {
        set_le(bad, k_off_key_length, 65535, 2);
    }
    reseal(bad);
    pt2cache::tests::reset_largest_allocation();
    const auto decoded = decode(bad);
    const std::size_t largest = pt2cache::tests::largest_allocation();
    REQUIRE_FALSE(decoded);
    CHECK_THAT(decoded.error(), Catch::Contains("length") || Catch::Contains("truncated"));
    // Only the reason string was allocated.
    CHECK(largest < 1024);
}

TEST_CASE("disk entry decompression is bounded by the declared length", "[store][disk_entry]") {
    auto file = encode("pgo", "k", make_entry(text_bytes(64 * 1024)), k_threshold, k_level);
    REQUIRE(decode(file)->compressed);
    // Claim fewer bytes than the frame holds: the frame's own content size
    // disagrees and nothing larger than the claim is produced.
    set_le(file, k_off_value_length, 1000, 8);
    reseal(file);
    pt2cache::tests::reset_largest_allocation();
    const auto decoded = decode(file);
    REQUIRE_FALSE(decoded);
    CHECK(pt2cache::tests::largest_allocation() < 1024);
}

TEST_CASE("disk entry header needs only the first bytes", "[store][disk_entry]") {
    const std::string key(3000, 'k');
    const auto file =
        encode("fx-graph", key, make_entry(random_bytes(100'000)), k_threshold, k_level);
    const std::size_t head = k_entry_header_size + 8 + key.size();
    const auto header = decode_header(std::span<const std::byte>(file).first(head));
    REQUIRE(header);
    CHECK(header->key == key);
    CHECK(header->ns == "fx-graph");
    CHECK(header->head_size() == head);
    CHECK(header->file_size() == file.size());
    CHECK_FALSE(decode_header(std::span<const std::byte>(file).first(head - 1)));
    CHECK_FALSE(decode_header(std::span<const std::byte>(file).first(10)));
}

TEST_CASE("entry_hash is XXH3-128 of namespace, NUL and key, one shot or streamed",
          "[store][disk_entry]") {
    // File names and small-store keys depend on it: the one-shot hash must
    // equal the streamed one that earlier versions named entries with, and a
    // thread's reused streaming states must start afresh.
    for (const std::size_t size : {0U, 1U, 15U, 16U, 128U, 129U, 240U, 241U, 1000U, 65535U}) {
        const std::string key(static_cast<std::size_t>(size), static_cast<char>('a' + size % 26));
        Xxh3Hash128 streamed;
        streamed.update(std::string_view("autotune"));
        streamed.update(std::string_view("\0", 1));
        streamed.update(key);
        CHECK(entry_hash("autotune", key) == streamed.digest());
        CHECK(entry_hash("autotune", key) != entry_hash("fx-graph", key));
    }
    Xxh3Hash64 first;
    first.update(std::string_view("abc"));
    const std::uint64_t abc = first.digest();
    {
        Xxh3Hash64 other;
        other.update(std::string_view("something else entirely"));
    } // its state becomes a spare
    Xxh3Hash64 second;
    second.update(std::string_view("abc"));
    CHECK(second.digest() == abc);
    CHECK(abc == Xxh3Hash64::of(std::as_bytes(std::span(std::string_view("abc")))));
}

TEST_CASE("shared reads: found while held, by the same size and checksum only",
          "[store][disk_entry]") {
    SharedReads reads;
    const Hash128 id{1, 2};
    std::optional<Blob> value = Blob::copy_of(std::string_view("value"));
    reads.remember(id, 100, 7, *value);
    const auto found = reads.find(id, 100, 7);
    REQUIRE(found);
    CHECK(found->shares_buffer_with(*value));
    CHECK_FALSE(reads.find(Hash128{1, 3}, 100, 7));
    CHECK_FALSE(reads.find(id, 100, 8)); // another version: forgotten
    CHECK(reads.size() == 0);
    reads.remember(id, 100, 7, *value);
    CHECK_FALSE(reads.find(id, 101, 7));
    reads.remember(id, 100, 7, *value);
    value.reset();
    CHECK(found); // `found` still holds it
    CHECK(reads.find(id, 100, 7));

    SECTION("bounded: when every remembered value is held, new ones are not remembered") {
        std::vector<Blob> held;
        for (std::uint64_t i = 0; held.size() < SharedReads::k_max_remembered; ++i) {
            held.push_back(Blob::copy_of(std::string_view("v")));
            reads.remember(Hash128{10, i}, 1, 1, held.back());
        }
        CHECK(reads.size() == SharedReads::k_max_remembered);
        const Blob extra = Blob::copy_of(std::string_view("x"));
        reads.remember(Hash128{99, 0}, 1, 1, extra);
        CHECK_FALSE(reads.find(Hash128{99, 0}, 1, 1));
        held.erase(held.begin()); // one remembered value released: room again
        reads.remember(Hash128{99, 0}, 1, 1, extra);
        CHECK(reads.find(Hash128{99, 0}, 1, 1));
        CHECK(reads.size() <= SharedReads::k_max_remembered);
    }
}
