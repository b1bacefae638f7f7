// pt2cached: the per-user compile-cache daemon.
#include <cstdio>
#include <iostream>

#include "config/config.hpp"
#include "daemon/log.hpp"
#include "daemon/server.hpp"
#include "daemon/socket_setup.hpp"

#include <CLI/CLI.hpp>

using namespace pt2cache;

int main(int argc, char** argv) {
    CLI::App app{"pt2cached: the per-user PyTorch compile-cache daemon.\n"
                 "Serves the native protocol and RESP on one Unix socket; see pt2cached(8) in "
                 "docs/operations.md."};
    app.set_version_flag("--version", "pt2cached " PT2CACHE_VERSION);

    config::LoadOptions options;
    std::string config_path, socket, cache_dir, log_level;
    std::vector<std::string> settings;
    bool print_config = false;
    app.add_option("--config", config_path, "TOML configuration file")->type_name("PATH");
    app.add_option("--socket", socket, "Unix socket to listen on")->type_name("PATH");
    app.add_option("--cache-dir", cache_dir, "root of the on-disk cache")->type_name("PATH");
    app.add_option("--log-level", log_level, "trace, debug, info, warn, error, critical or off");
    app.add_option("--set", settings, "override one setting, e.g. --set disk.max_size=1GiB")
        ->type_name("SECTION.KEY=VALUE");
    app.add_flag("--print-config", print_config,
                 "print every effective setting and where it came from, then exit");
    bool foreground = true;
    app.add_flag("--foreground", foreground,
                 "run in the foreground (the default; accepted for scripts)");
    app.footer("Exit status: 0 after a clean stop, 1 when it cannot start, 2 on a usage or "
               "configuration error.");

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e) == 0 ? 0 : 2;
    }

    if (!config_path.empty()) {
        options.config_path = config_path;
    }
    for (const auto& setting : settings) {
        const auto eq = setting.find('=');
        if (eq == std::string::npos) {
            std::cerr << "pt2cached: --set " << setting << ": expected SECTION.KEY=VALUE\n";
            return 2;
        }
        options.flags.emplace_back(setting.substr(0, eq), setting.substr(eq + 1));
    }
    if (!socket.empty()) {
        options.flags.emplace_back("daemon.socket", socket);
    }
    if (!cache_dir.empty()) {
        options.flags.emplace_back("disk.cache_dir", cache_dir);
    }
    if (!log_level.empty()) {
        options.flags.emplace_back("daemon.log_level", log_level);
    }

    auto loaded = config::load(options, config::process_environment());
    if (!loaded) {
        std::cerr << "pt2cached: " << loaded.error().message << '\n';
        return 2;
    }
    if (print_config) {
        std::cout << config::render(*loaded);
        for (const auto& warning : loaded->warnings) {
            std::cout << "# warning: " << warning << '\n';
        }
        return 0;
    }

    daemon::set_log_level(loaded->config.log_level);
    try {
        return daemon::run_server(std::move(*loaded), std::move(options));
    } catch (const daemon::Fatal& e) {
        daemon::logger("daemon").critical("{}", e.what());
        std::cerr << "pt2cached: " << e.what() << '\n';
        return e.exit_code();
    }
}
