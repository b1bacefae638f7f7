// SPDX-License-Identifier: MIT
#include "proto/cxx_lookup.hpp"

#include "proto/bytes.hpp"
#include "proto/message_parts.hpp"

#include <fmt/format.h>

namespace pt2cache::proto::cxx {

namespace {

using detail::malformed;

bool has_nul(std::string_view text) {
    return text.find('\0') != std::string_view::npos;
}

} // namespace

std::optional<std::string> lookup_request_error(const LookupRequest& request) {
    const auto& key = request.common_key;
    if (key.empty() || key.size() > k_max_common_key) {
        return fmt::format("CXX_LOOKUP common key of {} bytes: it is 1 to {} bytes", key.size(),
                           k_max_common_key);
    }
    if (request.rules.size() > k_max_lookup_rules) {
        return fmt::format("CXX_LOOKUP with {} rules: at most {}", request.rules.size(),
                           k_max_lookup_rules);
    }
    for (std::size_t i = 0; i < request.rules.size(); ++i) {
        const auto& rule = request.rules[i];
        if (rule.placeholder.empty() || rule.placeholder.size() > k_max_placeholder ||
            has_nul(rule.placeholder)) {
            return fmt::format("CXX_LOOKUP rule {}: its placeholder is not 1 to {} bytes without "
                               "NUL",
                               i, k_max_placeholder);
        }
        if (rule.directory.empty() || rule.directory.size() > k_max_rule_directory ||
            rule.directory.front() != '/' || has_nul(rule.directory)) {
            return fmt::format("CXX_LOOKUP rule {}: its directory is not an absolute path of 1 to "
                               "{} bytes without NUL",
                               i, k_max_rule_directory);
        }
    }
    return std::nullopt;
}

tl::expected<LookupRequest, Error> parse_lookup(std::span<const std::byte> body) {
    ByteReader reader(body);
    LookupRequest request;
    request.common_key = std::string(reader.str16());
    const auto count = reader.integer<std::uint8_t>();
    if (!reader.ok()) {
        return malformed("CXX_LOOKUP body ends before its rules");
    }
    if (count > k_max_lookup_rules) {
        return malformed(
            fmt::format("CXX_LOOKUP with {} rules: at most {}", count, k_max_lookup_rules));
    }
    request.rules.resize(count);
    for (auto& rule : request.rules) {
        rule.placeholder = std::string(reader.str8());
        rule.directory = std::string(reader.str16());
    }
    if (!reader.ok()) {
        return malformed("CXX_LOOKUP body ends inside a rule");
    }
    if (!reader.at_end()) {
        return malformed("CXX_LOOKUP body has bytes after its last rule");
    }
    if (auto error = lookup_request_error(request)) {
        return malformed(*error);
    }
    return request;
}

void encode_lookup(std::vector<std::byte>& out, std::uint32_t id, const LookupRequest& request) {
    const auto at = detail::begin_frame(out, Op::cxx_lookup, 0, id);
    ByteWriter writer(out);
    writer.str16(request.common_key).integer(static_cast<std::uint8_t>(request.rules.size()));
    for (const auto& rule : request.rules) {
        writer.str8(rule.placeholder).str16(rule.directory);
    }
    detail::finish_frame(out, at);
}

bool lookup_response_fits(std::size_t manifest_size, std::size_t result_size) {
    constexpr std::uint64_t k_max_length = 0xFFFF'FFFFull;
    constexpr std::uint64_t k_head = 1 + 4; // outcome, manifest_size
    return manifest_size <= k_max_length - k_head &&
           result_size <= k_max_length - k_head - manifest_size;
}

void encode_lookup_response_head(std::vector<std::byte>& out, std::uint32_t id,
                                 LookupOutcome outcome, std::span<const std::byte> manifest,
                                 std::size_t result_size) {
    const auto at =
        detail::begin_frame(out, Op::cxx_lookup, static_cast<std::uint8_t>(Status::ok), id);
    ByteWriter(out)
        .integer(static_cast<std::uint8_t>(outcome))
        .integer(static_cast<std::uint32_t>(manifest.size()))
        .bytes(manifest);
    detail::finish_frame(out, at, result_size);
}

tl::expected<LookupResponse, Error> parse_lookup_response(std::span<const std::byte> body) {
    ByteReader reader(body);
    const auto outcome = reader.integer<std::uint8_t>();
    const auto manifest_size = reader.integer<std::uint32_t>();
    if (!reader.ok() || outcome > static_cast<std::uint8_t>(LookupOutcome::undecided)) {
        return malformed("CXX_LOOKUP response without a known outcome");
    }
    LookupResponse response;
    response.outcome = static_cast<LookupOutcome>(outcome);
    response.manifest = reader.bytes(manifest_size);
    if (!reader.ok()) {
        return malformed("CXX_LOOKUP response ends inside its manifest");
    }
    response.result = reader.rest();
    if (response.outcome == LookupOutcome::no_manifest && !response.manifest.empty()) {
        return malformed("CXX_LOOKUP response: a manifest with outcome NO_MANIFEST");
    }
    if (response.outcome != LookupOutcome::hit && !response.result.empty()) {
        return malformed("CXX_LOOKUP response: a result without outcome HIT");
    }
    return response;
}

} // namespace pt2cache::proto::cxx
