// SPDX-License-Identifier: MIT
#include "client/cxx/entries.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <unistd.h>

#include "proto/bytes.hpp"
#include "proto/cxx_value.hpp"

#include <xxhash.h>
#include <zstd.h>

namespace pt2cache::client::cxx {

namespace wire = proto::cxx;

namespace {

constexpr int k_zstd_level = 1;
constexpr std::size_t k_write_chunk = 1u << 20;

XXH3_state_t* state_of(void* state) {
    return static_cast<XXH3_state_t*>(state);
}

Digest canonical(XXH128_hash_t hash) {
    XXH128_canonical_t canonical;
    XXH128_canonicalFromHash(&canonical, hash);
    Digest out;
    std::memcpy(out.data(), canonical.digest, out.size());
    return out;
}

struct ZstdCStream {
    ZSTD_CCtx* ctx = ZSTD_createCCtx();
    ~ZstdCStream() { ZSTD_freeCCtx(ctx); }
};

struct ZstdDStream {
    ZSTD_DCtx* ctx = ZSTD_createDCtx();
    ~ZstdDStream() { ZSTD_freeDCtx(ctx); }
};

bool write_fd(int fd, const char* data, std::size_t size) {
    while (size > 0) {
        const auto n = ::write(fd, data, size);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return false;
        }
        data += n;
        size -= static_cast<std::size_t>(n);
    }
    return true;
}

} // namespace

Digest digest_of(std::span<const std::byte> bytes) {
    return canonical(XXH3_128bits(bytes.data(), bytes.size()));
}

std::string hex(std::span<const std::byte> bytes) {
    static constexpr char k_digits[] = "0123456789abcdef";
    std::string out;
    out.reserve(bytes.size() * 2);
    for (const auto b : bytes) {
        const auto v = std::to_integer<unsigned>(b);
        out += k_digits[v >> 4];
        out += k_digits[v & 15];
    }
    return out;
}

KeyHasher::KeyHasher()
    : m_state(XXH3_createState()) {
    XXH3_128bits_reset(state_of(m_state));
}

KeyHasher::~KeyHasher() {
    XXH3_freeState(state_of(m_state));
}

void KeyHasher::field(std::string_view name, std::string_view value) {
    field(name, proto::as_bytes(value));
}

void KeyHasher::field(std::string_view name, std::span<const std::byte> value) {
    XXH3_128bits_update(state_of(m_state), name.data(), name.size());
    const char nul = '\0';
    XXH3_128bits_update(state_of(m_state), &nul, 1);
    const std::uint64_t length = value.size();
    XXH3_128bits_update(state_of(m_state), &length, sizeof length);
    XXH3_128bits_update(state_of(m_state), value.data(), value.size());
}

std::string KeyHasher::hex_digest() const {
    const auto digest = canonical(XXH3_128bits_digest(state_of(m_state)));
    return hex(digest);
}

// <manifest> ::= "PCXM" <version:u8=1> <reserved:u8[3]> <count:u32> <variant>{count} <checksum:16>
// <variant>  ::= <inputs:u32> <input>{inputs}
// <input>    ::= <path:str16> <status:u8> <size:u64> <hash:u8[16]>
std::vector<std::byte> Manifest::encode() const {
    std::vector<std::byte> out;
    proto::ByteWriter writer(out);
    writer.bytes(wire::k_manifest_magic)
        .integer(wire::k_format_version)
        .integer(std::uint8_t{0})
        .integer(std::uint16_t{0})
        .integer(static_cast<std::uint32_t>(variants.size()));
    for (const auto& variant : variants) {
        writer.integer(static_cast<std::uint32_t>(variant.size()));
        for (const auto& input : variant) {
            writer.str16(input.path)
                .integer(static_cast<std::uint8_t>(input.status))
                .integer(input.size)
                .bytes(input.hash);
        }
    }
    const auto checksum = digest_of(out);
    writer.bytes(checksum);
    return out;
}

