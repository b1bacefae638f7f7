// SPDX-License-Identifier: MIT
//
// Bundles through client::Client and client::AutotuneCache against the real
// pt2cached: BUNDLE_BEGIN, puts and hits that join, BUNDLE_END, and the hit
// that restores the best-configs; bundle keys and JSON checked with python3.
#include <string>
#include <vector>

#include "client/autotune.hpp"
#include "tests/client/autotune_oracle.hpp"
#include "tests/client/helpers.hpp"

#include <catch2/catch.hpp>

using namespace pt2cache;
using client::AutotuneCache;
using client::AutotuneSettings;
using client::TritonConfig;
using tests::DaemonProcess;
using tests::triton_config;

namespace {

constexpr std::string_view k_code_hash = "c5fm3ytotq6wtwcguk5ogryyxg5usjtmewkhsyk4ltg7cprpjk7u";
constexpr std::string_view k_backend_hash = "B1F2C3D4E5-cuda-sm90";

std::string text_of(const client::Bytes& bytes) {
    return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

template <typename T>
T require_ok(tl::expected<T, client::Error> result) {
    INFO((result ? std::string() : tests::describe(result.error())));
    REQUIRE(result);
    return std::move(*result);
}

// A kernel's cache: file `name`, one candidate list each.
struct Kernel {
    std::string filename;
    std::vector<TritonConfig> configs;
    AutotuneSettings settings;
};

Kernel kernel(int i) {
    Kernel k;
    k.filename =
        "/tmp/torchinductor_u/k" + std::to_string(i) + "/kernel" + std::to_string(i) + ".py";
    k.configs = {triton_config({{"XBLOCK", 64 * (i + 1)}}, 4, 1),
                 triton_config({{"XBLOCK", 128 * (i + 1)}}, 8, 2)};
    k.settings.torch_key = tests::fake_torch_key();
    k.settings.backend_hash = std::string(k_backend_hash);
    k.settings.configs_hash = client::configs_hash(k.configs);
    k.settings.filename = k.filename;
    return k;
}

} // namespace

TEST_CASE("bundle begin, put, end, then begin hits and restores", "[bundle]") {
    PT2CACHE_REQUIRE_DAEMON();
    DaemonProcess daemon;
    client::Client client(tests::options_for(daemon));

    const auto begun = require_ok(client.bundle_begin(k_code_hash, k_backend_hash));
    CHECK_FALSE(begun.hit);
    CHECK(begun.entries == 0);
    CHECK(begun.time_saved_ms == 0);
    CHECK((client.capabilities() & 2u) != 0); // BUNDLE

    // Two best-configs join by PUT; a key of another form does not.
    const std::string a = std::string(64, 'a') + ".best_config";
    const std::string b = std::string(64, 'b') + ".best_config";
    const std::string a_json = R"({"XBLOCK": 64, "num_warps": 4, "num_stages": 1, )"
                               R"("configs_hash": "h", "found_by_coordesc": false, )"
                               R"("time_taken_ms": 1500, "triton_cache_hash": null})";
    const std::string b_json = R"({"XBLOCK": 8, "num_warps": 2, "num_stages": 1, )"
                               R"("configs_hash": "h", "found_by_coordesc": true, )"
                               R"("time_taken_ms": 250, "triton_cache_hash": "t"})";
    client::PutOptions in_bundle;
    in_bundle.bundle_token = begun.token;
    CHECK(require_ok(client.put("autotune", a, tests::bytes_of(a_json), in_bundle)));
    CHECK(require_ok(client.put("autotune", "remote::inner", tests::bytes_of(a_json), in_bundle)));
    // A hit with the token joins too (a kernel another model compiled).
    CHECK(require_ok(client.put("autotune", b, tests::bytes_of(b_json))));
    const auto hit = require_ok(client.get("autotune", b, begun.token));
    REQUIRE(hit);
    CHECK(text_of(*hit) == b_json);
    CHECK_FALSE(
        require_ok(client.get("autotune", std::string(64, 'c') + ".best_config", begun.token)));

    CHECK(require_ok(client.bundle_end(begun.token)) == 2);

    // Stored under Inductor's bundle key, as json.dumps({basename: data}).
    AutotuneSettings settings;
    settings.backend_hash = std::string(k_backend_hash);
    const auto inductor =
        tests::inductor_answer(settings, {}, {}, k_code_hash, {{a, a_json}, {b, b_json}});
    const auto bundle = require_ok(client.get("autotune-bundle", inductor.bundle_key));
    REQUIRE(bundle);
    CHECK(text_of(*bundle) == inductor.bundle);

    SECTION("an ended token is unknown") {
        auto again = client.bundle_end(begun.token);
        REQUIRE_FALSE(again);
        CHECK(again.error().kind == client::ErrorKind::server);
        CHECK(again.error().status == client::Status::unknown_token);
        CHECK(require_ok(client.ping()).count() >= 0); // the connection is still usable
    }
    SECTION("the next begin hits and restores the entries locally") {
        REQUIRE(require_ok(client.remove("autotune", a)));
        REQUIRE(require_ok(client.remove("autotune", b)));
        const auto restored = require_ok(client.bundle_begin(k_code_hash, k_backend_hash));
        CHECK(restored.hit);
        CHECK(restored.entries == 2);
        CHECK(restored.time_saved_ms == 1750);
        CHECK(restored.token != begun.token);
        const auto got_a = require_ok(client.get("autotune", a));
        REQUIRE(got_a);
        CHECK(text_of(*got_a) == a_json);
        const auto got_b = require_ok(client.get("autotune", b));
        REQUIRE(got_b);
        CHECK(text_of(*got_b) == b_json);
        // The bundle exists: ending stores nothing again.
        CHECK(require_ok(client.bundle_end(restored.token)) == 0);
    }
    SECTION("another backend is another bundle") {
        const auto other = require_ok(client.bundle_begin(k_code_hash, "other-backend"));
        CHECK_FALSE(other.hit);
        CHECK(require_ok(client.bundle_end(other.token)) == 0);
    }
}

TEST_CASE("bundle requests the daemon would refuse fail before sending", "[bundle]") {
    PT2CACHE_REQUIRE_DAEMON();
    DaemonProcess daemon;
    client::Client client(tests::options_for(daemon));
    auto empty = client.bundle_begin("", k_backend_hash);
    REQUIRE_FALSE(empty);
    CHECK(empty.error().status == client::Status::malformed);
    auto huge = client.bundle_begin(std::string(4000, 'c'), std::string(100, 'b'));
    REQUIRE_FALSE(huge);
    CHECK(huge.error().status == client::Status::malformed);
    CHECK_FALSE(client.connected()); // nothing was sent, not even HELLO

    auto unknown = client.get("autotune", std::string(64, 'a') + ".best_config", 0xDEADBEEF);
    REQUIRE_FALSE(unknown);
    CHECK(unknown.error().status == client::Status::unknown_token);
    client::PutOptions options;
    options.bundle_token = 0xDEADBEEF;
    auto put = client.put("autotune", "k", tests::bytes_of("{}"), options);
    REQUIRE_FALSE(put);
    CHECK(put.error().status == client::Status::unknown_token);
}

TEST_CASE("AutotuneCache joins a bundle with its token", "[bundle][autotune]") {
    PT2CACHE_REQUIRE_DAEMON();
    DaemonProcess daemon;
    client::Client client(tests::options_for(daemon));

    // Kernel 0 was compiled earlier, by another model: its entry hits.
    auto k0 = kernel(0);
    auto k1 = kernel(1);
    AutotuneCache earlier(client, k0.settings);
    REQUIRE(earlier.save(k0.configs[1], 2'000'000'000));

    const auto begun = require_ok(client.bundle_begin(k_code_hash, k_backend_hash));
    REQUIRE_FALSE(begun.hit);
    k0.settings.bundle_token = begun.token;
    k1.settings.bundle_token = begun.token;
    AutotuneCache cache0(client, k0.settings);
    AutotuneCache cache1(client, k1.settings);
    CHECK(cache0.read_best(k0.configs) == k0.configs[1]);
    CHECK_FALSE(cache1.read_best(k1.configs));
    REQUIRE(cache1.save(k1.configs[0], 500'000'000, false, "triton"));
    CHECK(cache1.bundle_token() == begun.token);
    CHECK(require_ok(client.bundle_end(begun.token)) == 2);

    const auto inductor = tests::inductor_answer(
        k1.settings, {}, {}, k_code_hash,
        {{cache0.local_key(), earlier.best_config(k0.configs[1], 2'000'000'000).to_json()},
         {cache1.local_key(),
          cache1.best_config(k1.configs[0], 500'000'000, false, "triton").to_json()}});
    const auto bundle = require_ok(client.get("autotune-bundle", inductor.bundle_key));
    REQUIRE(bundle);
    CHECK(text_of(*bundle) == inductor.bundle);

    // A fresh compile of the same module: the bundle restores both kernels'
    // local entries, so that read_best hits without the remote entries.
    REQUIRE(require_ok(client.remove("autotune", cache0.local_key())));
    REQUIRE(require_ok(client.remove("autotune", cache1.local_key())));
    REQUIRE(require_ok(client.remove("autotune", cache1.remote_key())));
    const auto again = require_ok(client.bundle_begin(k_code_hash, k_backend_hash));
    CHECK(again.hit);
    CHECK(again.entries == 2);
    CHECK(again.time_saved_ms == 2500);
    k1.settings.bundle_token = again.token;
    k1.settings.remote_cache = false;
    CHECK(AutotuneCache(client, k1.settings).read_best(k1.configs) == k1.configs[0]);
    CHECK(require_ok(client.bundle_end(again.token)) == 0);
}

TEST_CASE("AutotuneCache with an unknown token reads and writes without it", "[bundle][autotune]") {
    PT2CACHE_REQUIRE_DAEMON();
    DaemonProcess daemon;
    client::Client client(tests::options_for(daemon));
    auto k = kernel(3);
    k.settings.bundle_token = 0xBADC0FFEE;
    AutotuneCache cache(client, k.settings);
    auto saved = cache.save(k.configs[0], 1'000'000);
    INFO((saved ? std::string() : tests::describe(saved.error())));
    REQUIRE(saved);
    CHECK_FALSE(cache.bundle_token());
    CHECK(cache.read_best(k.configs) == k.configs[0]);

    k.settings.bundle_token = 0xBADC0FFEE;
    AutotuneCache reader(client, k.settings);
    CHECK(reader.read_best(k.configs) == k.configs[0]);
    CHECK_FALSE(reader.bundle_token());
}
