// SPDX-License-Identifier: MIT
// Pieces shared by the message codecs (messages.cpp, archive_messages.cpp):
// frame building and the parsing of <ns:str8> <key:str16>. Internal to proto/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "proto/bytes.hpp"
#include "proto/frame.hpp"
#include "proto/messages.hpp"

#include <tl/expected.hpp>

namespace pt2cache::proto::detail {

tl::unexpected<Error> malformed(std::string_view what);
// BAD_NAMESPACE unless `ns` matches the grammar.
tl::expected<void, Error> check_namespace(std::string_view ns);
// Reads <ns:str8> <key:str16> and validates both.
tl::expected<KeyRef, Error> read_key_ref(ByteReader& reader, std::string_view what);

// VALUE_TOO_LARGE when `value` is longer than `limits.max_value`.
tl::expected<void, Error> check_value_size(std::span<const std::byte> value, const Limits& limits);

// Appends a header with a placeholder length, returns the header's offset.
std::size_t begin_frame(std::vector<std::byte>& out, Op op, std::uint8_t flags, std::uint32_t id);
// Sets the length of the frame begun at `at`: what follows its header, plus
// `extra` bytes the caller sends separately.
void finish_frame(std::vector<std::byte>& out, std::size_t at, std::size_t extra = 0);

} // namespace pt2cache::proto::detail
