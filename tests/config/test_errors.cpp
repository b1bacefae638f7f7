// SPDX-License-Identifier: MIT
#include <sys/stat.h>

#include "config/config.hpp"
#include "tests/config/helpers.hpp"

#include <catch2/catch.hpp>
#include <fmt/core.h>

using namespace pt2cache::config;
using pt2cache::tests::ConfigFixture;
using pt2cache::tests::make_env;

namespace {

constexpr std::string_view k_size_hint = "(suffixes: B, KiB, MiB, GiB, TiB, kB, MB, GB, TB)";
constexpr std::string_view k_url_forms =
    "expected redis[s]://[user:password@]host[:port][/db] (rediss: TLS) or unix:///path[?db=N]";

// Loads and returns the error, which must be one line.
std::string error_of(const tl::expected<Loaded, ConfigError>& loaded) {
    REQUIRE_FALSE(loaded);
    const std::string& message = loaded.error().message;
    CHECK(message.find('\n') == std::string::npos);
    return message;
}

} // namespace

TEST_CASE("file errors name the file, the key and what is accepted", "[config][errors][file]") {
    ConfigFixture fixture;
    const std::string p = fixture.file_path();
    struct Row {
        std::string text;
        std::string message; // after "<path>: "
    };
    const Row rows[] = {
        {"[cache]\nmax_size = 1\n",
         "cache: unknown section; the sections are daemon, memory, disk, caches, remote, resp, "
         "bundle, metrics"},
        {"max_size = 1\n",
         "max_size: unknown section; the sections are daemon, memory, disk, caches, remote, "
         "resp, bundle, metrics"},
        {"disk = 5\n", "disk: expected a table [disk], got 5"},
        {"[disk]\nmaxsize = 1\n",
         "disk.maxsize: unknown key; [disk] accepts cache_dir, max_size, compress_threshold, "
         "compress_level, write_mode, write_queue_size, small_entry_max"},
        {"[disk.extra]\nx = 1\n",
         "disk.extra: unknown key; [disk] accepts cache_dir, max_size, compress_threshold, "
         "compress_level, write_mode, write_queue_size, small_entry_max"},
        {"[resp]\nport = 1\n", "resp.port: unknown key; [resp] accepts password"},
        // wrong type
        {"[daemon]\nio_threads = \"4\"\n",
         "daemon.io_threads: expected an integer from 1 to 64, got \"4\""},
        {"[caches]\nfx_graph_cache = \"yes\"\n",
         "caches.fx_graph_cache: expected true or false, got \"yes\""},
        {"[caches]\nfx_graph_cache = 1\n", "caches.fx_graph_cache: expected true or false, got 1"},
        {"[daemon]\nsocket = 5\n", "daemon.socket: expected a string, got 5"},
        {"[remote]\nhost = [\"a\"]\n", "remote.host: expected a string, got an array"},
        {"[daemon]\nidle_exit_s = 1.5\n",
         "daemon.idle_exit_s: expected an integer of at least 0, got 1.5"},
        // out of range
        {"[daemon]\nio_threads = 0\n",
         "daemon.io_threads: expected an integer from 1 to 64, got 0"},
        {"[daemon]\nblocking_threads = 257\n",
         "daemon.blocking_threads: expected an integer from 1 to 256, got 257"},
        {"[daemon]\nidle_exit_s = -1\n",
         "daemon.idle_exit_s: expected an integer of at least 0, got -1"},
        {"[disk]\ncompress_level = 20\n",
         "disk.compress_level: expected an integer from 1 to 19, got 20"},
        {"[disk]\nwrite_mode = \"later\"\n",
         "disk.write_mode: expected one of sync, async; got \"later\""},
        {"[disk]\nwrite_mode = 1\n", "disk.write_mode: expected a string, got 1"},
        {"[remote]\nport = 70000\n", "remote.port: expected an integer from 1 to 65535, got 70000"},
        {"[remote]\nconnect_timeout_ms = 0\n",
         "remote.connect_timeout_ms: expected an integer from 1 to 60000, got 0"},
        {"[remote]\nop_timeout_ms = 600001\n",
         "remote.op_timeout_ms: expected an integer from 1 to 600000, got 600001"},
        {"[remote]\npool_size = 65\n",
         "remote.pool_size: expected an integer from 1 to 64, got 65"},
        {"[remote]\nmax_value_size = 0\n",
         "remote.max_value_size: expected a size from 1 to 4294967295 bytes, got 0"},
        {"[remote]\nmax_value_size = \"4GiB\"\n",
         "remote.max_value_size: expected a size from 1 to 4294967295 bytes, got \"4GiB\""},
        {"[bundle]\nidle_timeout_s = 0\n",
         "bundle.idle_timeout_s: expected an integer from 1 to 4294967295, got 0"},
        {"[daemon]\nmax_value_size = \"4GiB\"\n",
         "daemon.max_value_size: expected a size from 1 to 4294967295 bytes, got \"4GiB\""},
        {"[daemon]\nmax_value_size = 0\n",
         "daemon.max_value_size: expected a size from 1 to 4294967295 bytes, got 0"},
        // bad size
        {"[disk]\nmax_size = \"ten\"\n",
         fmt::format("disk.max_size: expected a size like 10GiB or an integer number of bytes, "
                     "got \"ten\" {}",
                     k_size_hint)},
        {"[disk]\nmax_size = 1.5\n",
         "disk.max_size: expected a size like 10GiB or an integer number of bytes, got 1.5"},
        {"[memory]\nmax_size = -1\n",
         "memory.max_size: expected a size like 10GiB or an integer number of bytes, got -1"},
        // strings with a form
        {"[daemon]\nlog_level = \"verbose\"\n",
         "daemon.log_level: expected one of trace, debug, info, warn, error, critical, off; got "
         "\"verbose\""},
        {"[disk]\ncache_dir = \"\"\n", "disk.cache_dir: expected a non-empty string, got \"\""},
        {"[remote]\nurl = \"http://h\"\n",
         fmt::format("remote.url: unsupported scheme \"http\" in \"http://h\"; {}", k_url_forms)},
        {"[remote]\nurl = \"redis://:hunter2@h:0\"\n",
         fmt::format("remote.url: bad port \"0\" (1 to 65535) in \"redis://:***@h:0\"; {}",
                     k_url_forms)},
    };
    for (const auto& row : rows) {
        INFO(row.text);
        CHECK(error_of(fixture.load(row.text)) == fmt::format("{}: {}", p, row.message));
    }
}

