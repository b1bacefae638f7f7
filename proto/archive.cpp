// SPDX-License-Identifier: MIT
#include "proto/archive.hpp"

#include <algorithm>
#include <cstring>
#include <optional>

#include "proto/bytes.hpp"
#include "proto/frame.hpp"
#include "proto/messages.hpp"

#include <fmt/format.h>
#include <xxhash.h>
#include <zstd.h>

namespace pt2cache::proto::archive {

namespace {

// Bytes of an entry record before the namespace, between namespace and key,
// and after the key up to the value; the checksum after the value.
constexpr std::size_t k_fixed_after_key = 8 + 8 + 8;
constexpr std::size_t k_checksum_size = 8;
constexpr std::size_t k_end_size = 1 + 8 + 8 + 8 + k_checksum_size;
// The least the reader asks zstd for at a time.
constexpr std::size_t k_min_chunk = 64 * 1024;

struct XxhDeleter {
    void operator()(XXH3_state_t* state) const { XXH3_freeState(state); }
};
using XxhState = std::unique_ptr<XXH3_state_t, XxhDeleter>;

XxhState new_hash() {
    XxhState state(XXH3_createState());
    if (!state) {
        throw std::bad_alloc();
    }
    XXH3_64bits_reset(state.get());
    return state;
}

void hash_update(XXH3_state_t* state, std::span<const std::byte> bytes) {
    XXH3_64bits_update(state, bytes.data(), bytes.size());
}

std::uint64_t hash_of(std::span<const std::byte> bytes) {
    return XXH3_64bits(bytes.data(), bytes.size());
}

struct CctxDeleter {
    void operator()(ZSTD_CCtx* context) const { ZSTD_freeCCtx(context); }
};
struct DctxDeleter {
    void operator()(ZSTD_DCtx* context) const { ZSTD_freeDCtx(context); }
};

std::uint64_t load_u64(const std::byte* p) {
    std::uint64_t value = 0;
    std::memcpy(&value, p, sizeof value);
    return value;
}

std::optional<std::string> entry_problem(std::string_view ns, std::string_view key) {
    if (!valid_namespace(ns)) {
        return fmt::format("invalid namespace {:?}: expected [a-z0-9-]{{1,{}}}", ns.substr(0, 64),
                           k_max_namespace);
    }
    if (key.empty() || key.size() > k_max_key) {
        return fmt::format("key of {} bytes: keys are 1 to {} bytes", key.size(), k_max_key);
    }
    return std::nullopt;
}

} // namespace

std::string Damage::describe() const {
    if (record == 0) {
        return fmt::format("archive header: {}", reason);
    }
    return fmt::format("record {} (byte {} of the uncompressed stream, {} archive bytes read): {}",
                       record, stream_offset, archive_offset, reason);
}

// ---- Writer ----

struct Writer::State {
    std::unique_ptr<ZSTD_CCtx, CctxDeleter> cctx;
    XxhState stream = new_hash();
    XxhState record = new_hash();
    Summary summary;
    std::vector<std::byte> head;

