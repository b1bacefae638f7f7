// SPDX-License-Identifier: MIT
// The storage layer's spdlog logger ("store").
#pragma once

#include <spdlog/logger.h>

namespace pt2cache::daemon::store {

// The logger registered as "store" (the daemon sets it up with its sink and
// level); until one is registered, an unregistered clone of the default
// logger, so that the daemon's own registration is never pre-empted.
spdlog::logger& logger();

// The remote tier's logger: "remote" when the daemon registered it, else logger().
spdlog::logger& remote_logger();

} // namespace pt2cache::daemon::store
