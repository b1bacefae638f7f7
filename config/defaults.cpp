// SPDX-License-Identifier: MIT
#include "config/defaults.hpp"

#include <cstdlib>
#include <pwd.h>
#include <unistd.h>
#include <vector>

#include <fmt/core.h>

namespace pt2cache::config {

namespace {

constexpr std::string_view k_app_dir = "pt2cache";

// HOME, else the password database entry of the current user.
std::optional<std::string> home_directory(const Environment& env) {
    if (auto home = lookup(env, "HOME")) {
        return home;
    }
    long size = ::sysconf(_SC_GETPW_R_SIZE_MAX);
    std::vector<char> buffer(size > 0 ? static_cast<std::size_t>(size) : 16384);
    passwd entry{};
    passwd* result = nullptr;
    if (::getpwuid_r(::getuid(), &entry, buffer.data(), buffer.size(), &result) != 0 ||
        result == nullptr || result->pw_dir == nullptr || result->pw_dir[0] == '\0') {
        return std::nullopt;
    }
    return std::string(result->pw_dir);
}

} // namespace

Environment process_environment() {
    return [](std::string_view name) -> std::optional<std::string> {
        const char* value = std::getenv(std::string(name).c_str());
        if (value == nullptr) {
            return std::nullopt;
        }
        return std::string(value);
    };
}

std::optional<std::string> lookup(const Environment& env, std::string_view name) {
    auto value = env(name);
    if (!value || value->empty()) {
        return std::nullopt;
    }
    return value;
}

std::string join_path(std::string_view dir, std::string_view name) {
    while (dir.size() > 1 && dir.back() == '/') {
        dir.remove_suffix(1);
    }
    if (dir == "/") {
        return fmt::format("/{}", name);
    }
    return fmt::format("{}/{}", dir, name);
}

DerivedDefault default_cache_dir(const Environment& env) {
    if (auto dir = lookup(env, "TORCHINDUCTOR_CACHE_DIR")) {
        return {join_path(*dir, k_app_dir), "TORCHINDUCTOR_CACHE_DIR"};
    }
    if (auto dir = lookup(env, "XDG_CACHE_HOME")) {
        return {join_path(*dir, k_app_dir), "XDG_CACHE_HOME"};
    }
    bool from_env = lookup(env, "HOME").has_value();
    if (auto home = home_directory(env)) {
        return {join_path(join_path(*home, ".cache"), k_app_dir), from_env ? "HOME" : ""};
    }
    return {};
}

DerivedDefault default_socket(const Environment& env) {
    if (auto dir = lookup(env, "XDG_RUNTIME_DIR")) {
        return {join_path(join_path(*dir, k_app_dir), "pt2cached.sock"), "XDG_RUNTIME_DIR"};
    }
    return {fmt::format("/tmp/pt2cache-{}/pt2cached.sock", ::getuid()), ""};
}

std::string default_socket_path(const Environment& env) {
    return default_socket(env).value;
}

std::string default_config_path(const Environment& env) {
    std::string base;
    if (auto dir = lookup(env, "XDG_CONFIG_HOME")) {
        base = *dir;
    } else if (auto home = home_directory(env)) {
        base = join_path(*home, ".config");
    } else {
        return {};
    }
    return join_path(join_path(base, k_app_dir), "pt2cached.toml");
}

} // namespace pt2cache::config
