#include "daemon/log.hpp"

#include <cstdlib>
#include <mutex>

#include <spdlog/sinks/stdout_sinks.h>

namespace pt2cache::daemon {

namespace {

std::mutex g_mutex;
spdlog::sink_ptr g_sink;
spdlog::level::level_enum g_level = spdlog::level::info;

spdlog::sink_ptr sink() {
    if (!g_sink) {
        g_sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
        const bool journal = std::getenv("JOURNAL_STREAM") != nullptr;
        g_sink->set_pattern(journal ? "[%n] %l: %v" : "%Y-%m-%d %H:%M:%S.%e [%n] %l: %v");
    }
    return g_sink;
}

} // namespace

void set_log_level(std::string_view level) {
    {
        std::lock_guard lock(g_mutex);
        sink();
        g_level = spdlog::level::from_str(std::string(level));
        spdlog::apply_all([](const std::shared_ptr<spdlog::logger>& l) { l->set_level(g_level); });
        spdlog::set_level(g_level);
    }
    // Register every module's logger now, so that libraries which look theirs
    // up by name (the store) log with this sink and level.
    for (const char* module : {"daemon", "session", "resp", "store", "remote", "bundle"}) {
        logger(module);
    }
}

spdlog::logger& logger(const std::string& module) {
    if (auto existing = spdlog::get(module)) {
        return *existing;
    }
    std::lock_guard lock(g_mutex);
    if (auto existing = spdlog::get(module)) {
        return *existing;
    }
    auto created = std::make_shared<spdlog::logger>(module, sink());
    created->set_level(g_level);
    created->flush_on(spdlog::level::warn);
    spdlog::register_logger(created);
    return *created;
}

} // namespace pt2cache::daemon
