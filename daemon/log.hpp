// One named spdlog logger per module ("daemon", "session", "store", "resp",
// "remote"), all sharing the sink and level set by `set_log_level`.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <spdlog/spdlog.h>

namespace pt2cache::daemon {

// Sets up (or changes) logging: stderr, without timestamps under systemd
// (JOURNAL_STREAM set) since the journal adds its own, at `level`; every
// module's logger is registered so libraries find theirs by name.
void set_log_level(std::string_view level);

spdlog::logger& logger(const std::string& module);

} // namespace pt2cache::daemon
