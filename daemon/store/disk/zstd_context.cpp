// SPDX-License-Identifier: MIT
#include "daemon/store/disk/zstd_context.hpp"

#include <new>

#include <fmt/format.h>
#include <zstd.h>

namespace pt2cache::daemon::store {

void detail::ZstdCCtxDeleter::operator()(void* context) const {
    ZSTD_freeCCtx(static_cast<ZSTD_CCtx*>(context));
}

void detail::ZstdDCtxDeleter::operator()(void* context) const {
    ZSTD_freeDCtx(static_cast<ZSTD_DCtx*>(context));
}

ZstdCompressor::ZstdCompressor()
    : m_context(ZSTD_createCCtx()) {
    if (!m_context) {
        throw std::bad_alloc();
    }
}

std::optional<std::vector<std::byte>>
ZstdCompressor::compress_if_smaller(std::span<const std::byte> input, int level) {
    if (input.empty()) {
        return std::nullopt;
    }
    // Compress into a buffer one byte smaller than the input: zstd fails with
    // dstSize_tooSmall exactly when the frame would not be smaller, so an
    // incompressible input costs no allocation of the full bound.
    std::vector<std::byte> out(input.size() - 1);
    auto* context = static_cast<ZSTD_CCtx*>(m_context.get());
    ZSTD_CCtx_reset(context, ZSTD_reset_session_and_parameters);
    ZSTD_CCtx_setParameter(context, ZSTD_c_compressionLevel, level);
    ZSTD_CCtx_setParameter(context, ZSTD_c_contentSizeFlag, 1);
    ZSTD_CCtx_setParameter(context, ZSTD_c_checksumFlag, 0);
    const std::size_t written =
        ZSTD_compress2(context, out.data(), out.size(), input.data(), input.size());
    if (ZSTD_isError(written) != 0U) {
        return std::nullopt;
    }
    out.resize(written);
    return out;
}

ZstdCompressor& ZstdCompressor::for_this_thread() {
    thread_local ZstdCompressor compressor;
    return compressor;
}

ZstdDecompressor::ZstdDecompressor()
    : m_context(ZSTD_createDCtx()) {
    if (!m_context) {
        throw std::bad_alloc();
    }
}

tl::expected<Blob, std::string> ZstdDecompressor::decompress_exact(std::span<const std::byte> input,
                                                                   std::uint64_t expected_size) {
    const unsigned long long declared = ZSTD_getFrameContentSize(input.data(), input.size());
    if (declared == ZSTD_CONTENTSIZE_ERROR || declared == ZSTD_CONTENTSIZE_UNKNOWN) {
        return tl::make_unexpected(std::string("zstd frame header is invalid"));
    }
    if (declared != expected_size) {
        return tl::make_unexpected(fmt::format("zstd frame declares {} bytes, entry declares {}",
                                               declared, expected_size));
    }
    const std::size_t frame_size = ZSTD_findFrameCompressedSize(input.data(), input.size());
    if (ZSTD_isError(frame_size) != 0U || frame_size != input.size()) {
        return tl::make_unexpected(std::string("zstd payload is not exactly one frame"));
    }
    if (expected_size > zstd_max_content_size(input.size())) {
        return tl::make_unexpected(std::string("zstd frame claims an impossible size"));
    }
    BlobBuilder out(static_cast<std::size_t>(expected_size));
    auto* context = static_cast<ZSTD_DCtx*>(m_context.get());
    ZSTD_DCtx_reset(context, ZSTD_reset_session_and_parameters);
    const std::size_t written = ZSTD_decompressDCtx(context, out.bytes().data(), out.bytes().size(),
                                                    input.data(), input.size());
    if (ZSTD_isError(written) != 0U) {
        return tl::make_unexpected(
            fmt::format("zstd decompression failed: {}", ZSTD_getErrorName(written)));
    }
    if (written != expected_size) {
        return tl::make_unexpected(
            fmt::format("zstd produced {} bytes, expected {}", written, expected_size));
    }
    return std::move(out).finish(written);
}

ZstdDecompressor& ZstdDecompressor::for_this_thread() {
    thread_local ZstdDecompressor decompressor;
    return decompressor;
}

std::uint64_t zstd_max_content_size(std::uint64_t frame_size) {
    // A zstd block carries at most 128 KiB and costs at least 4 bytes (a
    // 3-byte block header plus one RLE byte); the frame header costs more.
    constexpr std::uint64_t k_block_content = 128 * 1024;
    constexpr std::uint64_t k_min_block_size = 4;
    return (frame_size / k_min_block_size + 1) * k_block_content;
}

} // namespace pt2cache::daemon::store
