// SPDX-License-Identifier: MIT
#include "proto/hash_files.hpp"

#include "proto/bytes.hpp"

#include <fmt/format.h>

namespace pt2cache::proto {

namespace {

tl::unexpected<Error> malformed(std::string message) {
    return tl::unexpected(Error{Status::malformed, std::move(message)});
}

} // namespace

tl::expected<std::vector<std::string_view>, Error>
parse_hash_files(std::span<const std::byte> body) {
    ByteReader reader(body);
    const auto count = reader.integer<std::uint16_t>();
    if (!reader.ok() || count == 0 || count > k_max_hash_files) {
        return malformed(fmt::format("HASH_FILES needs 1 to {} paths", k_max_hash_files));
    }
    std::vector<std::string_view> paths;
    paths.reserve(count);
    for (std::size_t i = 0; i < count; ++i) {
        const auto path = reader.str16();
        if (!reader.ok()) {
            return malformed("HASH_FILES body ends inside a path");
        }
        if (path.empty() || path.size() > k_max_hash_path || path.front() != '/' ||
            path.find('\0') != std::string_view::npos) {
            return malformed(fmt::format("HASH_FILES path {} is not an absolute path of 1 to {} "
                                         "bytes without NUL",
                                         i, k_max_hash_path));
        }
        paths.push_back(path);
    }
    if (!reader.at_end()) {
        return malformed("HASH_FILES body has bytes after its last path");
    }
    return paths;
}

std::vector<std::byte> encode_hash_files_body(std::span<const FileHash> hashes) {
    std::vector<std::byte> out;
    out.reserve(2 + hashes.size() * k_file_hash_size);
    ByteWriter writer(out);
    writer.integer(static_cast<std::uint16_t>(hashes.size()));
    for (const auto& hash : hashes) {
        const bool ok = hash.status == FileStatus::ok;
        writer.integer(static_cast<std::uint8_t>(hash.status));
        writer.integer(ok ? hash.size : std::uint64_t{0});
        writer.bytes(ok ? std::span<const std::byte>(hash.hash)
                        : std::span<const std::byte>(FileDigest{}));
    }
    return out;
}

void encode_hash_files(std::vector<std::byte>& out, std::uint32_t id,
                       std::span<const std::string> paths) {
    std::size_t length = 2;
    for (const auto& path : paths) {
        length += 2 + std::min(path.size(), std::size_t{0xFFFF});
    }
    encode_header({Op::hash_files, 0, id, static_cast<std::uint32_t>(length)}, out);
    ByteWriter writer(out);
    writer.integer(static_cast<std::uint16_t>(paths.size()));
    for (const auto& path : paths) {
        writer.str16(path);
    }
}

tl::expected<std::vector<FileHash>, Error>
parse_hash_files_response(std::span<const std::byte> body, std::size_t expected) {
    ByteReader reader(body);
    const auto count = reader.integer<std::uint16_t>();
    if (!reader.ok() || count != expected) {
        return malformed(
            fmt::format("HASH_FILES answered {} hashes for {} paths", count, expected));
    }
    std::vector<FileHash> hashes(count);
    for (auto& hash : hashes) {
        const auto status = reader.integer<std::uint8_t>();
        if (status > static_cast<std::uint8_t>(FileStatus::skipped)) {
            return malformed(fmt::format("HASH_FILES answered unknown file status {}", status));
        }
        hash.status = static_cast<FileStatus>(status);
        hash.size = reader.integer<std::uint64_t>();
        const auto digest = reader.bytes(hash.hash.size());
        if (!reader.ok()) {
            return malformed("HASH_FILES response ends inside a hash");
        }
        std::copy(digest.begin(), digest.end(), hash.hash.begin());
    }
    if (!reader.at_end()) {
        return malformed("HASH_FILES response has bytes after its last hash");
    }
    return hashes;
}

} // namespace pt2cache::proto
