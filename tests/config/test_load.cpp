// SPDX-License-Identifier: MIT
#include <unistd.h>

#include "config/config.hpp"
#include "tests/config/helpers.hpp"

#include <catch2/catch.hpp>
#include <fmt/core.h>

using namespace pt2cache::config;
using pt2cache::tests::check_origin;
using pt2cache::tests::ConfigFixture;
using pt2cache::tests::make_env;
using pt2cache::tests::Vars;

namespace {

constexpr std::size_t k_setting_count = 53;

std::string tmp_socket() {
    return fmt::format("/tmp/pt2cache-{}/pt2cached.sock", ::getuid());
}

// The file that sets every key to something other than its default.
const std::string k_full_file = R"(
[daemon]
socket = "/tmp/p2t/d.sock"
log_level = "debug"
io_threads = 3
blocking_threads = 9
idle_exit_s = 120
max_value_size = "1GiB"
max_connections = 77
max_connections_per_process = 7
max_inflight_bytes = "64MiB"
max_reply_bytes = "32MiB"

[memory]
max_size = 0

[disk]
cache_dir = "/var/cache/p2t"
max_size = "20GiB"
compress_threshold = 4096
compress_level = 19
write_mode = "sync"
write_queue_size = "16MiB"
small_entry_max = "4KiB"

[caches]
fx_graph_cache = true
autograd_cache = false
force_disable_caches = true

[remote]
host = "redis.example"
port = 7000
username = "alice"
password = "s3cret"
db = 2
fx_graph = true
autograd = true
autotune = true
bundled_autotune = true
pgo = true
expire_s = 86400
read_only = true
connect_timeout_ms = 60000
op_timeout_ms = 1
pool_size = 64
write_behind_queue_bytes = "1MiB"
max_value_size = "64MiB"

[resp]
password = "letmein"

[bundle]
idle_timeout_s = 30
)";

} // namespace

TEST_CASE("defaults", "[config][load]") {
    ConfigFixture fixture;
    auto loaded = load({}, make_env({{"HOME", "/nonexistent/u"}}));
    REQUIRE(loaded);
    const Config& c = loaded->config;
    CHECK(c.socket_path == tmp_socket());
    CHECK(c.log_level == "info");
    CHECK(c.io_threads == 1);
    CHECK(c.blocking_threads == 4);
    CHECK(c.idle_exit_s == 0);
    CHECK(c.max_value_size == 536870912);
    CHECK(c.max_connections == 1024);
    CHECK(c.max_connections_per_process == 256);
    CHECK(c.max_inflight_bytes == 2147483648);
    CHECK(c.max_reply_bytes == 536870912);
    CHECK(c.memory_max_size == 268435456);
    CHECK(c.cache_dir == "/nonexistent/u/.cache/pt2cache");
    CHECK(c.disk_max_size == 10737418240);
    CHECK(c.compress_threshold == 65536);
    CHECK(c.compress_level == 3);
    CHECK(c.disk_write_mode == "async");
    CHECK(c.disk_write_queue_size == 64ull << 20);
    CHECK(c.disk_small_entry_max == 16ull << 10);
    CHECK(c.fx_graph_cache);
    CHECK(c.autograd_cache);
    CHECK_FALSE(c.force_disable_caches);
    CHECK(c.redis_url.empty());
    CHECK(c.redis_host == "localhost");
    CHECK(c.redis_port == 6379);
    CHECK(c.redis_unix_socket.empty());
    CHECK(c.redis_username.empty());
    CHECK(c.redis_password.empty());
    CHECK(c.redis_db == 0);
    CHECK_FALSE(c.remote_enabled);
    CHECK_FALSE(c.fx_graph_remote_cache);
    CHECK_FALSE(c.autograd_remote_cache);
    CHECK_FALSE(c.autotune_remote_cache);
    CHECK_FALSE(c.bundled_autotune_remote_cache);
    CHECK_FALSE(c.pgo_remote_cache);
    CHECK(c.redis_expire_s == 0);
    CHECK_FALSE(c.remote_read_only);
    CHECK(c.remote_connect_timeout_ms == 500);
    CHECK(c.remote_op_timeout_ms == 1000);
    CHECK(c.remote_pool_size == 4);
    CHECK(c.write_behind_queue_bytes == 268435456);
    CHECK(c.remote_max_value_size == 536870912);
    CHECK_FALSE(c.redis_tls);
    CHECK(c.redis_tls_ca_file.empty());
    CHECK(c.redis_tls_cert_file.empty());
    CHECK(c.redis_tls_key_file.empty());
    CHECK(c.redis_tls_server_name.empty());
    CHECK(c.redis_tls_verify);
    CHECK(c.remote_signing_key_file.empty());
    CHECK(c.resp_password.empty());
    CHECK(c.bundle_idle_timeout_s == 600);

    CHECK(loaded->config_file.empty());
    CHECK(loaded->warnings.empty());
    CHECK(loaded->origins.size() == k_setting_count);
    for (const auto& [key, origin] : loaded->origins) {
        INFO(key);
        CHECK(origin.source == Source::default_value);
    }
    check_origin(*loaded, "disk.cache_dir", Source::default_value, "HOME");
    check_origin(*loaded, "daemon.socket", Source::default_value, "");
    check_origin(*loaded, "disk.max_size", Source::default_value, "");
}