    tl::expected<void, std::string> compress(std::span<const std::byte> bytes,
                                             std::vector<std::byte>& out, ZSTD_EndDirective mode) {
        ZSTD_inBuffer input{bytes.data(), bytes.size(), 0};
        const std::size_t step = ZSTD_CStreamOutSize();
        for (;;) {
            const std::size_t old = out.size();
            out.resize(old + step);
            ZSTD_outBuffer output{out.data() + old, step, 0};
            const std::size_t left = ZSTD_compressStream2(cctx.get(), &output, &input, mode);
            out.resize(old + output.pos);
            if (ZSTD_isError(left)) {
                return tl::make_unexpected(fmt::format("zstd: {}", ZSTD_getErrorName(left)));
            }
            const bool done = mode == ZSTD_e_continue ? input.pos == input.size : left == 0;
            if (done) {
                return {};
            }
        }
    }
};

Writer::Writer(int level)
    : m_state(std::make_unique<State>()) {
    m_state->cctx.reset(ZSTD_createCCtx());
    if (!m_state->cctx) {
        throw std::bad_alloc();
    }
    ZSTD_CCtx_setParameter(m_state->cctx.get(), ZSTD_c_compressionLevel, level);
    ZSTD_CCtx_setParameter(m_state->cctx.get(), ZSTD_c_checksumFlag, 1);
}

Writer::~Writer() = default;

void Writer::begin(std::vector<std::byte>& out) {
    ByteWriter(out).bytes(k_magic).integer(k_version).integer(k_flag_zstd);
}

tl::expected<void, std::string> Writer::add(const Entry& entry, std::vector<std::byte>& out) {
    if (auto problem = entry_problem(entry.ns, entry.key)) {
        return tl::make_unexpected(std::move(*problem));
    }
    auto& state = *m_state;
    state.head.clear();
    ByteWriter(state.head)
        .integer(k_entry_record)
        .str8(entry.ns)
        .str16(entry.key)
        .integer(entry.created_ms)
        .integer(entry.expires_ms)
        .integer(static_cast<std::uint64_t>(entry.value.size()));
    XXH3_64bits_reset(state.record.get());
    hash_update(state.record.get(), state.head);
    hash_update(state.record.get(), entry.value);
    std::array<std::byte, k_checksum_size> checksum{};
    const std::uint64_t digest = XXH3_64bits_digest(state.record.get());
    std::memcpy(checksum.data(), &digest, sizeof digest);
    for (const auto part : {std::span<const std::byte>(state.head), entry.value,
                            std::span<const std::byte>(checksum)}) {
        hash_update(state.stream.get(), part);
        if (auto ok = state.compress(part, out, ZSTD_e_continue); !ok) {
            return ok;
        }
    }
    state.summary.entries++;
    state.summary.value_bytes += entry.value.size();
    return {};
}

tl::expected<Summary, std::string> Writer::finish(std::vector<std::byte>& out) {
    auto& state = *m_state;
    std::vector<std::byte> end;
    ByteWriter(end)
        .integer(k_end_record)
        .integer(state.summary.entries)
        .integer(state.summary.value_bytes)
        .integer(static_cast<std::uint64_t>(XXH3_64bits_digest(state.stream.get())));
    ByteWriter(end).integer(static_cast<std::uint64_t>(hash_of(end)));
    if (auto ok = state.compress(end, out, ZSTD_e_end); !ok) {
        return tl::make_unexpected(std::move(ok.error()));
    }
    return state.summary;
}

// ---- Reader ----

struct Reader::State {
    enum class Fill { ok, need_input, damaged };

    std::uint64_t max_value = k_default_max_value;
    std::unique_ptr<ZSTD_DCtx, DctxDeleter> dctx;
    XxhState stream = new_hash();

    std::vector<std::byte> in; // archive bytes; [in_pos, end) not consumed
    std::size_t in_pos = 0;
    bool input_ended = false;
    std::uint64_t consumed = 0; // archive bytes consumed

    bool header_done = false;
    std::vector<std::byte> buf; // uncompressed; [buf_pos, buf_end) not consumed
    std::size_t buf_pos = 0;
    std::size_t buf_end = 0;
    std::uint64_t stream_offset = 0; // of buf_pos
    bool frame_done = false;         // zstd is between frames
    bool flush_pending = false;      // zstd may hold output without more input

    std::uint64_t records = 0; // records read whole
    Summary seen;
    bool end_seen = false;
    Summary end_summary;
    std::optional<Result> final;

    Result damage(std::string reason) {
        final = Damage{header_done ? records + 1 : 0, stream_offset, consumed, std::move(reason)};
        return *final;
    }

