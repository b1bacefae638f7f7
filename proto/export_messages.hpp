// SPDX-License-Identifier: MIT
// Bodies of SCAN, DUMP and RESTORE, the ops behind `pt2cache export` and
// `pt2cache import` (docs/protocol.md, "Export and import").
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "proto/frame.hpp"
#include "proto/messages.hpp"

#include <tl/expected.hpp>

namespace pt2cache::proto {

struct ScanRequest {
    std::string_view cursor;
    std::uint32_t limit = 1000;
    std::uint64_t since_ms = 0;               // 0: no filter
    std::vector<std::string_view> namespaces; // empty: every namespace
};

struct ScanEntry {
    std::string_view ns;
    std::string_view key;
    std::uint64_t size = 0;
    std::uint64_t created_ms = 0;
    std::uint64_t expires_ms = 0;
};

struct ScanResponse {
    std::string_view next_cursor;
    std::vector<ScanEntry> entries;
};

struct DumpResponse {
    std::uint64_t created_ms = 0;
    std::uint64_t expires_ms = 0;
    std::span<const std::byte> value;
};

struct RestoreRequest {
    KeyRef target;
    std::uint64_t created_ms = 0;
    std::uint64_t expires_ms = 0;
    bool replace = false;
    std::span<const std::byte> value;
};

// Daemon side. DUMP's request is parsed by parse_key.
tl::expected<ScanRequest, Error> parse_scan(std::span<const std::byte> body);
tl::expected<RestoreRequest, Error>
parse_restore(const Header& header, std::span<const std::byte> body, const Limits& limits);
void encode_scan_response(std::vector<std::byte>& out, std::uint32_t id,
                          const ScanResponse& response);
// Appends the response header and the fields before the value; the caller
// sends the value right after.
void encode_dump_response_head(std::vector<std::byte>& out, std::uint32_t id,
                               std::uint64_t created_ms, std::uint64_t expires_ms,
                               std::size_t value_size);

// Client side. DUMP's request is encode_key_op(out, Op::dump, ...).
void encode_scan(std::vector<std::byte>& out, std::uint32_t id, const ScanRequest& request);
// Appends the header and the fields before the value (sent by the caller).
void encode_restore_head(std::vector<std::byte>& out, std::uint32_t id,
                         const RestoreRequest& request);
tl::expected<ScanResponse, Error> parse_scan_response(std::span<const std::byte> body);
tl::expected<DumpResponse, Error> parse_dump_response(std::span<const std::byte> body);

} // namespace pt2cache::proto
