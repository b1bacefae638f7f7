// SPDX-License-Identifier: MIT
// Archives of cache entries (docs/archive.md): a streaming encoder and
// decoder, bytes in and bytes out, no I/O. Memory is bounded by one record
// plus zstd's window, whatever the archive's size.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <tl/expected.hpp>

namespace pt2cache::proto::archive {

inline constexpr std::array<std::byte, 4> k_magic = {std::byte{'P'}, std::byte{'2'}, std::byte{'C'},
                                                     std::byte{'A'}};
inline constexpr std::uint16_t k_version = 1;
inline constexpr std::uint16_t k_flag_zstd = 1;
inline constexpr std::size_t k_header_size = 8;
inline constexpr std::uint8_t k_entry_record = 0x01;
inline constexpr std::uint8_t k_end_record = 0x02;
// The reader's default bound on one record's value.
inline constexpr std::uint64_t k_default_max_value = 4ull << 30;

// One entry; the views belong to the caller (Writer) or to the Reader (valid
// until its next call).
struct Entry {
    std::string_view ns;
    std::string_view key;
    std::uint64_t created_ms = 0;
    std::uint64_t expires_ms = 0; // 0: never
    std::span<const std::byte> value;
};

// What an end record says (and a Writer wrote).
struct Summary {
    std::uint64_t entries = 0;
    std::uint64_t value_bytes = 0;
};

// Where and why a Reader stopped.
struct Damage {
    std::uint64_t record = 0;         // 1-based number of the damaged record
    std::uint64_t stream_offset = 0;  // its offset in the uncompressed stream
    std::uint64_t archive_offset = 0; // archive bytes the reader had consumed
    std::string reason;

    // "record 3 (byte 1234 of the uncompressed stream, 567 archive bytes
    // read): checksum mismatch"
    std::string describe() const;
};

class Writer {
public:
    // `level`: the zstd compression level.
    explicit Writer(int level = 3);
    ~Writer();
    Writer(const Writer&) = delete;
    Writer& operator=(const Writer&) = delete;

    // Appends the archive header; call once, first.
    void begin(std::vector<std::byte>& out);
    // Appends (compressed) one entry record; zstd may keep some of it until
    // a later call. Fails, appending nothing, when the entry breaks the
    // grammar (namespace, key length); fails on a zstd error.
    tl::expected<void, std::string> add(const Entry& entry, std::vector<std::byte>& out);
    // Appends the end record and closes the zstd frame.
    tl::expected<Summary, std::string> finish(std::vector<std::byte>& out);

private:
    struct State;
    std::unique_ptr<State> m_state;
};

class Reader {
public:
    struct NeedInput {};
    // An Entry, the archive's Summary once it is complete and verified, a
    // request for more input, or the first Damage.
    using Result = std::variant<NeedInput, Entry, Summary, Damage>;

    // Records whose value is larger than `max_value` are damage.
    explicit Reader(std::uint64_t max_value = k_default_max_value);
    ~Reader();
    Reader(const Reader&) = delete;
    Reader& operator=(const Reader&) = delete;

    // The next bytes of the archive (copied). Feed when next() asks.
    void feed(std::span<const std::byte> bytes);
    // There is no more input: next() then reports truncation instead of
    // asking for more.
    void end_of_input();
    // Decodes as far as the next result. After a Summary or a Damage, every
    // call answers the same.
    Result next();

    // Archive bytes consumed so far.
    std::uint64_t archive_offset() const;

private:
    struct State;
    std::unique_ptr<State> m_state;
};

} // namespace pt2cache::proto::archive