std::optional<Manifest> Manifest::decode(std::span<const std::byte> value) {
    if (value.size() < 12 + wire::k_checksum_size) {
        return std::nullopt;
    }
    const auto body = value.first(value.size() - wire::k_checksum_size);
    const auto checksum = digest_of(body);
    if (!std::equal(checksum.begin(), checksum.end(), value.end() - wire::k_checksum_size)) {
        return std::nullopt;
    }
    proto::ByteReader reader(body);
    const auto magic = reader.bytes(4);
    const auto version = reader.integer<std::uint8_t>();
    reader.integer<std::uint8_t>();
    reader.integer<std::uint16_t>();
    const auto count = reader.integer<std::uint32_t>();
    if (!reader.ok() || !std::equal(magic.begin(), magic.end(), wire::k_manifest_magic.begin()) ||
        version != wire::k_format_version || count > k_max_variants) {
        return std::nullopt;
    }
    Manifest manifest;
    for (std::uint32_t v = 0; v < count; ++v) {
        const auto inputs = reader.integer<std::uint32_t>();
        // Each input takes at least 27 bytes: reject counts the body cannot hold.
        if (!reader.ok() || inputs > reader.remaining() / 27) {
            return std::nullopt;
        }
        Variant variant(inputs);
        for (auto& input : variant) {
            input.path = std::string(reader.str16());
            const auto status = reader.integer<std::uint8_t>();
            input.size = reader.integer<std::uint64_t>();
            const auto hash = reader.bytes(input.hash.size());
            if (!reader.ok() || status > static_cast<std::uint8_t>(FileStatus::skipped)) {
                return std::nullopt;
            }
            input.status = static_cast<FileStatus>(status);
            std::copy(hash.begin(), hash.end(), input.hash.begin());
        }
        manifest.variants.push_back(std::move(variant));
    }
    if (!reader.at_end()) {
        return std::nullopt;
    }
    return manifest;
}

void Manifest::add(Variant variant) {
    std::erase(variants, variant);
    variants.insert(variants.begin(), std::move(variant));
    if (variants.size() > k_max_variants) {
        variants.resize(k_max_variants);
    }
}

std::string result_key(std::string_view common_key, const Variant& variant) {
    KeyHasher hasher;
    hasher.field("common", common_key);
    for (const auto& input : variant) {
        hasher.field("path", input.path);
        const auto status = static_cast<char>(input.status);
        hasher.field("status", std::string_view(&status, 1));
        hasher.field("hash", input.hash);
    }
    return std::string(wire::k_result_prefix) + hasher.hex_digest();
}

std::vector<std::byte> encode_result(const BuildRecord& record, std::span<const std::byte> output) {
    const std::size_t raw = record.out.size() + record.err.size() + output.size();
    std::vector<std::byte> value(wire::k_result_header_size + ZSTD_compressBound(raw) +
                                 wire::k_checksum_size);
    ZstdCStream stream;
    ZSTD_CCtx_setParameter(stream.ctx, ZSTD_c_compressionLevel, k_zstd_level);
    ZSTD_CCtx_setPledgedSrcSize(stream.ctx, raw);
    ZSTD_outBuffer out{value.data() + wire::k_result_header_size,
                       value.size() - wire::k_result_header_size - wire::k_checksum_size, 0};
    const std::span<const std::byte> parts[] = {proto::as_bytes(record.out),
                                                proto::as_bytes(record.err), output};
    for (std::size_t p = 0; p < 3; ++p) {
        ZSTD_inBuffer in{parts[p].data(), parts[p].size(), 0};
        const auto mode = p == 2 ? ZSTD_e_end : ZSTD_e_continue;
        for (;;) {
            const auto left = ZSTD_compressStream2(stream.ctx, &out, &in, mode);
            if (ZSTD_isError(left)) {
                return {};
            }
            if (mode == ZSTD_e_end ? left == 0 : in.pos == in.size) {
                break;
            }
        }
    }
    wire::ResultHeader header;
    header.build_ms = record.build_ms;
    header.mode = record.mode;
    header.stdout_size = record.out.size();
    header.stderr_size = record.err.size();
    header.output_size = output.size();
    header.compressed_size = out.pos;
    std::vector<std::byte> head;
    wire::encode_result_header(header, head);
    std::copy(head.begin(), head.end(), value.begin());
    const std::size_t body = wire::k_result_header_size + out.pos;
    const auto checksum = digest_of(std::span(value).first(body));
    std::copy(checksum.begin(), checksum.end(), value.begin() + static_cast<std::ptrdiff_t>(body));
    value.resize(body + wire::k_checksum_size);
    return value;
}

