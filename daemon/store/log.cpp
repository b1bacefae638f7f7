// SPDX-License-Identifier: MIT
#include "daemon/store/log.hpp"

#include <memory>

#include <spdlog/spdlog.h>

namespace pt2cache::daemon::store {

spdlog::logger& logger() {
    if (const auto registered = spdlog::get("store")) {
        // The registry keeps it alive for the rest of the process.
        return *registered;
    }
    static const std::shared_ptr<spdlog::logger> fallback =
        spdlog::default_logger()->clone("store");
    return *fallback;
}

spdlog::logger& remote_logger() {
    // The daemon registers "remote"; without it (unit tests), the store's logger.
    if (const auto registered = spdlog::get("remote")) {
        return *registered;
    }
    return logger();
}

} // namespace pt2cache::daemon::store
