// The native protocol (docs/protocol.md) on one connection: read, decode,
// dispatch to the store, encode, write; replies in request order.
#pragma once

#include "daemon/asio.hpp"

namespace pt2cache::daemon {

class Connection;

awaitable<void> serve_native(Connection& connection);

} // namespace pt2cache::daemon
