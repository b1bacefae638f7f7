// SPDX-License-Identifier: MIT
#include "daemon/store/remote/cluster_topology.hpp"

#include <algorithm>
#include <charconv>

#include "proto/cluster_slot.hpp"

#include <fmt/format.h>

namespace pt2cache::daemon::store {

namespace {

using Type = RedisReply::Type;

bool valid_host(std::string_view host) {
    return !host.empty() && host.size() <= k_max_host_length &&
           std::all_of(host.begin(), host.end(), [](char c) { return c > ' ' && c < 0x7F; });
}

// A host as a node reports it: empty or "?" for "the node asked".
std::optional<std::string> host_of(std::string_view host, std::string_view asked_host) {
    if (host.empty() || host == "?") {
        host = asked_host;
    }
    if (!valid_host(host)) {
        return std::nullopt;
    }
    return std::string(host);
}

tl::expected<ClusterAddress, std::string> parse_node(const RedisReply& node,
                                                     std::string_view asked_host) {
    if (node.type != Type::array || node.elements.size() < 2 ||
        node.elements[0]->type != Type::string || node.elements[1]->type != Type::integer) {
        return tl::make_unexpected(std::string("a node is not [host, port, ...]"));
    }
    const auto port = node.elements[1]->integer;
    if (port < 1 || port > 65535) {
        return tl::make_unexpected(fmt::format("port {} out of range", port));
    }
    auto host = host_of(node.elements[0]->text(), asked_host);
    if (!host) {
        return tl::make_unexpected(
            std::string("a host name is not printable ASCII of 1..255 bytes"));
    }
    return ClusterAddress{std::move(*host), static_cast<std::uint16_t>(port)};
}

} // namespace

std::string ClusterAddress::describe() const {
    return host.find(':') == std::string::npos ? fmt::format("{}:{}", host, port)
                                               : fmt::format("[{}]:{}", host, port);
}

tl::expected<std::vector<SlotRange>, std::string> parse_cluster_slots(const RedisReply& reply,
                                                                      std::string_view asked_host) {
    if (reply.type != Type::array) {
        return tl::make_unexpected(
            fmt::format("CLUSTER SLOTS answered a {}", proto::redis_type_name(reply.type)));
    }
    if (reply.elements.size() > proto::k_cluster_slots) {
        return tl::make_unexpected(fmt::format("{} slot ranges", reply.elements.size()));
    }
    std::vector<SlotRange> ranges;
    ranges.reserve(reply.elements.size());
    for (const auto& entry : reply.elements) {
        if (entry->type != Type::array || entry->elements.size() < 3 ||
            entry->elements[0]->type != Type::integer ||
            entry->elements[1]->type != Type::integer) {
            return tl::make_unexpected(std::string("a range is not [first, last, master, ...]"));
        }
        const auto first = entry->elements[0]->integer;
        const auto last = entry->elements[1]->integer;
        if (first < 0 || last < first || last >= proto::k_cluster_slots) {
            return tl::make_unexpected(fmt::format("slot range {}-{} out of range", first, last));
        }
        SlotRange range;
        range.first = static_cast<std::uint16_t>(first);
        range.last = static_cast<std::uint16_t>(last);
        auto master = parse_node(*entry->elements[2], asked_host);
        if (!master) {
            return tl::make_unexpected(master.error());
        }
        range.master = std::move(*master);
        for (std::size_t i = 3; i < entry->elements.size(); ++i) {
            auto replica = parse_node(*entry->elements[i], asked_host);
            if (!replica) {
                return tl::make_unexpected(replica.error());
            }
            if (range.replicas.size() < k_max_replicas_kept) {
                range.replicas.push_back(std::move(*replica));
            }
        }
        ranges.push_back(std::move(range));
    }
    std::sort(ranges.begin(), ranges.end(),
              [](const SlotRange& a, const SlotRange& b) { return a.first < b.first; });
    for (std::size_t i = 1; i < ranges.size(); ++i) {
        if (ranges[i].first <= ranges[i - 1].last) {
            return tl::make_unexpected(fmt::format("slot ranges {}-{} and {}-{} overlap",
                                                   ranges[i - 1].first, ranges[i - 1].last,
                                                   ranges[i].first, ranges[i].last));
        }
    }
    return ranges;
}

std::optional<Redirect> parse_redirect(std::string_view error, std::string_view asked_host) {
    Redirect redirect;
    if (error.starts_with("MOVED ")) {
        redirect.kind = Redirect::Kind::moved;
        error.remove_prefix(6);
    } else if (error.starts_with("ASK ")) {
        redirect.kind = Redirect::Kind::ask;
        error.remove_prefix(4);
    } else {
        return std::nullopt;
    }
    const auto space = error.find(' ');
    if (space == std::string_view::npos) {
        return std::nullopt;
    }
    const auto slot_text = error.substr(0, space);
    const auto address = error.substr(space + 1);
    unsigned slot = 0;
    const auto [slot_end, slot_ec] =
        std::from_chars(slot_text.data(), slot_text.data() + slot_text.size(), slot);
    if (slot_ec != std::errc() || slot_end != slot_text.data() + slot_text.size() ||
        slot >= proto::k_cluster_slots) {
        return std::nullopt;
    }
    const auto colon = address.rfind(':');
    if (colon == std::string_view::npos) {
        return std::nullopt;
    }
    auto host_text = address.substr(0, colon);
    if (host_text.size() >= 2 && host_text.front() == '[' && host_text.back() == ']') {
        host_text = host_text.substr(1, host_text.size() - 2);
    }
    const auto port_text = address.substr(colon + 1);
    unsigned port = 0;
    const auto [port_end, port_ec] =
        std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (port_ec != std::errc() || port_end != port_text.data() + port_text.size() || port < 1 ||
        port > 65535) {
        return std::nullopt;
    }
    auto host = host_of(host_text, asked_host);
    if (!host) {
        return std::nullopt;
    }
    redirect.slot = static_cast<std::uint16_t>(slot);
    redirect.target = ClusterAddress{std::move(*host), static_cast<std::uint16_t>(port)};
    return redirect;
}

} // namespace pt2cache::daemon::store