TEST_CASE("a TOML syntax error names the file, line and column", "[config][errors][file]") {
    ConfigFixture fixture;
    const std::string p = fixture.file_path();
    // The description after the prefix is toml++'s own wording.
    std::string syntax = error_of(fixture.load("[daemon]\nio_threads = = 3\n"));
    CHECK(syntax.starts_with(p + ":2:14: TOML syntax error: "));
    CHECK(syntax.find("could not determine value type") != std::string::npos);
    std::string duplicate = error_of(fixture.load("[disk]\nmax_size = 1\nmax_size = 2\n"));
    CHECK(duplicate.starts_with(p + ":3:"));
    CHECK(duplicate.find("cannot redefine existing integer 'max_size'") != std::string::npos);
    CHECK(error_of(fixture.load("[daemon\n")).starts_with(p + ":1:"));
}

TEST_CASE("an unreadable config file is an error", "[config][errors][file]") {
    ConfigFixture fixture;
    LoadOptions options;
    options.config_path = fixture.home() + "/missing.toml";
    CHECK(error_of(load(options, fixture.env())) ==
          fixture.home() + "/missing.toml: cannot read the config file: No such file or directory");
    options.config_path = fixture.home();
    CHECK(error_of(load(options, fixture.env())) ==
          fixture.home() + ": cannot read the config file: it is a directory");
}

