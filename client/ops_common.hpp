// SPDX-License-Identifier: MIT
// Helpers shared by the files of client::Client's operations
// (operations.cpp, export_operations.cpp). Internal to client/.
#pragma once

#include <string>
#include <string_view>

#include "client/client.hpp"
#include "proto/frame.hpp"
#include "proto/messages.hpp"

#include <fmt/format.h>

namespace pt2cache::client::detail {

// An argument the daemon would refuse, reported as the daemon would.
inline tl::unexpected<Error> invalid(Status status, std::string message) {
    return tl::unexpected(Error{ErrorKind::server, status, std::move(message)});
}

inline Error unexpected_status(proto::Op op, Status status) {
    return Error{
        ErrorKind::protocol, Status::internal,
        fmt::format("pt2cached answered {} to {}", status_name(status), proto::op_name(op))};
}

inline tl::expected<void, Error> check_namespace(std::string_view ns) {
    if (!proto::valid_namespace(ns)) {
        return invalid(Status::bad_namespace,
                       fmt::format("invalid namespace \"{}\": expected 1 to {} characters of "
                                   "[a-z0-9-]",
                                   ns.substr(0, 40), proto::k_max_namespace));
    }
    return {};
}

} // namespace pt2cache::client::detail