tl::expected<BuildRecord, std::string> decode_result(std::span<const std::byte> value,
                                                     int output_fd) {
    const auto header = wire::parse_result_header(value);
    if (!header) {
        return tl::unexpected(std::string("not a pt2cache-cxx result (bad magic or sizes)"));
    }
    const auto body = value.first(value.size() - wire::k_checksum_size);
    const auto checksum = digest_of(body);
    if (!std::equal(checksum.begin(), checksum.end(), body.end())) {
        return tl::unexpected(std::string("result checksum mismatch"));
    }
    BuildRecord record;
    record.build_ms = header->build_ms;
    record.mode = header->mode;
    if (header->stdout_size > (64u << 20) || header->stderr_size > (64u << 20)) {
        return tl::unexpected(std::string("result with implausible stdout/stderr sizes"));
    }
    record.out.resize(header->stdout_size);
    record.err.resize(header->stderr_size);
    ZstdDStream stream;
    ZSTD_inBuffer in{body.data() + wire::k_result_header_size, header->compressed_size, 0};
    const std::uint64_t total = header->stdout_size + header->stderr_size + header->output_size;
    // Uninitialised and no larger than the output: a small hit touches few pages.
    const auto chunk_size = static_cast<std::size_t>(
        std::min<std::uint64_t>(k_write_chunk, std::max<std::uint64_t>(header->output_size, 1)));
    const std::unique_ptr<char[]> chunk(new char[chunk_size]);
    std::uint64_t produced = 0;
    std::size_t last = 1;
    while (produced < total || last != 0) {
        char* target = chunk.get();
        std::size_t room = chunk_size;
        // stdout and stderr are decompressed straight into their strings.
        if (produced < header->stdout_size) {
            target = record.out.data() + produced;
            room = header->stdout_size - produced;
        } else if (produced < header->stdout_size + header->stderr_size) {
            target = record.err.data() + (produced - header->stdout_size);
            room = header->stdout_size + header->stderr_size - produced;
        } else {
            room = static_cast<std::size_t>(std::min<std::uint64_t>(room, total - produced));
            if (room == 0) {
                room = 1; // only to let zstd report the end of the frame
            }
        }
        ZSTD_outBuffer out{target, room, 0};
        last = ZSTD_decompressStream(stream.ctx, &out, &in);
        if (ZSTD_isError(last)) {
            return tl::unexpected(std::string("zstd: ") + ZSTD_getErrorName(last));
        }
        if (produced >= header->stdout_size + header->stderr_size && out.pos > 0) {
            if (produced + out.pos > total) {
                return tl::unexpected(std::string("result longer than its header says"));
            }
            if (!write_fd(output_fd, target, out.pos)) {
                return tl::unexpected(std::string("writing the output: ") + std::strerror(errno));
            }
        }
        produced += out.pos;
        if (out.pos == 0 && in.pos == in.size && last != 0) {
            return tl::unexpected(std::string("result truncated"));
        }
        if (produced == total && in.pos == in.size && last == 0) {
            break;
        }
    }
    if (produced != total) {
        return tl::unexpected(std::string("result shorter than its header says"));
    }
    return record;
}

} // namespace pt2cache::client::cxx