TEST_CASE("a config file must be a regular file", "[config][errors][file]") {
    // A FIFO held the daemon's start (and the loop that reloads on SIGHUP)
    // until someone wrote to it.
    ConfigFixture fixture;
    const std::string fifo = fixture.home() + "/fifo.toml";
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    LoadOptions options;
    options.config_path = fifo;
    CHECK(error_of(load(options, fixture.env())) ==
          fifo + ": cannot read the config file: not a regular file (a FIFO, socket or device)");
    options.config_path = "/dev/zero";
    CHECK(error_of(load(options, fixture.env())) ==
          "/dev/zero: cannot read the config file: not a regular file (a FIFO, socket or device)");
}

TEST_CASE("keys and headers of many dotted parts are refused before parsing",
          "[config][errors][file]") {
    // toml++ recursed once per part: 50,000 crashed the daemon (stack).
    ConfigFixture fixture;
    const std::string p = fixture.file_path();
    std::string deep_header = "[daemon]\nio_threads = 2\n\n[a";
    std::string deep_key = "[daemon]\na";
    for (int i = 0; i < 60'000; ++i) {
        deep_header += ".a";
        deep_key += ".a";
    }
    deep_header += "]\n";
    deep_key += " = 1\n";
    const std::string why =
        "a key or table header of more than 16 dotted parts (a setting has two: [section] name)";
    CHECK(error_of(fixture.load(deep_header)) == p + ":4: " + why);
    CHECK(error_of(fixture.load(deep_key)) == p + ":2: " + why);
    std::string quoted = "[\"a\"";
    for (int i = 0; i < 20; ++i) {
        quoted += ".\"a\"";
    }
    CHECK(error_of(fixture.load(quoted + "]\n")) == p + ":1: " + why);
    // Dots in strings, comments, values and arrays are not parts.
    std::string fine = "# a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r.s\n[daemon]\nlog_level = "
                       "\"a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r\" # x.y.z\n"
                       "[disk]\ncache_dir = \'\'\'/a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q\'\'\'\n";
    const std::string error = error_of(fixture.load(fine));
    CHECK(error.find("dotted parts") == std::string::npos);
    CHECK(error.find("log_level") != std::string::npos); // not a level: the next check
    // A multi-line string that ends with quotes of its own (""""x"""" is
    // "x"): the scanner stays in step with toml++, in both directions.
    const std::string quoted_end = "[remote]\npassword = \"\"\"\"This,\" she said, \"is "
                                   "pointless.\"\"\"\" # see \"a.b.c.d.e.f.g.h.i.j.k.l.m.n.o."
                                   "p.q\"\n";
    CHECK(fixture.load(quoted_end));
    std::string hidden = "[remote]\npassword = \"\"\"x\"\"\"\" # \"\"\"\"\na";
    for (int i = 0; i < 60'000; ++i) {
        hidden += ".a";
    }
    CHECK(error_of(fixture.load(hidden + " = 1\n")) == p + ":3: " + why);
}

TEST_CASE("a NUL byte in a text setting is refused", "[config][errors][file]") {
    // "/x\0y" would silently be "/x" for every system call.
    ConfigFixture fixture;
    const std::string p = fixture.file_path();
    CHECK(error_of(fixture.load("[disk]\ncache_dir = \"/tmp/cd\\u0000evil\"\n")) ==
          p + ": disk.cache_dir: expected no NUL byte (\\u0000) in the text");
    CHECK(error_of(fixture.load("[daemon]\nsocket = \"/tmp/s\\u0000\"\n")) ==
          p + ": daemon.socket: expected no NUL byte (\\u0000) in the text");
}