TEST_CASE("source_name", "[config]") {
    CHECK(source_name(Source::default_value) == "default");
    CHECK(source_name(Source::file) == "file");
    CHECK(source_name(Source::environment) == "env");
    CHECK(source_name(Source::flag) == "flag");
}

TEST_CASE("the file overrides every default", "[config][load][file]") {
    ConfigFixture fixture;
    auto loaded = fixture.load(k_full_file);
    REQUIRE(loaded);
    const Config& c = loaded->config;
    CHECK(c.socket_path == "/tmp/p2t/d.sock");
    CHECK(c.log_level == "debug");
    CHECK(c.io_threads == 3);
    CHECK(c.blocking_threads == 9);
    CHECK(c.idle_exit_s == 120);
    CHECK(c.max_value_size == 1073741824);
    CHECK(c.max_connections == 77);
    CHECK(c.max_connections_per_process == 7);
    CHECK(c.max_inflight_bytes == 64ull << 20);
    CHECK(c.max_reply_bytes == 32ull << 20);
    CHECK(c.memory_max_size == 0);
    CHECK(c.cache_dir == "/var/cache/p2t");
    CHECK(c.disk_max_size == 21474836480);
    CHECK(c.compress_threshold == 4096);
    CHECK(c.compress_level == 19);
    CHECK(c.disk_write_mode == "sync");
    CHECK(c.disk_write_queue_size == 16ull << 20);
    CHECK(c.disk_small_entry_max == 4ull << 10);
    CHECK(c.fx_graph_cache);
    CHECK_FALSE(c.autograd_cache);
    CHECK(c.force_disable_caches);
    CHECK(c.redis_host == "redis.example");
    CHECK(c.redis_port == 7000);
    CHECK(c.redis_username == "alice");
    CHECK(c.redis_password == "s3cret");
    CHECK(c.redis_db == 2);
    CHECK(c.remote_enabled);
    CHECK(c.fx_graph_remote_cache);
    CHECK(c.autograd_remote_cache);
    CHECK(c.autotune_remote_cache);
    CHECK(c.bundled_autotune_remote_cache);
    CHECK(c.pgo_remote_cache);
    CHECK(c.redis_expire_s == 86400);
    CHECK(c.remote_read_only);
    CHECK(c.remote_connect_timeout_ms == 60000);
    CHECK(c.remote_op_timeout_ms == 1);
    CHECK(c.remote_pool_size == 64);
    CHECK(c.write_behind_queue_bytes == 1048576);
    CHECK(c.remote_max_value_size == 67108864);
    CHECK(c.resp_password == "letmein");
    CHECK(c.bundle_idle_timeout_s == 30);

    CHECK(loaded->config_file == fixture.file_path());
    CHECK(loaded->warnings.empty());
    check_origin(*loaded, "disk.max_size", Source::file, fixture.file_path());
    check_origin(*loaded, "bundle.idle_timeout_s", Source::file, fixture.file_path());
    // Not in the file.
    check_origin(*loaded, "remote.url", Source::default_value, "");
    check_origin(*loaded, "remote.unix_socket", Source::default_value, "");
    CHECK(loaded->origins.size() == k_setting_count);
}

