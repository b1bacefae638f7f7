// SPDX-License-Identifier: MIT
// Large values read from entry files, found again while a reply still holds
// them. A value too large for the memory tier is read from its file for
// every GET; without this, 40 clients fetching one 64 MiB entry (the ranks
// of one job starting together), or one MGET naming it 100 times, held 40 or
// 100 copies of it at once. A read of an entry file whose value some reply
// still holds now shares that value.
//
// Nothing is kept alive here (weak references to values read into a
// BlobBuilder, whose bytes are freed with the last Blob), and nothing needs to
// be invalidated: a value is shared only with a read of a file of the same
// size whose trailer checksum (XXH3-64 of every byte of the file) is the
// same, that is, a file holding the same bytes. The file's header was
// checked before the lookup (same namespace and key, not expired).
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>

#include "daemon/store/blob.hpp"
#include "daemon/store/xxh3.hpp"

#include <absl/container/flat_hash_map.h>

namespace pt2cache::daemon::store {

class SharedReads {
public:
    // Smaller values are read every time: the memory tier holds them, and a
    // copy costs little. (The value's size, not the file's: a compressed
    // file of a few KiB may hold 64 MiB.)
    static constexpr std::uint64_t k_min_value_size = 1 << 20;
    // Values remembered at most; beyond it, the ones no longer held are
    // forgotten, and if all are, nothing more is remembered until some are.
    static constexpr std::size_t k_max_remembered = 256;

    // The value of the entry file `id` of `file_size` bytes whose checksum
    // is `checksum`, when a read of that file is still held somewhere.
    std::optional<Blob> find(const Hash128& id, std::uint64_t file_size, std::uint64_t checksum);

    // Remembers `value`, just read and verified from such a file.
    void remember(const Hash128& id, std::uint64_t file_size, std::uint64_t checksum,
                  const Blob& value);

    // How many values are remembered (held or not); for tests.
    std::size_t size() const;

private:
    struct Remembered {
        std::uint64_t file_size = 0;
        std::uint64_t checksum = 0;
        Blob::Weak value;
    };

    mutable std::mutex m_mutex;
    absl::flat_hash_map<Hash128, Remembered, Hash128Low> m_remembered;
};

} // namespace pt2cache::daemon::store
