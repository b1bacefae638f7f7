// SPDX-License-Identifier: MIT
// What a Redis Cluster says about itself, read as untrusted input: the
// CLUSTER SLOTS reply and MOVED / ASK redirections (docs/remote.md,
// "Cluster"). No I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/store/remote/redis_context.hpp"

#include <tl/expected.hpp>

namespace pt2cache::daemon::store {

struct ClusterAddress {
    std::string host;
    std::uint16_t port = 0;

    bool operator==(const ClusterAddress&) const = default;
    std::string describe() const;
};

struct SlotRange {
    std::uint16_t first = 0;
    std::uint16_t last = 0;
    ClusterAddress master;
    std::vector<ClusterAddress> replicas;
};

// Limits on a CLUSTER SLOTS reply.
inline constexpr std::size_t k_max_host_length = 255;
inline constexpr std::size_t k_max_replicas_kept = 8; // further replicas are ignored

// Parses a CLUSTER SLOTS reply:
//   *N of *[first, last, master, replica...], each node *[host, port, id?, ...]
// Slots are 0..16383 with first <= last; ranges must not overlap; ports are
// 1..65535; a host is 1..255 bytes of printable ASCII without spaces. An empty
// host (or "?") means "the node that was asked": `asked_host` is used. Any
// violation refuses the whole reply (the caller keeps its old map).
tl::expected<std::vector<SlotRange>, std::string> parse_cluster_slots(const RedisReply& reply,
                                                                      std::string_view asked_host);

struct Redirect {
    enum class Kind { moved, ask };
    Kind kind;
    std::uint16_t slot = 0;
    ClusterAddress target;
};

// "MOVED <slot> <host>:<port>" or "ASK <slot> <host>:<port>" (an error
// reply's text); nullopt for any other error, or a malformed redirection. An
// empty host means `asked_host`.
std::optional<Redirect> parse_redirect(std::string_view error, std::string_view asked_host);

} // namespace pt2cache::daemon::store
