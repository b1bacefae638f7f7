// One named spdlog logger per module ("daemon", "session", "store", "resp",
// "remote"), all sharing the sink and level set up by `setup_logging`.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <spdlog/spdlog.h>

namespace pt2cache::daemon {

// Logs to stderr; under systemd (JOURNAL_STREAM set) without timestamps,
// since the journal adds its own.
void setup_logging(std::string_view level);
void set_log_level(std::string_view level);

spdlog::logger& logger(const std::string& module);

} // namespace pt2cache::daemon
