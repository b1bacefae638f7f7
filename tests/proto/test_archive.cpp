// SPDX-License-Identifier: MIT
#include <cstring>
#include <string>
#include <variant>
#include <vector>

#include "proto/archive.hpp"
#include "proto/bytes.hpp"
#include "proto/export_messages.hpp"
#include "proto/frame.hpp"

#include <catch2/catch.hpp>
#include <xxhash.h>
#include <zstd.h>

using namespace pt2cache::proto;
using pt2cache::proto::archive::Damage;
using pt2cache::proto::archive::Entry;
using pt2cache::proto::archive::Reader;
using pt2cache::proto::archive::Summary;
using pt2cache::proto::archive::Writer;

namespace {

struct Owned {
    std::string ns;
    std::string key;
    std::uint64_t created_ms = 0;
    std::uint64_t expires_ms = 0;
    std::string value;

    friend bool operator==(const Owned&, const Owned&) = default;
};

std::vector<Owned> sample() {
    std::vector<Owned> entries;
    entries.push_back({"fx-graph", "k1", 1700000000000, 0, "hello"});
    entries.push_back({"autotune", std::string(1024, 'k'), 5, 99, ""});
    std::string big;
    for (std::uint32_t i = 0; i < 300'000; ++i) {
        big.push_back(static_cast<char>((i * 7919) % 251));
    }
    entries.push_back({"pgo", "big", 7, 0, big});
    entries.push_back({"redis", std::string("\0\xff", 2), 8, 0, std::string(200'000, 'z')});
    return entries;
}

std::vector<std::byte> write(const std::vector<Owned>& entries) {
    Writer writer(3);
    std::vector<std::byte> out;
    writer.begin(out);
    for (const auto& e : entries) {
        REQUIRE(writer.add({e.ns, e.key, e.created_ms, e.expires_ms, as_bytes(e.value)}, out));
    }
    auto summary = writer.finish(out);
    REQUIRE(summary);
    CHECK(summary->entries == entries.size());
    return out;
}

struct ReadResult {
    std::vector<Owned> entries;
    std::optional<Summary> summary;
    std::optional<Damage> damage;
};

// Reads `archive` fed `chunk` bytes at a time.
ReadResult read(std::span<const std::byte> archive, std::size_t chunk,
                std::uint64_t max_value = pt2cache::proto::archive::k_default_max_value) {
    Reader reader(max_value);
    ReadResult result;
    std::size_t fed = 0;
    for (int guard = 0; guard < 10'000'000; ++guard) {
        auto next = reader.next();
        if (std::holds_alternative<Reader::NeedInput>(next)) {
            if (fed == archive.size()) {
                reader.end_of_input();
                continue;
            }
            const auto n = std::min(chunk, archive.size() - fed);
            reader.feed(archive.subspan(fed, n));
            fed += n;
        } else if (auto* entry = std::get_if<Entry>(&next)) {
            result.entries.push_back({std::string(entry->ns), std::string(entry->key),
                                      entry->created_ms, entry->expires_ms,
                                      std::string(as_text(entry->value))});
        } else if (auto* summary = std::get_if<Summary>(&next)) {
            result.summary = *summary;
            return result;
        } else {
            result.damage = std::get<Damage>(next);
            return result;
        }
    }
    FAIL("the reader did not finish");
    return result;
}

} // namespace

TEST_CASE("an archive round-trips whatever the chunk size", "[proto][archive]") {
    const auto entries = sample();
    const auto archive = write(entries);
    for (std::size_t chunk : {std::size_t{1}, std::size_t{7}, std::size_t{4096}, archive.size()}) {
        const auto result = read(archive, chunk);
        INFO("chunk " << chunk);
        REQUIRE_FALSE(result.damage);
        REQUIRE(result.summary);
        CHECK(result.summary->entries == entries.size());
        CHECK(result.entries == entries);
    }
}

TEST_CASE("an empty archive is valid", "[proto][archive]") {
    const auto result = read(write({}), 3);
    REQUIRE(result.summary);
    CHECK(result.summary->entries == 0);
}

TEST_CASE("damage stops the reader and names the record", "[proto][archive]") {
    const auto entries = sample();
    const auto archive = write(entries);

    SECTION("every truncation is detected") {
        for (std::size_t size = 0; size < archive.size(); size += 1 + size / 3) {
            const auto result = read(std::span(archive).first(size), 4096);
            INFO("size " << size);
            REQUIRE(result.damage);
            CHECK_FALSE(result.summary);
            CHECK(result.entries.size() <= entries.size());
            for (std::size_t i = 0; i < result.entries.size(); ++i) {
                CHECK(result.entries[i] == entries[i]);
            }
        }
        const auto result = read(std::span(archive).first(archive.size() - 1), 4096);
        REQUIRE(result.damage);
        CHECK(result.damage->reason.find("truncated") != std::string::npos);
    }

    SECTION("a flipped byte anywhere is detected") {
        for (std::size_t at = 0; at < archive.size(); at += 1 + at / 5) {
            auto damaged = archive;
            damaged[at] ^= std::byte{0x40};
            const auto result = read(damaged, 4096);
            INFO("flipped byte " << at);
            REQUIRE(result.damage);
            CHECK_FALSE(result.damage->describe().empty());
            for (std::size_t i = 0; i < result.entries.size(); ++i) {
                CHECK(result.entries[i] == entries[i]);
            }
        }
    }

    SECTION("bytes after the end") {
        auto longer = archive;
        longer.push_back(std::byte{0});
        const auto result = read(longer, 4096);
        REQUIRE(result.damage);
        CHECK(result.entries == entries);
    }

    SECTION("a record over the reader's limit") {
        const auto result = read(archive, 4096, 1000);
        REQUIRE(result.damage);
        CHECK(result.damage->record == 3);
        CHECK(result.entries.size() == 2);
        CHECK(result.damage->describe().find("record 3") != std::string::npos);
    }

    SECTION("not an archive") {
        const std::string text = "hello, world";
        const auto result = read(as_bytes(text), 4096);
        REQUIRE(result.damage);
        CHECK(result.damage->record == 0);
        CHECK(result.damage->describe().find("bad magic") != std::string::npos);
    }
}

TEST_CASE("the writer refuses entries outside the grammar", "[proto][archive]") {
    Writer writer;
    std::vector<std::byte> out;
    writer.begin(out);
    const auto size = out.size();
    CHECK_FALSE(writer.add({"Bad NS", "k", 0, 0, {}}, out));
    CHECK_FALSE(writer.add({"ns", "", 0, 0, {}}, out));
    CHECK_FALSE(writer.add({"ns", std::string(1025, 'k'), 0, 0, {}}, out));
    CHECK(out.size() == size);
}

TEST_CASE("SCAN, DUMP and RESTORE bodies round-trip", "[proto][export]") {
    std::vector<std::byte> frame;
    ScanRequest scan;
    scan.cursor = "fx-graph/00ab";
    scan.limit = 50'000;
    scan.since_ms = 123;
    scan.namespaces = {"fx-graph", "pgo"};
    encode_scan(frame, 3, scan);
    auto parsed = parse_scan(std::span(frame).subspan(k_header_size));
    REQUIRE(parsed);
    CHECK(parsed->cursor == scan.cursor);
    CHECK(parsed->limit == k_max_list_limit);
    CHECK(parsed->since_ms == 123);
    CHECK(parsed->namespaces == scan.namespaces);

    scan.namespaces = {"Bad"};
    frame.clear();
    encode_scan(frame, 3, scan);
    auto bad = parse_scan(std::span(frame).subspan(k_header_size));
    REQUIRE_FALSE(bad);
    CHECK(bad.error().status == Status::bad_namespace);

    ScanResponse response;
    response.next_cursor = "pgo/ff";
    response.entries.push_back({"pgo", "k", 10, 20, 30});
    frame.clear();
    encode_scan_response(frame, 3, response);
    auto back = parse_scan_response(std::span(frame).subspan(k_header_size));
    REQUIRE(back);
    CHECK(back->next_cursor == "pgo/ff");
    REQUIRE(back->entries.size() == 1);
    CHECK(back->entries[0].key == "k");
    CHECK(back->entries[0].expires_ms == 30);

    const std::string value = "value";
    RestoreRequest restore{{"autotune", "key"}, 11, 22, true, as_bytes(value)};
    frame.clear();
    encode_restore_head(frame, 9, restore);
    frame.insert(frame.end(), restore.value.begin(), restore.value.end());
    auto header = decode_request_header(std::span(frame).first<k_header_size>(), Limits{});
    REQUIRE(header);
    REQUIRE(header->length == frame.size() - k_header_size);
    auto restored = parse_restore(*header, std::span(frame).subspan(k_header_size), Limits{});
    REQUIRE(restored);
    CHECK(restored->replace);
    CHECK(restored->created_ms == 11);
    CHECK(restored->expires_ms == 22);
    CHECK(as_text(restored->value) == value);
    auto small = parse_restore(*header, std::span(frame).subspan(k_header_size), Limits{4});
    REQUIRE_FALSE(small);
    CHECK(small.error().status == Status::value_too_large);

    frame.clear();
    encode_dump_response_head(frame, 4, 5, 6, value.size());
    frame.insert(frame.end(), restore.value.begin(), restore.value.end());
    auto dump = parse_dump_response(std::span(frame).subspan(k_header_size));
    REQUIRE(dump);
    CHECK(dump->created_ms == 5);
    CHECK(dump->expires_ms == 6);
    CHECK(as_text(dump->value) == value);
}

TEST_CASE("the stream matches the example in docs/archive.md", "[proto][archive]") {
    Writer writer;
    std::vector<std::byte> out;
    writer.begin(out);
    REQUIRE(writer.add({"pgo", "k", 1, 0, as_bytes(std::string_view("v"))}, out));
    REQUIRE(writer.finish(out));
    // The 8-byte header, not compressed.
    const std::vector<std::byte> header(out.begin(), out.begin() + 8);
    CHECK(as_text(header) == std::string_view("P2CA\x01\x00\x01\x00", 8));
    // The stream, decompressed.
    std::vector<std::byte> stream(4096);
    const auto size = ZSTD_decompress(stream.data(), stream.size(), out.data() + 8, out.size() - 8);
    REQUIRE_FALSE(ZSTD_isError(size));
    stream.resize(size);
    const std::string record = std::string("\x01\x03pgo\x01\x00k", 8) +
                               std::string("\x01\0\0\0\0\0\0\0", 8) + std::string(8, '\0') +
                               std::string("\x01\0\0\0\0\0\0\0", 8) + "v";
    REQUIRE(stream.size() == record.size() + 8 + 33);
    CHECK(as_text(stream).substr(0, record.size()) == record);
    const auto checksum = XXH3_64bits(record.data(), record.size());
    CHECK(std::memcmp(stream.data() + record.size(), &checksum, 8) == 0);
    const auto end = as_text(stream).substr(record.size() + 8);
    CHECK(end.substr(0, 17) == std::string("\x02\x01\0\0\0\0\0\0\0\x01\0\0\0\0\0\0\0", 17));
    const auto stream_checksum = XXH3_64bits(stream.data(), record.size() + 8);
    CHECK(std::memcmp(end.data() + 17, &stream_checksum, 8) == 0);
}
