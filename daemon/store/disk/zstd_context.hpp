// SPDX-License-Identifier: MIT
// The one wrapper of libzstd: compression and decompression contexts as RAII
// classes. A context is not thread-safe; keep one per thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "daemon/store/blob.hpp"

#include <tl/expected.hpp>

namespace pt2cache::daemon::store {

namespace detail {
struct ZstdCCtxDeleter {
    void operator()(void* context) const;
};
struct ZstdDCtxDeleter {
    void operator()(void* context) const;
};
} // namespace detail

class ZstdCompressor {
public:
    ZstdCompressor();

    // One zstd frame (with its content size) of `input` at `level`, or
    // std::nullopt when the frame would not be smaller than `input`.
    std::optional<std::vector<std::byte>> compress_if_smaller(std::span<const std::byte> input,
                                                              int level);

    // The thread's own compressor.
    static ZstdCompressor& for_this_thread();

private:
    std::unique_ptr<void, detail::ZstdCCtxDeleter> m_context;
};

class ZstdDecompressor {
public:
    ZstdDecompressor();

    // Decompresses the single frame `input`, which must declare its content
    // size as exactly `expected_size`; never writes or allocates more than
    // `expected_size` bytes.
    tl::expected<Blob, std::string> decompress_exact(std::span<const std::byte> input,
                                                     std::uint64_t expected_size);

    // The thread's own decompressor.
    static ZstdDecompressor& for_this_thread();

private:
    std::unique_ptr<void, detail::ZstdDCtxDeleter> m_context;
};

// The largest content size a zstd frame of `frame_size` bytes can decode to,
// for rejecting impossible length claims before allocating.
std::uint64_t zstd_max_content_size(std::uint64_t frame_size);

} // namespace pt2cache::daemon::store
