// SPDX-License-Identifier: MIT
#include "proto/cxx_manifest.hpp"

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "proto/bytes.hpp"
#include "proto/cxx_value.hpp"
#include "proto/hex.hpp"

#include <xxhash.h>

namespace pt2cache::proto::cxx {

namespace {

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

// Each input takes at least this many bytes: path length, status, size, hash.
constexpr std::size_t k_min_input = 2 + 1 + 8 + 16;

} // namespace

Digest digest_of(std::span<const std::byte> bytes) {
    return canonical(XXH3_128bits(bytes.data(), bytes.size()));
}

KeyHasher::KeyHasher()
    : m_state(XXH3_createState()) {
    XXH3_128bits_reset(state_of(m_state));
}

KeyHasher::~KeyHasher() {
    XXH3_freeState(state_of(m_state));
}

void KeyHasher::field(std::string_view name, std::string_view value) {
    field(name, as_bytes(value));
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
    return to_hex(as_text(digest));
}

// <manifest> ::= "PCXM" <version:u8=1> <reserved:u8[3]> <count:u32> <variant>{count} <checksum:16>
// <variant>  ::= <inputs:u32> <input>{inputs}
// <input>    ::= <path:str16> <status:u8> <size:u64> <hash:u8[16]>
std::vector<std::byte> Manifest::encode() const {
    std::vector<std::byte> out;
    ByteWriter writer(out);
    writer.bytes(k_manifest_magic)
        .integer(k_format_version)
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
    if (value.size() < 12 + k_checksum_size) {
        return std::nullopt;
    }
    const auto body = value.first(value.size() - k_checksum_size);
    const auto checksum = digest_of(body);
    if (!std::equal(checksum.begin(), checksum.end(), value.end() - k_checksum_size)) {
        return std::nullopt;
    }
    ByteReader reader(body);
    const auto magic = reader.bytes(4);
    const auto version = reader.integer<std::uint8_t>();
    reader.integer<std::uint8_t>();
    reader.integer<std::uint16_t>();
    const auto count = reader.integer<std::uint32_t>();
    if (!reader.ok() || !std::equal(magic.begin(), magic.end(), k_manifest_magic.begin()) ||
        version != k_format_version || count > k_max_variants) {
        return std::nullopt;
    }
    Manifest manifest;
    for (std::uint32_t v = 0; v < count; ++v) {
        const auto inputs = reader.integer<std::uint32_t>();
        // Reject counts the body cannot hold before allocating for them.
        if (!reader.ok() || inputs > reader.remaining() / k_min_input) {
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
    return std::string(k_result_prefix) + hasher.hex_digest();
}

std::optional<std::string> expand_placeholders_within(std::string_view text,
                                                      std::span<const PlaceholderRule> rules,
                                                      std::size_t limit) {
    if (text.size() > limit) {
        return std::nullopt;
    }
    std::string out(text);
    std::string next;
    for (const auto& rule : rules) {
        const std::string_view placeholder = rule.placeholder;
        if (placeholder.empty()) {
            continue;
        }
        std::size_t at = out.find(placeholder);
        if (at == std::string::npos) {
            continue;
        }
        // One pass: the text between matches, then the directory. A match
        // is looked for after the previous one's placeholder, so never in a
        // directory this rule put in (a later rule does expand those).
        next.clear();
        std::size_t from = 0;
        while (at != std::string::npos) {
            if (next.size() + (at - from) + rule.directory.size() > limit) {
                return std::nullopt;
            }
            next.append(out, from, at - from);
            next += rule.directory;
            from = at + placeholder.size();
            at = out.find(placeholder, from);
        }
        if (next.size() + (out.size() - from) > limit) {
            return std::nullopt;
        }
        next.append(out, from);
        out.swap(next);
    }
    return out;
}

std::string expand_placeholders(std::string_view text, std::span<const PlaceholderRule> rules) {
    return *expand_placeholders_within(text, rules, std::string::npos);
}

Digest pin_digest(std::string_view directory) {
    // Domain-separated from file contents, although a pin's path never names
    // a file.
    std::string text("pt2cache-cxx directory pin\n");
    text += directory;
    return digest_of(as_bytes(text));
}

InputRecord pin_record(const PlaceholderRule& rule) {
    return InputRecord{.path = rule.placeholder,
                       .status = FileStatus::ok,
                       .size = rule.directory.size(),
                       .hash = pin_digest(rule.directory)};
}

std::optional<FileHash> pin_state(std::string_view path, std::span<const PlaceholderRule> rules) {
    if (!path.starts_with(k_placeholder_mark) || !path.ends_with('@') ||
        path.find('/') != std::string_view::npos) {
        return std::nullopt;
    }
    for (const auto& rule : rules) {
        if (rule.placeholder == path) {
            return FileHash{.status = FileStatus::ok,
                            .size = rule.directory.size(),
                            .hash = pin_digest(rule.directory)};
        }
    }
    return FileHash{.status = FileStatus::unreadable};
}

ManifestPaths manifest_paths(const Manifest& manifest) {
    ManifestPaths out;
    std::unordered_map<std::string_view, std::size_t> seen;
    out.index.reserve(manifest.variants.size());
    for (const auto& variant : manifest.variants) {
        auto& index = out.index.emplace_back();
        index.reserve(variant.size());
        for (const auto& input : variant) {
            const auto [it, fresh] = seen.emplace(input.path, out.paths.size());
            if (fresh) {
                out.paths.push_back(input.path);
            }
            index.push_back(it->second);
        }
    }
    return out;
}

bool variant_matches(const Manifest& manifest, const ManifestPaths& paths, std::size_t v,
                     std::span<const FileHash> now) {
    const auto& variant = manifest.variants[v];
    for (std::size_t i = 0; i < variant.size(); ++i) {
        const auto& input = variant[i];
        const auto& hash = now[paths.index[v][i]];
        if (hash.status != input.status ||
            (input.status == FileStatus::ok && hash.hash != input.hash)) {
            return false;
        }
    }
    return true;
}

} // namespace pt2cache::proto::cxx
