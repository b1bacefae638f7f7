// SPDX-License-Identifier: MIT
//
// `pt2cache cxx --explain`: every input of the key, and why a lookup hits or
// misses.
#include <unordered_map>

#include "client/cxx/launcher.hpp"
#include "proto/cxx_value.hpp"

#include <fmt/format.h>

namespace pt2cache::client::cxx {

namespace wire = proto::cxx;

namespace {

std::string status_text(const FileHash& hash) {
    switch (hash.status) {
    case FileStatus::ok:
        return hex(hash.hash);
    case FileStatus::not_found:
        return "(absent)";
    case FileStatus::not_regular:
        return "(not a regular file)";
    case FileStatus::too_large:
        return "(too large)";
    case FileStatus::unreadable:
        return "(unreadable)";
    case FileStatus::skipped:
        return "(skipped)";
    }
    return "(?)";
}

} // namespace

std::string Launcher::explain() {
    std::string out;
    out += fmt::format("compiler: {} (resolved: {})\n", m_compiler.path, m_compiler.realpath);
    out += fmt::format("invocation: {}, source {}, output {}\n", kind_name(m_invocation.kind),
                       m_invocation.source_path, m_invocation.output_path);
    if (!prepare()) {
        out += fmt::format("not cached: {}\n", m_why);
        return out;
    }
    out += "path rewrites:\n";
    for (const auto& rule : m_rewriter.rules()) {
        out += fmt::format("  {} -> {}\n", rule.directory, rule.placeholder);
    }
    out += "common key inputs (name, XXH3-128 of the field, value):\n";
    for (const auto& part : m_parts) {
        out += fmt::format("  {:<22} {}  {}\n", part.name, part.hash, part.shown);
    }
    out += fmt::format("common key: {}\n", m_common_key);
    const auto manifest_key = std::string(wire::k_manifest_prefix) + m_common_key;
    auto found = m_client.get(wire::k_namespace, manifest_key);
    if (!found) {
        out += fmt::format("daemon: {}\n", found.error().message);
        return out;
    }
    if (!*found) {
        out += fmt::format("manifest {}: absent (a build with these inputs never ran)\n",
                           manifest_key);
        return out;
    }
    const auto manifest = Manifest::decode(**found);
    if (!manifest) {
        out += fmt::format("manifest {}: corrupt\n", manifest_key);
        return out;
    }
    out += fmt::format("manifest {}: {} variant(s)\n", manifest_key, manifest->variants.size());
    for (std::size_t v = 0; v < manifest->variants.size(); ++v) {
        const auto& variant = manifest->variants[v];
        std::vector<std::string_view> recorded;
        for (const auto& input : variant) {
            recorded.push_back(input.path);
        }
        const auto hashes = current_state(recorded);
        std::size_t same = 0;
        std::string differences;
        for (std::size_t i = 0; i < variant.size(); ++i) {
            FileHash recorded;
            recorded.status = variant[i].status;
            recorded.hash = variant[i].hash;
            const bool equal =
                hashes[i].status == recorded.status &&
                (recorded.status != FileStatus::ok || hashes[i].hash == recorded.hash);
            if (equal) {
                ++same;
            } else {
                differences += fmt::format("      {}: recorded {}, now {}{}\n", variant[i].path,
                                           status_text(recorded), status_text(hashes[i]),
                                           proto::cxx::pin_state(variant[i].path, {})
                                               ? " (built in another directory)"
                                               : "");
            }
        }
        const auto key = result_key(m_common_key, variant);
        std::string stored = "unknown";
        if (auto exists = m_client.exists(wire::k_namespace, key)) {
            stored = *exists ? "stored" : "absent";
        }
        out += fmt::format("  variant {}: {} inputs, {} unchanged -> {} ({}, {})\n", v + 1,
                           variant.size(), same, key, same == variant.size() ? "MATCH" : "no match",
                           stored);
        out += differences;
    }
    return out;
}

} // namespace pt2cache::client::cxx
