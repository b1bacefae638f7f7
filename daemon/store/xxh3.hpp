// SPDX-License-Identifier: MIT
// The one wrapper of xxHash: XXH3 streaming states as RAII classes (each
// thread keeps a few spare states, so a hash allocates nothing once warm),
// and one-shot hashes.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace pt2cache::daemon::store {

// A 128-bit XXH3 digest.
struct Hash128 {
    std::uint64_t high = 0;
    std::uint64_t low = 0;

    friend bool operator==(const Hash128&, const Hash128&) = default;

    // 32 lowercase hex digits, high half first (XXH128 canonical order).
    std::string hex() const;
};

// A hash table's hash of a digest: XXH3 digests are uniform, so their low
// half is a good hash as it is.
struct Hash128Low {
    std::size_t operator()(const Hash128& id) const noexcept { return id.low; }
};

namespace detail {
struct Xxh3StateDeleter {
    void operator()(void* state) const;
};
} // namespace detail

// XXH3 64-bit, fed incrementally.
class Xxh3Hash64 {
public:
    Xxh3Hash64();

    void update(std::span<const std::byte> bytes);
    void update(std::string_view text);
    std::uint64_t digest() const;

    // One-shot hash of `bytes`.
    static std::uint64_t of(std::span<const std::byte> bytes);

private:
    std::unique_ptr<void, detail::Xxh3StateDeleter> m_state;
};

// XXH3 128-bit, fed incrementally.
class Xxh3Hash128 {
public:
    Xxh3Hash128();

    void update(std::span<const std::byte> bytes);
    void update(std::string_view text);
    Hash128 digest() const;

    // One-shot hash of `bytes` (the same digest as feeding them in parts).
    static Hash128 of(std::span<const std::byte> bytes);

private:
    std::unique_ptr<void, detail::Xxh3StateDeleter> m_state;
};

} // namespace pt2cache::daemon::store