TEST_CASE("an empty file changes nothing", "[config][load][file]") {
    ConfigFixture fixture;
    auto loaded = fixture.load("# nothing here\n");
    REQUIRE(loaded);
    CHECK(loaded->config_file == fixture.file_path());
    CHECK(loaded->config.disk_max_size == 10737418240);
    check_origin(*loaded, "disk.max_size", Source::default_value, "");
}

TEST_CASE("remote.cluster takes TOML's booleans, as the docs write it", "[config][load][file]") {
    ConfigFixture fixture;
    for (const auto& [text, expected] :
         {std::pair{"true", "true"}, std::pair{"false", "false"}, std::pair{"\"TRUE\"", "true"},
          std::pair{"\"auto\"", "auto"}}) {
        auto loaded = fixture.load(fmt::format("[remote]\ncluster = {}\n", text));
        REQUIRE(loaded);
        CHECK(loaded->config.remote_cluster == expected);
    }
    CHECK_FALSE(fixture.load("[remote]\ncluster = 1\n"));
    // Only a choice that has the words: a log level is no boolean.
    CHECK_FALSE(fixture.load("[daemon]\nlog_level = true\n"));
}

TEST_CASE("the default config file location", "[config][load][file]") {
    ConfigFixture fixture;
    SECTION("$HOME/.config/pt2cache/pt2cached.toml") {
        std::filesystem::create_directories(fixture.home() + "/.config/pt2cache");
        std::string path =
            fixture.write(".config/pt2cache/pt2cached.toml", "[daemon]\nio_threads = 7\n");
        auto loaded = load({}, fixture.env());
        REQUIRE(loaded);
        CHECK(loaded->config_file == path);
        CHECK(loaded->config.io_threads == 7);
    }
    SECTION("$XDG_CONFIG_HOME/pt2cache/pt2cached.toml") {
        std::filesystem::create_directories(fixture.home() + "/xdg/pt2cache");
        std::string path =
            fixture.write("xdg/pt2cache/pt2cached.toml", "[daemon]\nio_threads = 8\n");
        auto loaded = load({}, fixture.env({{"XDG_CONFIG_HOME", fixture.home() + "/xdg"}}));
        REQUIRE(loaded);
        CHECK(loaded->config_file == path);
        CHECK(loaded->config.io_threads == 8);
    }
    SECTION("none") {
        auto loaded = load({}, fixture.env());
        REQUIRE(loaded);
        CHECK(loaded->config_file.empty());
    }
    SECTION("--config wins over the default location") {
        std::filesystem::create_directories(fixture.home() + "/.config/pt2cache");
        fixture.write(".config/pt2cache/pt2cached.toml", "[daemon]\nio_threads = 7\n");
        LoadOptions options;
        options.config_path = fixture.write("other.toml", "[daemon]\nblocking_threads = 5\n");
        auto loaded = load(options, fixture.env());
        REQUIRE(loaded);
        CHECK(loaded->config_file == *options.config_path);
        CHECK(loaded->config.io_threads == 1);
        CHECK(loaded->config.blocking_threads == 5);
    }
}

