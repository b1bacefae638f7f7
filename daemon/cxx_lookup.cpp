// SPDX-License-Identifier: MIT
#include "daemon/cxx_lookup.hpp"

#include <string>
#include <vector>

#include "daemon/context.hpp"
#include "daemon/fetch.hpp"
#include "daemon/file_hashes.hpp"
#include "daemon/offload.hpp"
#include "proto/cxx_manifest.hpp"
#include "proto/cxx_value.hpp"

namespace pt2cache::daemon {

namespace {

namespace cxx = proto::cxx;
using cxx::LookupOutcome;

// What the daemon can hash: an absolute path within the HASH_FILES limits.
bool hashable(std::string_view path) {
    return !path.empty() && path.front() == '/' && path.size() <= proto::k_max_hash_path &&
           path.find('\0') == std::string_view::npos;
}

// The most path bytes one lookup expands (a manifest of 2,700 inputs, as a
// compile with Boost.Asio and Python.h records, takes about 300 KB).
constexpr std::size_t k_max_expanded_bytes = 64 << 20;

proto::Error storage_error(const store::StoreError& error) {
    return {proto::Status::storage_error, error.message};
}

} // namespace

awaitable<tl::expected<CxxLookupAnswer, proto::Error>>
serve_cxx_lookup(Context& context, std::span<const std::byte> body, store::LatencyTier* hit_tier,
                 bool peer_shares_files, PendingReplies* pending) {
    auto request = cxx::parse_lookup(body);
    if (!request) {
        co_return tl::unexpected(request.error());
    }
    const auto deadline = std::chrono::steady_clock::now() + hash_request_budget();
    const std::string manifest_key = std::string(cxx::k_manifest_prefix) + request->common_key;
    auto found = co_await fetch(context, cxx::k_namespace, manifest_key, hit_tier, pending);
    if (!found) {
        co_return tl::unexpected(storage_error(found.error()));
    }
    context.compile.on_get(cxx::k_namespace, manifest_key, nullptr);
    CxxLookupAnswer answer;
    if (!*found) {
        co_return answer;
    }
    answer.outcome = LookupOutcome::no_match;
    if (!cxx::lookup_response_fits((*found)->value.size(), 0)) {
        co_return answer; // no frame carries it: answered as not a manifest
    }
    // Without its read-budget charge (it fits one frame): else a result
    // larger than the budget less the manifest waited for room the lookup
    // itself held, and was refused.
    answer.manifest = (*found)->value.without_charge();
    const auto manifest = cxx::Manifest::decode(answer.manifest.bytes());
    if (!manifest) {
        co_return answer; // the launcher sees it is corrupt
    }

    // A client that sees other files under the same paths matches the
    // manifest itself.
    if (!peer_shares_files) {
        answer.outcome = LookupOutcome::undecided;
        co_return answer;
    }
    // The current state of every path the variants name, expanded for this
    // invocation (on a worker: a manifest may name many paths, and the
    // request's rules may grow each one).
    const auto names = cxx::manifest_paths(*manifest);
    std::vector<proto::FileHash> now(names.paths.size());
    const bool decided = co_await offload(*context.blocking, [&] {
        std::vector<std::string> expanded;
        std::vector<std::size_t> slot;
        std::size_t total = 0;
        for (std::size_t i = 0; i < names.paths.size(); ++i) {
            if (const auto pin = cxx::pin_state(names.paths[i], request->rules)) {
                now[i] = *pin; // a directory, not a file: nothing to hash
                continue;
            }
            auto path = cxx::expand_placeholders_within(names.paths[i], request->rules,
                                                        proto::k_max_hash_path);
            if (!path) {
                return false; // longer than the daemon hashes
            }
            if (path->find(cxx::k_placeholder_mark) != std::string::npos) {
                now[i].status = proto::FileStatus::unreadable; // a directory this invocation lacks
                continue;
            }
            total += path->size();
            if (!hashable(*path) || total > k_max_expanded_bytes ||
                std::chrono::steady_clock::now() > deadline) {
                return false;
            }
            expanded.push_back(std::move(*path));
            slot.push_back(i);
        }
        const std::vector<std::string_view> views(expanded.begin(), expanded.end());
        const auto hashes = context.file_hashes.hash_all(views, deadline);
        for (std::size_t j = 0; j < hashes.size(); ++j) {
            if (hashes[j].status == proto::FileStatus::skipped) {
                return false;
            }
            now[slot[j]] = hashes[j];
        }
        return true;
    });
    if (!decided) {
        answer.outcome = LookupOutcome::undecided;
        co_return answer;
    }

    for (std::size_t v = 0; v < manifest->variants.size(); ++v) {
        if (!cxx::variant_matches(*manifest, names, v, now)) {
            continue;
        }
        const auto key = cxx::result_key(request->common_key, manifest->variants[v]);
        auto result = co_await fetch(context, cxx::k_namespace, key, hit_tier, pending);
        if (!result) {
            co_return tl::unexpected(storage_error(result.error()));
        }
        const auto bytes = *result ? (*result)->value.bytes() : std::span<const std::byte>();
        context.compile.on_get(cxx::k_namespace, key, *result ? &bytes : nullptr);
        if (*result && !cxx::lookup_response_fits(answer.manifest.size(), bytes.size())) {
            // Both do not fit one frame: the launcher reads the result with
            // a GET of its own.
            answer.outcome = LookupOutcome::undecided;
            co_return answer;
        }
        if (*result) {
            answer.outcome = LookupOutcome::hit;
            answer.result = std::move((*result)->value);
            co_return answer;
        }
    }
    co_return answer;
}

} // namespace pt2cache::daemon
