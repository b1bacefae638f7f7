// SPDX-License-Identifier: MIT
#include <sstream>

#include "config/config.hpp"
#include "tests/config/helpers.hpp"

#include <catch2/catch.hpp>
#include <fmt/core.h>

using namespace pt2cache::config;
using pt2cache::tests::ConfigFixture;
using pt2cache::tests::make_env;

namespace {

// The "key = value" part of each setting line, comments dropped.
std::vector<std::string> values_of(const std::string& rendered) {
    std::vector<std::string> result;
    std::istringstream in(rendered);
    for (std::string line; std::getline(in, line);) {
        if (line.empty() || line.starts_with('#')) {
            continue;
        }
        result.push_back(line.substr(0, line.find("  # ")));
    }
    return result;
}

bool has_line(const std::string& rendered, const std::string& line) {
    return rendered.find("\n" + line + "\n") != std::string::npos;
}

} // namespace

TEST_CASE("render prints every default", "[config][render]") {
    auto loaded = load({}, make_env({{"HOME", "/home/u"}, {"XDG_RUNTIME_DIR", "/run/user/1000"}}));
    REQUIRE(loaded);
    CHECK(render(*loaded) ==
          R"(# pt2cached configuration: effective values and where they came from
# config file: none

daemon.socket = "/run/user/1000/pt2cache/pt2cached.sock"  # default (from XDG_RUNTIME_DIR)
daemon.log_level = "info"  # default
daemon.io_threads = 1  # default
daemon.blocking_threads = 4  # default
daemon.idle_exit_s = 0  # default
daemon.max_value_size = 536870912  # default
daemon.max_connections = 1024  # default
daemon.max_connections_per_process = 256  # default
daemon.max_inflight_bytes = 2147483648  # default
daemon.max_reply_bytes = 536870912  # default

memory.max_size = 268435456  # default

disk.cache_dir = "/home/u/.cache/pt2cache"  # default (from HOME)
disk.max_size = 10737418240  # default
disk.compress_threshold = 65536  # default
disk.compress_level = 3  # default
disk.write_mode = "async"  # default
disk.write_queue_size = 67108864  # default
disk.small_entry_max = 16384  # default

caches.fx_graph_cache = true  # default
caches.autograd_cache = true  # default
caches.force_disable_caches = false  # default

remote.url = ""  # default
remote.host = "localhost"  # default
remote.port = 6379  # default
remote.unix_socket = ""  # default
remote.username = ""  # default
remote.password = ""  # default
remote.db = 0  # default
remote.fx_graph = false  # default
remote.autograd = false  # default
remote.autotune = false  # default
remote.bundled_autotune = false  # default
remote.pgo = false  # default
remote.expire_s = 0  # default
remote.read_only = false  # default
remote.connect_timeout_ms = 500  # default
remote.op_timeout_ms = 1000  # default
remote.pool_size = 4  # default
remote.write_behind_queue_bytes = 268435456  # default
remote.max_value_size = 536870912  # default
remote.cluster = "auto"  # default
remote.cluster_nodes = ""  # default
remote.read_from_replicas = false  # default
remote.tls = false  # default
remote.tls_ca_file = ""  # default
remote.tls_cert_file = ""  # default
remote.tls_key_file = ""  # default
remote.tls_server_name = ""  # default
remote.tls_verify = true  # default
remote.signing_key_file = ""  # default
# remote.enabled = false (true when any remote switch is on)

resp.password = ""  # default

bundle.idle_timeout_s = 600  # default

metrics.listen = ""  # default
)");
}

