// SPDX-License-Identifier: MIT
// Fuzz target: archives (proto/archive.*, docs/archive.md).
// Invariants: arbitrary bytes, fed in arbitrary chunks, give verified entries
// within the grammar and then a Summary that counts them, or a Damage; never
// a crash or an unbounded allocation. Entries built from the input round-trip
// whatever the chunking. An archive cut short yields a prefix of the entries
// written; one with a changed byte yields only entries that were written
// (zstd may repeat earlier output, so intact copies of earlier records can
// come before the end record reveals the damage), and never completes with
// others.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "proto/archive.hpp"
#include "proto/bytes.hpp"
#include "proto/frame.hpp"
#include "proto/messages.hpp"
#include "tests/fuzz/fuzz_check.hpp"

namespace {

namespace archive = pt2cache::proto::archive;
using pt2cache::tests::fuzz::FuzzInput;
using Bytes = std::span<const std::byte>;

// Values up to this size: enough for every path, small enough for the fuzzer.
constexpr std::uint64_t k_max_value = 1 << 20;

struct Owned {
    std::string ns;
    std::string key;
    std::uint64_t created_ms = 0;
    std::uint64_t expires_ms = 0;
    std::string value;
    friend bool operator==(const Owned&, const Owned&) = default;
};

struct Outcome {
    std::vector<Owned> entries;
    bool complete = false; // a Summary came
};

// Entries one read collects before it stops: damaged compressed bytes can
// make zstd repeat a record many times over.
constexpr std::size_t k_max_entries = 1 << 14;

// Reads `bytes`, fed in chunks of 1 + (chunk % 4096) bytes.
Outcome read_all(Bytes bytes, std::uint16_t chunk) {
    archive::Reader reader(k_max_value);
    Outcome outcome;
    const std::size_t step = 1 + chunk % 4096;
    std::size_t fed = 0;
    std::uint64_t value_bytes = 0;
    // A turn that asks for input is followed by input or its end, so such
    // turns are bounded; entries are bounded by k_max_entries.
    std::size_t input_turns = 0;
    while (input_turns < 4 * bytes.size() + 1000) {
        auto next = reader.next();
        if (std::holds_alternative<archive::Reader::NeedInput>(next)) {
            ++input_turns;
            if (fed == bytes.size()) {
                reader.end_of_input();
                continue;
            }
            const auto n = std::min(step, bytes.size() - fed);
            reader.feed(bytes.subspan(fed, n));
            fed += n;
        } else if (auto* entry = std::get_if<archive::Entry>(&next)) {
            FUZZ_CHECK(pt2cache::proto::valid_namespace(entry->ns));
            FUZZ_CHECK(!entry->key.empty() && entry->key.size() <= pt2cache::proto::k_max_key);
            FUZZ_CHECK(entry->value.size() <= k_max_value);
            value_bytes += entry->value.size();
            outcome.entries.push_back({std::string(entry->ns), std::string(entry->key),
                                       entry->created_ms, entry->expires_ms,
                                       std::string(pt2cache::proto::as_text(entry->value))});
            if (outcome.entries.size() == k_max_entries) {
                return outcome; // not complete
            }
        } else if (auto* summary = std::get_if<archive::Summary>(&next)) {
            FUZZ_CHECK(summary->entries == outcome.entries.size());
            FUZZ_CHECK(summary->value_bytes == value_bytes);
            FUZZ_CHECK(reader.archive_offset() == bytes.size());
            outcome.complete = true;
            // Results are sticky.
            FUZZ_CHECK(std::holds_alternative<archive::Summary>(reader.next()));
            return outcome;
        } else {
            const auto& damage = std::get<archive::Damage>(next);
            FUZZ_CHECK(!damage.reason.empty() && !damage.describe().empty());
            FUZZ_CHECK(damage.archive_offset <= bytes.size());
            FUZZ_CHECK(std::holds_alternative<archive::Damage>(reader.next()));
            return outcome;
        }
    }
    FUZZ_CHECK(!"the reader neither finished nor asked for input");
    return outcome;
}

// Entries read from an archive cut short are a prefix of those written.
void check_prefix(const Outcome& outcome, const std::vector<Owned>& written) {
    FUZZ_CHECK(outcome.entries.size() <= written.size());
    for (std::size_t i = 0; i < outcome.entries.size(); ++i) {
        FUZZ_CHECK(outcome.entries[i] == written[i]);
    }
}

// Entries read from a damaged archive were all written.
void check_written(const Outcome& outcome, const std::vector<Owned>& written) {
    for (const auto& entry : outcome.entries) {
        FUZZ_CHECK(std::find(written.begin(), written.end(), entry) != written.end());
    }
}

void check_round_trip(FuzzInput input) {
    const auto count = input.integer<std::uint8_t>() % 8;
    const auto chunk = input.integer<std::uint16_t>();
    const auto flip_at = input.integer<std::uint32_t>();
    const auto flip = static_cast<std::byte>(1 + input.integer<std::uint8_t>() % 255);
    const auto cut = input.integer<std::uint32_t>();
    std::vector<Owned> written;
    for (int i = 0; i < count; ++i) {
        Owned entry;
        const std::size_t ns_size = 1 + input.integer<std::uint8_t>() % 32;
        for (std::size_t j = 0; j < ns_size; ++j) {
            const auto c = input.integer<std::uint8_t>() % 37;
            entry.ns.push_back(c < 26 ? char('a' + c) : c < 36 ? char('0' + c - 26) : '-');
        }
        entry.key = std::string(input.text(1 + input.integer<std::uint16_t>() % 64));
        if (entry.key.empty()) {
            entry.key = "k";
        }
        entry.created_ms = input.integer<std::uint64_t>();
        entry.expires_ms = input.integer<std::uint64_t>();
        const auto repeat = input.integer<std::uint8_t>();
        const auto piece = input.bytes(input.integer<std::uint8_t>());
        std::vector<char> value;
        for (int r = 0; r <= repeat % 16; ++r) {
            for (const auto b : piece) {
                value.push_back(static_cast<char>(b));
            }
        }
        entry.value.assign(value.begin(), value.end());
        written.push_back(std::move(entry));
    }
    archive::Writer writer(1 + chunk % 5);
    std::vector<std::byte> bytes;
    writer.begin(bytes);
    for (const auto& e : written) {
        FUZZ_CHECK(writer.add(
            {e.ns, e.key, e.created_ms, e.expires_ms, pt2cache::proto::as_bytes(e.value)}, bytes));
    }
    const auto summary = writer.finish(bytes);
    FUZZ_CHECK(summary && summary->entries == written.size());

    const auto whole = read_all(bytes, chunk);
    FUZZ_CHECK(whole.complete);
    FUZZ_CHECK(whole.entries == written);

    auto damaged = bytes;
    damaged[flip_at % damaged.size()] ^= flip;
    const auto after_flip = read_all(damaged, chunk);
    // A change that zstd ignores (a frame header bit that does not matter)
    // may leave the archive whole; it never yields other entries.
    check_written(after_flip, written);
    if (after_flip.complete) {
        FUZZ_CHECK(after_flip.entries == written);
    }

    const auto short_read = read_all(Bytes(bytes).first(cut % bytes.size()), chunk);
    FUZZ_CHECK(!short_read.complete);
    check_prefix(short_read, written);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const Bytes bytes(reinterpret_cast<const std::byte*>(data), size);
    read_all(bytes, size > 0 ? std::to_integer<std::uint16_t>(bytes[size / 2]) : 0);
    check_round_trip(FuzzInput(data, size));
    return 0;
}
