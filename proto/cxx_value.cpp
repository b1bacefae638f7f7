// SPDX-License-Identifier: MIT
#include "proto/cxx_value.hpp"

#include <algorithm>

#include "proto/bytes.hpp"

namespace pt2cache::proto::cxx {

void encode_result_header(const ResultHeader& header, std::vector<std::byte>& out) {
    ByteWriter writer(out);
    writer.bytes(k_result_magic)
        .integer(k_format_version)
        .integer(std::uint8_t{0})
        .integer(std::uint16_t{0})
        .integer(header.build_ms)
        .integer(header.mode)
        .integer(header.stdout_size)
        .integer(header.stderr_size)
        .integer(header.output_size)
        .integer(header.compressed_size);
}

std::optional<ResultHeader> parse_result_header(std::span<const std::byte> value) {
    ByteReader reader(value);
    const auto magic = reader.bytes(k_result_magic.size());
    const auto version = reader.integer<std::uint8_t>();
    reader.integer<std::uint8_t>();
    reader.integer<std::uint16_t>();
    ResultHeader header;
    header.build_ms = reader.integer<std::uint64_t>();
    header.mode = reader.integer<std::uint32_t>();
    header.stdout_size = reader.integer<std::uint64_t>();
    header.stderr_size = reader.integer<std::uint64_t>();
    header.output_size = reader.integer<std::uint64_t>();
    header.compressed_size = reader.integer<std::uint64_t>();
    if (!reader.ok() || !std::equal(magic.begin(), magic.end(), k_result_magic.begin()) ||
        version != k_format_version || reader.remaining() < k_checksum_size ||
        header.compressed_size != reader.remaining() - k_checksum_size) {
        return std::nullopt;
    }
    return header;
}

} // namespace pt2cache::proto::cxx
