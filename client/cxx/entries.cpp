// SPDX-License-Identifier: MIT
#include "client/cxx/entries.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <unistd.h>

#include "client/cxx/process.hpp"
#include "proto/bytes.hpp"
#include "proto/cxx_value.hpp"
#include "proto/hex.hpp"

#include <zstd.h>

namespace pt2cache::client::cxx {

namespace wire = proto::cxx;

namespace {

constexpr int k_zstd_level = 1;
constexpr std::size_t k_write_chunk = 1u << 20;

struct ZstdCStream {
    ZSTD_CCtx* ctx = ZSTD_createCCtx();
    ~ZstdCStream() { ZSTD_freeCCtx(ctx); }
};

struct ZstdDStream {
    ZSTD_DCtx* ctx = ZSTD_createDCtx();
    ~ZstdDStream() { ZSTD_freeDCtx(ctx); }
};

} // namespace

std::string hex(std::span<const std::byte> bytes) {
    return proto::to_hex(proto::as_text(bytes));
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
            if (const int error = write_all(output_fd, std::string_view(target, out.pos))) {
                return tl::unexpected(std::string("writing the output: ") + std::strerror(error));
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