TEST_CASE("the environment overrides the file", "[config][load][env]") {
    ConfigFixture fixture;
    auto loaded = fixture.load(k_full_file, {
                                                {"PT2CACHE_SOCKET", "/tmp/p2t/env.sock"},
                                                {"PT2CACHE_LOG_LEVEL", "ERROR"},
                                                {"TORCHINDUCTOR_REDIS_HOST", "envhost"},
                                                {"TORCHINDUCTOR_REDIS_PORT", "7001"},
                                                {"TORCHINDUCTOR_REDIS_EXPIRE", "60"},
                                                {"TORCHINDUCTOR_AUTOTUNE_REMOTE_CACHE", "0"},
                                            });
    REQUIRE(loaded);
    const Config& c = loaded->config;
    CHECK(c.socket_path == "/tmp/p2t/env.sock");
    CHECK(c.log_level == "error");
    CHECK(c.redis_host == "envhost");
    CHECK(c.redis_port == 7001);
    CHECK(c.redis_expire_s == 60);
    CHECK_FALSE(c.autotune_remote_cache);
    CHECK(c.io_threads == 3); // from the file
    check_origin(*loaded, "daemon.socket", Source::environment, "PT2CACHE_SOCKET");
    check_origin(*loaded, "daemon.log_level", Source::environment, "PT2CACHE_LOG_LEVEL");
    check_origin(*loaded, "remote.port", Source::environment, "TORCHINDUCTOR_REDIS_PORT");
    check_origin(*loaded, "remote.expire_s", Source::environment, "TORCHINDUCTOR_REDIS_EXPIRE");
    check_origin(*loaded, "remote.autotune", Source::environment,
                 "TORCHINDUCTOR_AUTOTUNE_REMOTE_CACHE");
    check_origin(*loaded, "daemon.io_threads", Source::file, fixture.file_path());
}

TEST_CASE("an empty environment variable counts as unset", "[config][load][env]") {
    ConfigFixture fixture;
    auto loaded = fixture.load("[remote]\nport = 7000\nfx_graph = true\n",
                               {{"TORCHINDUCTOR_REDIS_PORT", ""},
                                {"TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE", ""},
                                {"PT2CACHE_SOCKET", ""},
                                {"TORCHINDUCTOR_CACHE_DIR", ""},
                                {"XDG_RUNTIME_DIR", ""}});
    REQUIRE(loaded);
    CHECK(loaded->config.redis_port == 7000);
    CHECK(loaded->config.fx_graph_remote_cache);
    CHECK(loaded->config.socket_path == tmp_socket());
    CHECK(loaded->config.cache_dir == fixture.home() + "/.cache/pt2cache");
    check_origin(*loaded, "remote.port", Source::file, fixture.file_path());
}

TEST_CASE("flags override the environment", "[config][load][flags]") {
    ConfigFixture fixture;
    auto loaded = fixture.load("[disk]\nmax_size = \"1GiB\"\n",
                               {{"PT2CACHE_SOCKET", "/tmp/p2t/env.sock"},
                                {"TORCHINDUCTOR_FX_GRAPH_CACHE", "0"},
                                {"TORCHINDUCTOR_REDIS_PORT", "7001"}},
                               {{"daemon.socket", "/tmp/p2t/flag.sock"},
                                {"disk.max_size", "2GiB"},
                                {"caches.fx_graph_cache", "yes"},
                                {"remote.port", "7002"},
                                {"remote.port", "7003"},
                                {"daemon.log_level", "Trace"},
                                {"remote.read_only", "on"},
                                {"disk.write_mode", "SYNC"}});
    REQUIRE(loaded);
    const Config& c = loaded->config;
    CHECK(c.socket_path == "/tmp/p2t/flag.sock");
    CHECK(c.disk_write_mode == "sync"); // any case, stored in lower case
    CHECK(c.disk_max_size == 2147483648);
    CHECK(c.fx_graph_cache);
    CHECK(c.autograd_cache);
    CHECK(c.redis_port == 7003); // the last flag wins
    CHECK(c.log_level == "trace");
    CHECK(c.remote_read_only);
    CHECK(loaded->warnings.empty());
    check_origin(*loaded, "daemon.socket", Source::flag, "daemon.socket");
    check_origin(*loaded, "disk.max_size", Source::flag, "disk.max_size");
    check_origin(*loaded, "caches.fx_graph_cache", Source::flag, "caches.fx_graph_cache");
}

