// SPDX-License-Identifier: MIT
// Fuzz target: the config file (config/: the TOML file layer and load()).
// Invariants: any bytes as pt2cached.toml give a Config or one line of error
// naming the file; a loaded config rendered (config/render.cpp) and read back
// as a config file gives the same values, every setting as render prints it.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <unistd.h>

#include "config/config.hpp"
#include "config/settings.hpp"
#include "tests/fuzz/fuzz_check.hpp"

namespace {

using namespace pt2cache::config;

// One scratch file per process, removed at exit.
const std::string& scratch_path() {
    static const std::string path = [] {
        const char* dir = std::getenv("TMPDIR");
        std::string name = std::string(dir != nullptr && *dir != '\0' ? dir : "/tmp") +
                           "/pt2cache-fuzz-config-XXXXXX";
        const int fd = ::mkstemp(name.data());
        FUZZ_CHECK(fd >= 0);
        ::close(fd);
        return name;
    }();
    static const bool cleanup = [] {
        std::atexit([] { std::remove(scratch_path().c_str()); });
        return true;
    }();
    (void)cleanup;
    return path;
}

void write_file(const std::string& path, std::string_view text) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    FUZZ_CHECK(out.good());
}

// A fixed environment: only HOME, so that defaults do not depend on the host.
std::optional<std::string> environment(std::string_view name) {
    if (name == "HOME") {
        return std::string("/nonexistent/pt2cache-fuzz-home");
    }
    return std::nullopt;
}

tl::expected<Loaded, ConfigError> load_text(std::string_view text) {
    const auto& path = scratch_path();
    write_file(path, text);
    LoadOptions options;
    options.config_path = path;
    return load(options, environment);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const auto loaded = load_text(std::string_view(reinterpret_cast<const char*>(data), size));
    if (!loaded) {
        const auto& message = loaded.error().message;
        FUZZ_CHECK(!message.empty());
        FUZZ_CHECK(message.find('\n') == std::string::npos);
        FUZZ_CHECK(message.find(scratch_path()) != std::string::npos);
        return 0;
    }
    FUZZ_CHECK(loaded->config_file == scratch_path());

    const auto rendered = render(*loaded);
    const auto again = load_text(rendered);
    if (!again) {
        std::fprintf(stderr, "rendered config does not load: %s\n---\n%s---\n",
                     again.error().message.c_str(), rendered.c_str());
    }
    FUZZ_CHECK(again);
    for (const auto& setting : settings()) {
        const auto before = format_value(loaded->config, setting);
        const auto after = format_value(again->config, setting);
        if (before != after) {
            std::fprintf(stderr, "%.*s: %s became %s\n", int(setting.key.size()),
                         setting.key.data(), before.c_str(), after.c_str());
        }
        FUZZ_CHECK(before == after);
    }
    FUZZ_CHECK(again->config.remote_enabled == loaded->config.remote_enabled);
    return 0;
}