    // Makes `need` uncompressed bytes available at buf_pos.
    Fill fill(std::size_t need, std::string& error) {
        while (buf_end - buf_pos < need) {
            const bool have_input = in_pos < in.size();
            if (!have_input && !flush_pending) {
                return Fill::need_input;
            }
            const std::size_t room = std::max(need - (buf_end - buf_pos), k_min_chunk);
            if (buf.size() < buf_end + room) {
                buf.resize(buf_end + room);
            }
            ZSTD_inBuffer input{in.data() + in_pos, in.size() - in_pos, 0};
            ZSTD_outBuffer output{buf.data() + buf_end, room, 0};
            const std::size_t ret = ZSTD_decompressStream(dctx.get(), &output, &input);
            if (ZSTD_isError(ret)) {
                error = fmt::format("zstd: {}", ZSTD_getErrorName(ret));
                return Fill::damaged;
            }
            in_pos += input.pos;
            consumed += input.pos;
            buf_end += output.pos;
            frame_done = ret == 0;
            flush_pending = output.pos == output.size;
            if (input.pos == 0 && output.pos == 0) {
                flush_pending = false;
            }
        }
        return Fill::ok;
    }

    void compact() {
        if (buf_pos > 0) {
            std::memmove(buf.data(), buf.data() + buf_pos, buf_end - buf_pos);
            buf_end -= buf_pos;
            buf_pos = 0;
        }
        if (in_pos > 0) {
            in.erase(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(in_pos));
            in_pos = 0;
        }
        // A huge record's buffer is not kept for the small ones after it
        // (only between records: a record being read keeps its room).
        if (buf.size() > 4 * k_min_chunk && buf_end == 0) {
            buf.resize(k_min_chunk);
            buf.shrink_to_fit();
        }
    }

    Result truncated() {
        if (!frame_done) {
            return damage("truncated: the archive ends inside a zstd frame");
        }
        return damage("truncated: the archive ends before its end record");
    }

    // A Fill other than ok, as a result.
    Result stalled(Fill fill, std::string& error) {
        if (fill == Fill::damaged) {
            return damage(std::move(error));
        }
        if (input_ended) {
            return truncated();
        }
        return NeedInput{};
    }

    Result read_header() {
        if (in.size() - in_pos < k_header_size) {
            if (input_ended) {
                return damage(fmt::format("not a pt2cache archive: {} bytes, shorter than the "
                                          "{}-byte header",
                                          consumed + in.size() - in_pos, k_header_size));
            }
            return NeedInput{};
        }
        ByteReader reader(std::span<const std::byte>(in).subspan(in_pos, k_header_size));
        const auto magic = reader.bytes(4);
        const auto version = reader.integer<std::uint16_t>();
        const auto flags = reader.integer<std::uint16_t>();
        in_pos += k_header_size;
        consumed += k_header_size;
        if (!std::equal(magic.begin(), magic.end(), k_magic.begin())) {
            return damage("not a pt2cache archive (bad magic; expected \"P2CA\")");
        }
        if (version != k_version) {
            return damage(fmt::format("archive version {}; this pt2cache reads version {}", version,
                                      k_version));
        }
        if (flags != k_flag_zstd) {
            return damage(fmt::format("unknown archive flags 0x{:04x}", flags));
        }
        header_done = true;
        return NeedInput{}; // not returned: the caller goes on
    }

    Result read_entry() {
        std::string error;
        auto status = fill(2, error);
        if (status != Fill::ok) {
            return stalled(status, error);
        }
        const std::byte* p = buf.data() + buf_pos;
        const std::size_t ns_size = std::to_integer<std::uint8_t>(p[1]);
        const std::size_t key_at = 2 + ns_size;
        if (status = fill(key_at + 2, error); status != Fill::ok) {
            return stalled(status, error);
        }
        p = buf.data() + buf_pos;
        std::uint16_t key_size = 0;
        std::memcpy(&key_size, p + key_at, sizeof key_size);
        const std::size_t head = key_at + 2 + key_size + k_fixed_after_key;
        if (status = fill(head, error); status != Fill::ok) {
            return stalled(status, error);
        }
        p = buf.data() + buf_pos;
        const auto ns = std::string_view(reinterpret_cast<const char*>(p + 2), ns_size);
        const auto key = std::string_view(reinterpret_cast<const char*>(p + key_at + 2), key_size);
        if (auto problem = entry_problem(ns, key)) {
            return damage(std::move(*problem));
        }
        const std::uint64_t value_size = load_u64(p + head - 8);
        if (value_size > max_value) {
            return damage(fmt::format("a value of {} bytes, over the limit of {} bytes", value_size,
                                      max_value));
        }
        const std::size_t total = head + static_cast<std::size_t>(value_size) + k_checksum_size;
        if (status = fill(total, error); status != Fill::ok) {
            return stalled(status, error);
        }
        p = buf.data() + buf_pos;
        const auto record = std::span(p, total);
        if (hash_of(record.first(total - k_checksum_size)) !=
            load_u64(p + total - k_checksum_size)) {
            return damage("checksum mismatch");
        }
        Entry entry;
        entry.ns = std::string_view(reinterpret_cast<const char*>(p + 2), ns_size);
        entry.key = std::string_view(reinterpret_cast<const char*>(p + key_at + 2), key_size);
        entry.created_ms = load_u64(p + head - 24);
        entry.expires_ms = load_u64(p + head - 16);
        entry.value = record.subspan(head, static_cast<std::size_t>(value_size));
        hash_update(stream.get(), record);
        seen.entries++;
        seen.value_bytes += value_size;
        records++;
        buf_pos += total;
        stream_offset += total;
        return entry;
    }