TEST_CASE("environment errors name the variable and the key", "[config][errors][env]") {
    ConfigFixture fixture;
    struct Row {
        std::string name;
        std::string value;
        std::string message;
    };
    const Row rows[] = {
        {"TORCHINDUCTOR_REDIS_PORT", "abc",
         "environment variable TORCHINDUCTOR_REDIS_PORT (remote.port): expected an integer "
         "from 1 to 65535, got \"abc\""},
        {"TORCHINDUCTOR_REDIS_PORT", "0",
         "environment variable TORCHINDUCTOR_REDIS_PORT (remote.port): expected an integer "
         "from 1 to 65535, got \"0\""},
        {"TORCHINDUCTOR_REDIS_EXPIRE", "-5",
         "environment variable TORCHINDUCTOR_REDIS_EXPIRE (remote.expire_s): expected an "
         "integer of at least 0, got \"-5\""},
        {"PT2CACHE_LOG_LEVEL", "loud",
         "environment variable PT2CACHE_LOG_LEVEL (daemon.log_level): expected one of trace, "
         "debug, info, warn, error, critical, off; got \"loud\""},
        {"TORCHINDUCTOR_REDIS_URL", "http://x",
         fmt::format("environment variable TORCHINDUCTOR_REDIS_URL (remote.url): unsupported "
                     "scheme \"http\" in \"http://x\"; {}",
                     k_url_forms)},
        {"TORCHINDUCTOR_REDIS_URL", "redis://u:hunter2@h:99999",
         fmt::format("environment variable TORCHINDUCTOR_REDIS_URL (remote.url): bad port "
                     "\"99999\" (1 to 65535) in \"redis://u:***@h:99999\"; {}",
                     k_url_forms)},
    };
    for (const auto& row : rows) {
        INFO(row.name << "=" << row.value);
        CHECK(error_of(fixture.load("", {{row.name, row.value}})) == row.message);
    }
}

TEST_CASE("flag errors name the key", "[config][errors][flags]") {
    ConfigFixture fixture;
    struct Row {
        std::string key;
        std::string value;
        std::string message;
    };
    const Row rows[] = {
        {"disk.maxsize", "1",
         "command line: disk.maxsize: unknown key; [disk] accepts cache_dir, max_size, "
         "compress_threshold, compress_level, write_mode, write_queue_size, small_entry_max"},
        {"disk.write_mode", "fast",
         "command line: disk.write_mode: expected one of sync, async; got \"fast\""},
        {"nosection", "1",
         "command line: nosection: unknown setting; expected section.key with a section among "
         "daemon, memory, disk, caches, remote, resp, bundle, metrics"},
        {"cache.max_size", "1",
         "command line: cache.max_size: unknown setting; expected section.key with a section "
         "among daemon, memory, disk, caches, remote, resp, bundle, metrics"},
        {"daemon.io_threads", "100",
         "command line: daemon.io_threads: expected an integer from 1 to 64, got \"100\""},
        {"remote.read_only", "maybe",
         "command line: remote.read_only: expected true or false (or 1/0, yes/no, on/off), got "
         "\"maybe\""},
        {"disk.max_size", "lots",
         fmt::format("command line: disk.max_size: expected a size like 10GiB or an integer "
                     "number of bytes, got \"lots\" {}",
                     k_size_hint)},
        {"daemon.socket", "", "command line: daemon.socket: expected a non-empty string, got \"\""},
    };
    for (const auto& row : rows) {
        INFO(row.key << "=" << row.value);
        CHECK(error_of(fixture.load("", {}, {{row.key, row.value}})) == row.message);
    }
}

TEST_CASE("a socket path too long for sun_path is an error", "[config][errors]") {
    ConfigFixture fixture;
    std::string dir = "/run/" + std::string(100, 'd');
    CHECK(error_of(fixture.load("", {{"XDG_RUNTIME_DIR", dir}})) ==
          fmt::format("daemon.socket (default from XDG_RUNTIME_DIR): expected a path of at most "
                      "107 bytes (the limit of a Unix socket address), got {} bytes",
                      dir.size() + 24));
    CHECK(error_of(fixture.load("", {{"PT2CACHE_SOCKET", "/" + std::string(107, 's')}})) ==
          "environment variable PT2CACHE_SOCKET (daemon.socket): expected a path of at most 107 "
          "bytes (the limit of a Unix socket address), got 108 bytes");
    auto fits = fixture.load("", {{"PT2CACHE_SOCKET", "/" + std::string(106, 's')}});
    CHECK(fits);
}
