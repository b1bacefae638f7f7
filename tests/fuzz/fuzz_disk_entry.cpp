// SPDX-License-Identifier: MIT
// Fuzz target: the disk tier's entry files (daemon/store/disk/disk_entry.*).
// Invariants: an entry built from the input decodes to itself, raw or
// compressed, and one changed byte makes it undecodable; arbitrary bytes
// decode only when their checksum matches, and then re-encode (raw) to the
// very same file; decode_header agrees with decode.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "daemon/store/disk/disk_entry.hpp"
#include "daemon/store/xxh3.hpp"
#include "tests/fuzz/fuzz_check.hpp"

namespace {

using namespace pt2cache::daemon::store;
using pt2cache::tests::fuzz::FuzzInput;
using Bytes = std::span<const std::byte>;

constexpr auto k_never = std::numeric_limits<std::uint64_t>::max();

bool same(Bytes a, Bytes b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
}

std::uint64_t trailer_of(Bytes file) {
    std::uint64_t value = 0;
    for (std::size_t i = 0; i < 8; ++i) {
        value |= std::uint64_t(std::to_integer<std::uint8_t>(file[file.size() - 8 + i])) << (8 * i);
    }
    return value;
}

// Arbitrary bytes as an entry file.
void check_decode(Bytes file) {
    const auto decoded = decode(file);
    const auto header = decode_header(file.first(std::min(file.size(), k_entry_max_head_size)));
    if (!decoded) {
        FUZZ_CHECK(!decoded.error().empty());
        return;
    }
    // Nothing decodes without a matching checksum.
    FUZZ_CHECK(file.size() >= k_entry_header_size + k_entry_trailer_size);
    FUZZ_CHECK(Xxh3Hash64::of(file.first(file.size() - 8)) == trailer_of(file));
    FUZZ_CHECK(decoded->stored_size + decoded->ns.size() + decoded->key.size() +
                   k_entry_header_size + k_entry_trailer_size ==
               file.size());

    FUZZ_CHECK(header);
    FUZZ_CHECK(header->ns == decoded->ns && header->key == decoded->key);
    FUZZ_CHECK(header->compressed() == decoded->compressed);
    FUZZ_CHECK(header->value_size == decoded->entry.value.size());
    FUZZ_CHECK(header->file_size() == file.size());
    FUZZ_CHECK(header->created_ms == decoded->entry.created_ms);
    FUZZ_CHECK(header->expires_ms == decoded->entry.expires_ms);

    // Stored raw again it is the same file; a compressed one decodes to the
    // same value once stored raw.
    const auto raw = encode(decoded->ns, decoded->key, decoded->entry, k_never, 1);
    if (!decoded->compressed) {
        FUZZ_CHECK(same(raw, file));
    }
    const auto again = decode(raw);
    FUZZ_CHECK(again);
    FUZZ_CHECK(same(again->entry.value.bytes(), decoded->entry.value.bytes()));
}

// An entry built from the input.
void check_round_trip(FuzzInput input) {
    const auto ns_size = 1 + input.integer<std::uint8_t>() % 40;
    const auto key_size = input.integer<std::uint16_t>() % 300;
    const auto created = input.integer<std::int64_t>();
    const auto expires = input.integer<std::int64_t>();
    const auto threshold = input.integer<std::uint8_t>(); // 255: never compress
    const auto flip_at = input.integer<std::uint32_t>();
    const std::string ns(input.text(ns_size));
    const std::string key(input.text(key_size));
    if (ns.empty()) {
        return;
    }
    Entry entry;
    entry.value = Blob::copy_of(input.rest());
    entry.created_ms = created;
    entry.expires_ms = expires;

    const auto file = encode(ns, key, entry, threshold == 255 ? k_never : threshold, 1);
    const auto parts = encode_parts(ns, key, entry, threshold == 255 ? k_never : threshold, 1);
    FUZZ_CHECK(parts.size() == file.size());
    const auto decoded = decode(file);
    FUZZ_CHECK(decoded);
    FUZZ_CHECK(decoded->ns == ns && decoded->key == key);
    FUZZ_CHECK(decoded->entry.created_ms == created && decoded->entry.expires_ms == expires);
    FUZZ_CHECK(same(decoded->entry.value.bytes(), entry.value.bytes()));
    FUZZ_CHECK(decoded->compressed == parts.compressed());
    FUZZ_CHECK(!decoded->compressed || decoded->stored_size < entry.value.size());

    // Sharing the file's buffer gives the same entry.
    const auto shared = decode(Blob::copy_of(Bytes(file)));
    FUZZ_CHECK(shared && same(shared->entry.value.bytes(), entry.value.bytes()));

    // One changed byte anywhere: never the stored entry.
    auto damaged = file;
    damaged[flip_at % damaged.size()] ^= std::byte{0x5A};
    FUZZ_CHECK(!decode(damaged));
    // A truncated or extended file neither.
    FUZZ_CHECK(!decode(Bytes(file).first(file.size() - 1 - flip_at % file.size())));
    damaged = file;
    damaged.push_back(std::byte{0});
    FUZZ_CHECK(!decode(damaged));
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    check_decode(Bytes(reinterpret_cast<const std::byte*>(data), size));
    check_round_trip(FuzzInput(data, size));
    return 0;
}