TEST_CASE("cache_dir default", "[config][load][defaults]") {
    struct Row {
        Vars vars;
        std::string cache_dir;
        std::string from;
    };
    const Row rows[] = {
        {{{"HOME", "/home/u"}}, "/home/u/.cache/pt2cache", "HOME"},
        {{{"HOME", "/home/u"}, {"XDG_CACHE_HOME", "/xdg/cache"}},
         "/xdg/cache/pt2cache",
         "XDG_CACHE_HOME"},
        {{{"HOME", "/home/u"}, {"TORCHINDUCTOR_CACHE_DIR", "/tmp/ti"}},
         "/tmp/ti/pt2cache",
         "TORCHINDUCTOR_CACHE_DIR"},
        {{{"HOME", "/home/u"},
          {"XDG_CACHE_HOME", "/xdg/cache"},
          {"TORCHINDUCTOR_CACHE_DIR", "/tmp/ti/"}},
         "/tmp/ti/pt2cache",
         "TORCHINDUCTOR_CACHE_DIR"},
        {{{"HOME", "/home/u"}, {"XDG_CACHE_HOME", ""}}, "/home/u/.cache/pt2cache", "HOME"},
    };
    for (const auto& row : rows) {
        INFO(row.cache_dir);
        auto loaded = load({}, make_env(row.vars));
        REQUIRE(loaded);
        CHECK(loaded->config.cache_dir == row.cache_dir);
        check_origin(*loaded, "disk.cache_dir", Source::default_value, row.from);
    }

    SECTION("the file overrides TORCHINDUCTOR_CACHE_DIR, which is only a default") {
        ConfigFixture fixture;
        auto loaded = fixture.load("[disk]\ncache_dir = \"/srv/c\"\n",
                                   {{"TORCHINDUCTOR_CACHE_DIR", "/tmp/ti"}});
        REQUIRE(loaded);
        CHECK(loaded->config.cache_dir == "/srv/c");
    }
    SECTION("a flag overrides it too") {
        ConfigFixture fixture;
        auto loaded = fixture.load("", {{"TORCHINDUCTOR_CACHE_DIR", "/tmp/ti"}},
                                   {{"disk.cache_dir", "/srv/flag"}});
        REQUIRE(loaded);
        CHECK(loaded->config.cache_dir == "/srv/flag");
        check_origin(*loaded, "disk.cache_dir", Source::flag, "disk.cache_dir");
    }
}

TEST_CASE("socket default", "[config][load][defaults]") {
    CHECK(default_socket_path(make_env({})) == tmp_socket());
    CHECK(default_socket_path(make_env({{"XDG_RUNTIME_DIR", "/run/user/1000"}})) ==
          "/run/user/1000/pt2cache/pt2cached.sock");
    CHECK(default_socket_path(make_env({{"XDG_RUNTIME_DIR", "/run/user/1000/"}})) ==
          "/run/user/1000/pt2cache/pt2cached.sock");
    CHECK(default_socket_path(make_env({{"XDG_RUNTIME_DIR", ""}})) == tmp_socket());

    auto with_xdg = load({}, make_env({{"HOME", "/home/u"}, {"XDG_RUNTIME_DIR", "/run/user/7"}}));
    REQUIRE(with_xdg);
    CHECK(with_xdg->config.socket_path == "/run/user/7/pt2cache/pt2cached.sock");
    check_origin(*with_xdg, "daemon.socket", Source::default_value, "XDG_RUNTIME_DIR");

    auto without = load({}, make_env({{"HOME", "/home/u"}}));
    REQUIRE(without);
    CHECK(without->config.socket_path == tmp_socket());
    check_origin(*without, "daemon.socket", Source::default_value, "");

    auto overridden = load({}, make_env({{"HOME", "/home/u"},
                                         {"XDG_RUNTIME_DIR", "/run/user/7"},
                                         {"PT2CACHE_SOCKET", "/tmp/mine.sock"}}));
    REQUIRE(overridden);
    CHECK(overridden->config.socket_path == "/tmp/mine.sock");
}

