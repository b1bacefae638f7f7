// SPDX-License-Identifier: MIT
//
// CXX_LOOKUP (docs/protocol.md, "Compile-cache lookup"): a pt2cache-cxx
// lookup served in one request. The manifest and the result are read as GET
// reads them (every tier, counted in the compile-cache statistics), the
// inputs are hashed through the HASH_FILES cache.
#pragma once

#include <span>

#include "daemon/asio.hpp"
#include "daemon/store/blob.hpp"
#include "daemon/store/stats.hpp"
#include "proto/cxx_lookup.hpp"
#include "proto/frame.hpp"

#include <tl/expected.hpp>

namespace pt2cache::daemon {

struct Context;
struct PendingReplies;

struct CxxLookupAnswer {
    proto::cxx::LookupOutcome outcome = proto::cxx::LookupOutcome::no_manifest;
    store::Blob manifest; // as stored; empty for no_manifest
    store::Blob result;   // the stored result on a hit
};

// Serves one CXX_LOOKUP body; `hit_tier` gets the tier of the last value
// read (for the latency histograms). A large manifest or result that waits
// for room in the read budget sends `pending` first (see fetch()).
awaitable<tl::expected<CxxLookupAnswer, proto::Error>>
serve_cxx_lookup(Context& context, std::span<const std::byte> body, store::LatencyTier* hit_tier,
                 bool peer_shares_files, PendingReplies* pending);

} // namespace pt2cache::daemon