    Result read_end() {
        std::string error;
        if (auto status = fill(k_end_size, error); status != Fill::ok) {
            return stalled(status, error);
        }
        const std::byte* p = buf.data() + buf_pos;
        if (hash_of(std::span(p, k_end_size - k_checksum_size)) !=
            load_u64(p + k_end_size - k_checksum_size)) {
            return damage("checksum mismatch in the end record");
        }
        const Summary said{load_u64(p + 1), load_u64(p + 9)};
        if (said.entries != seen.entries || said.value_bytes != seen.value_bytes) {
            return damage(fmt::format("the end record counts {} entries of {} bytes; the archive "
                                      "held {} entries of {} bytes",
                                      said.entries, said.value_bytes, seen.entries,
                                      seen.value_bytes));
        }
        if (load_u64(p + 17) != XXH3_64bits_digest(stream.get())) {
            return damage("the stream checksum in the end record does not match the records");
        }
        records++;
        buf_pos += k_end_size;
        stream_offset += k_end_size;
        end_seen = true;
        end_summary = said;
        return NeedInput{}; // not returned: the caller goes on
    }

    // After the end record: nothing may follow.
    Result read_after_end() {
        std::string error;
        const auto status = fill(1, error);
        if (status == Fill::ok) {
            return damage("data after the end record");
        }
        if (status == Fill::damaged) {
            return damage(std::move(error));
        }
        if (!input_ended) {
            return NeedInput{};
        }
        if (!frame_done) {
            return truncated();
        }
        final = end_summary;
        return *final;
    }

    Result next() {
        if (final) {
            return *final;
        }
        compact();
        if (!header_done) {
            auto header = read_header();
            if (!header_done) {
                return header;
            }
        }
        for (;;) {
            if (end_seen) {
                return read_after_end();
            }
            std::string error;
            if (auto status = fill(1, error); status != Fill::ok) {
                return stalled(status, error);
            }
            const auto type = std::to_integer<std::uint8_t>(buf[buf_pos]);
            if (type == k_entry_record) {
                return read_entry();
            }
            if (type != k_end_record) {
                return damage(fmt::format("unknown record type 0x{:02x}", type));
            }
            auto end = read_end();
            if (!end_seen) {
                return end;
            }
        }
    }
};

Reader::Reader(std::uint64_t max_value)
    : m_state(std::make_unique<State>()) {
    m_state->max_value = max_value;
    m_state->dctx.reset(ZSTD_createDCtx());
    if (!m_state->dctx) {
        throw std::bad_alloc();
    }
}

Reader::~Reader() = default;

void Reader::feed(std::span<const std::byte> bytes) {
    m_state->in.insert(m_state->in.end(), bytes.begin(), bytes.end());
}

void Reader::end_of_input() {
    m_state->input_ended = true;
}

Reader::Result Reader::next() {
    return m_state->next();
}

std::uint64_t Reader::archive_offset() const {
    return m_state->consumed;
}

} // namespace pt2cache::proto::archive