TEST_CASE("render shows sources and masks passwords", "[config][render]") {
    ConfigFixture fixture;
    const std::string p = fixture.file_path();
    auto loaded =
        fixture.load("[remote]\npassword = \"s3cret\"\nfx_graph = true\n[resp]\npassword = "
                     "\"letmein\"\n[disk]\ncache_dir = \"/srv/c\\\"q\"\n",
                     {{"TORCHINDUCTOR_FX_GRAPH_CACHE", "0"}, {"PT2CACHE_LOG_LEVEL", "debug"}},
                     {{"disk.max_size", "1KiB"}});
    REQUIRE(loaded);
    std::string out = render(*loaded);
    INFO(out);
    CHECK(out.find("s3cret") == std::string::npos);
    CHECK(out.find("letmein") == std::string::npos);
    CHECK(has_line(out, "# config file: " + p));
    // Callers print the warnings themselves.
    CHECK(loaded->warnings.size() == 1);
    CHECK(out.find("warning") == std::string::npos);
    CHECK(has_line(out, "caches.fx_graph_cache = false  # env TORCHINDUCTOR_FX_GRAPH_CACHE"));
    CHECK(has_line(out, "caches.autograd_cache = false  # env TORCHINDUCTOR_FX_GRAPH_CACHE"));
    CHECK(has_line(out, "daemon.log_level = \"debug\"  # env PT2CACHE_LOG_LEVEL"));
    CHECK(has_line(out, "disk.max_size = 1024  # flag"));
    CHECK(has_line(out, "disk.cache_dir = \"/srv/c\\\"q\"  # file " + p));
    CHECK(has_line(out, "remote.password = \"***\"  # file " + p));
    CHECK(has_line(out, "resp.password = \"***\"  # file " + p));
    CHECK(has_line(out, "remote.fx_graph = true  # file " + p));
    CHECK(has_line(out, "# remote.enabled = true (true when any remote switch is on)"));
}

TEST_CASE("render masks the password inside a Redis URL", "[config][render]") {
    ConfigFixture fixture;
    SECTION("from the environment") {
        auto loaded = fixture.load("", {{"TORCHINDUCTOR_REDIS_URL", "redis://user:pw@h:7000/3"}});
        REQUIRE(loaded);
        std::string out = render(*loaded);
        INFO(out);
        CHECK(out.find(":pw@") == std::string::npos);
        CHECK(has_line(
            out, "remote.url = \"redis://user:***@h:7000/3\"  # env TORCHINDUCTOR_REDIS_URL"));
        CHECK(has_line(out, "remote.password = \"***\"  # env TORCHINDUCTOR_REDIS_URL"));
        CHECK(has_line(out, "remote.username = \"user\"  # env TORCHINDUCTOR_REDIS_URL"));
        CHECK(has_line(out, "remote.port = 7000  # env TORCHINDUCTOR_REDIS_URL"));
    }
    SECTION("from a flag") {
        auto loaded = fixture.load("", {}, {{"remote.url", "redis://:pw@h"}});
        REQUIRE(loaded);
        std::string out = render(*loaded);
        INFO(out);
        CHECK(has_line(out, "remote.url = \"redis://:***@h\"  # flag"));
        CHECK(has_line(out, "remote.host = \"h\"  # flag remote.url"));
        CHECK(has_line(out, "remote.password = \"***\"  # flag remote.url"));
    }
}

TEST_CASE("render's output loads back to the same values", "[config][render]") {
    ConfigFixture fixture;
    auto first = fixture.load(
        "[daemon]\nio_threads = 5\nmax_value_size = \"1MiB\"\n[remote]\nurl = "
        "\"unix:///run/r.sock?db=2\"\nautotune = true\n[caches]\nforce_disable_caches = true\n",
        {{"TORCHINDUCTOR_REDIS_EXPIRE", "30"}}, {{"bundle.idle_timeout_s", "9"}});
    REQUIRE(first);
    std::string rendered = render(*first);

    LoadOptions options;
    options.config_path = fixture.write("rendered.toml", rendered);
    auto second = load(options, fixture.env());
    REQUIRE(second);
    CHECK(values_of(render(*second)) == values_of(rendered));
    CHECK(second->config.redis_unix_socket == "/run/r.sock");
    CHECK(second->config.redis_db == 2);
    CHECK(second->config.bundle_idle_timeout_s == 9);
    CHECK(values_of(rendered).size() == 53);
}