TEST_CASE("a Redis URL sets the connection settings", "[config][load][remote]") {
    ConfigFixture fixture;
    SECTION("from the environment") {
        auto loaded = fixture.load("[remote]\nhost = \"filehost\"\nusername = \"bob\"\n",
                                   {{"TORCHINDUCTOR_REDIS_URL", "redis://user:pw@h:7000/3"}});
        REQUIRE(loaded);
        const Config& c = loaded->config;
        CHECK(c.redis_url == "redis://user:pw@h:7000/3");
        CHECK(c.redis_host == "h");
        CHECK(c.redis_port == 7000);
        CHECK(c.redis_username == "user");
        CHECK(c.redis_password == "pw");
        CHECK(c.redis_db == 3);
        CHECK(c.redis_unix_socket.empty());
        for (auto key : {"remote.url", "remote.host", "remote.port", "remote.username",
                         "remote.password", "remote.db"}) {
            check_origin(*loaded, key, Source::environment, "TORCHINDUCTOR_REDIS_URL");
        }
    }
    SECTION("rediss:// turns TLS on, redis:// off") {
        auto tls = fixture.load("[remote]\ntls_server_name = \"cache.internal\"\n",
                                {{"TORCHINDUCTOR_REDIS_URL", "rediss://h:6380"}});
        REQUIRE(tls);
        CHECK(tls->config.redis_tls);
        CHECK(tls->config.redis_tls_server_name == "cache.internal");
        CHECK(tls->config.redis_tls_verify);
        check_origin(*tls, "remote.tls", Source::environment, "TORCHINDUCTOR_REDIS_URL");
        auto plain =
            fixture.load("[remote]\ntls = true\n", {{"TORCHINDUCTOR_REDIS_URL", "redis://h:6380"}});
        REQUIRE(plain);
        CHECK_FALSE(plain->config.redis_tls);
    }
    SECTION("the URL wins over host and port in the same layer") {
        auto loaded = fixture.load("", {{"TORCHINDUCTOR_REDIS_URL", "redis://:pw@urlhost"},
                                        {"TORCHINDUCTOR_REDIS_HOST", "envhost"},
                                        {"TORCHINDUCTOR_REDIS_PORT", "7777"}});
        REQUIRE(loaded);
        CHECK(loaded->config.redis_host == "urlhost");
        CHECK(loaded->config.redis_port == 6379);
        CHECK(loaded->config.redis_username.empty());
        CHECK(loaded->config.redis_password == "pw");
    }
    SECTION("a higher layer's host overrides a lower layer's URL") {
        auto loaded = fixture.load("[remote]\nurl = \"redis://h:7000/3\"\n",
                                   {{"TORCHINDUCTOR_REDIS_HOST", "envhost"}});
        REQUIRE(loaded);
        CHECK(loaded->config.redis_host == "envhost");
        CHECK(loaded->config.redis_port == 7000);
        CHECK(loaded->config.redis_db == 3);
        check_origin(*loaded, "remote.host", Source::environment, "TORCHINDUCTOR_REDIS_HOST");
        check_origin(*loaded, "remote.port", Source::file, fixture.file_path());
    }
    SECTION("unix:// URL, then a TCP host in a higher layer") {
        auto unix_only = fixture.load("[remote]\nurl = \"unix:///run/r.sock?db=4\"\n");
        REQUIRE(unix_only);
        CHECK(unix_only->config.redis_unix_socket == "/run/r.sock");
        CHECK(unix_only->config.redis_db == 4);
        CHECK(unix_only->config.redis_host == "localhost");
        check_origin(*unix_only, "remote.unix_socket", Source::file, fixture.file_path());
        check_origin(*unix_only, "remote.host", Source::default_value, "");

        auto tcp = fixture.load("[remote]\nurl = \"unix:///run/r.sock\"\n", {},
                                {{"remote.host", "flaghost"}});
        REQUIRE(tcp);
        CHECK(tcp->config.redis_unix_socket.empty());
        CHECK(tcp->config.redis_host == "flaghost");
        check_origin(*tcp, "remote.unix_socket", Source::flag, "remote.host");
    }
    SECTION("unix_socket beside host in one file: the socket wins") {
        auto loaded = fixture.load("[remote]\nunix_socket = \"/run/x.sock\"\nhost = \"h\"\n");
        REQUIRE(loaded);
        CHECK(loaded->config.redis_unix_socket == "/run/x.sock");
        CHECK(loaded->config.redis_host == "h");
    }
}
