// SPDX-License-Identifier: MIT
#include <cstdio>
#include <string>
#include <unistd.h>
#include <vector>

#include "client/cxx/compiler.hpp"
#include "client/cxx/entries.hpp"
#include "proto/bytes.hpp"

#include <catch2/catch.hpp>

using namespace pt2cache::client;
using namespace pt2cache::client::cxx;

namespace {

std::string read_fd(int fd) {
    std::string text;
    ::lseek(fd, 0, SEEK_SET);
    char buffer[65536];
    for (;;) {
        const auto n = ::read(fd, buffer, sizeof buffer);
        if (n <= 0) {
            break;
        }
        text.append(buffer, static_cast<std::size_t>(n));
    }
    return text;
}

struct TempFd {
    int fd;
    TempFd() {
        char name[] = "/tmp/pt2cache-test-XXXXXX";
        fd = ::mkstemp(name);
        ::unlink(name);
    }
    ~TempFd() { ::close(fd); }
};

InputRecord input(std::string path, char fill) {
    InputRecord record;
    record.path = std::move(path);
    record.status = FileStatus::ok;
    record.size = 10;
    record.hash.fill(std::byte(fill));
    return record;
}

} // namespace

TEST_CASE("results round-trip with output, stdout, stderr and build time", "[cxx][entries]") {
    BuildRecord record;
    record.build_ms = 4321;
    record.mode = 0777;
    record.out = "out text";
    record.err = "warning: @PT2_SRCDIR@/k.cpp";
    std::string output(3'000'000, '\0');
    for (std::size_t i = 0; i < output.size(); ++i) {
        output[i] = static_cast<char>((i * 7919) >> 5);
    }
    const auto value = encode_result(record, pt2cache::proto::as_bytes(output));
    REQUIRE_FALSE(value.empty());
    TempFd file;
    const auto decoded = decode_result(value, file.fd);
    REQUIRE(decoded);
    CHECK(decoded->build_ms == 4321);
    CHECK(decoded->mode == 0777);
    CHECK(decoded->out == record.out);
    CHECK(decoded->err == record.err);
    CHECK(read_fd(file.fd) == output);

    // Empty everything.
    const auto empty = encode_result(BuildRecord{}, {});
    TempFd none;
    REQUIRE(decode_result(empty, none.fd));
    CHECK(read_fd(none.fd).empty());
}

TEST_CASE("corrupt or truncated results are refused", "[cxx][entries]") {
    BuildRecord record;
    record.err = "e";
    const std::string output(100'000, 'x');
    const auto value = encode_result(record, pt2cache::proto::as_bytes(output));
    for (const std::size_t at :
         {std::size_t{0}, std::size_t{8}, std::size_t{60}, value.size() / 2, value.size() - 1}) {
        auto bad = value;
        bad[at] ^= std::byte{0x01};
        TempFd file;
        CHECK_FALSE(decode_result(bad, file.fd));
    }
    for (const std::size_t size : {std::size_t{0}, std::size_t{51}, value.size() - 17}) {
        TempFd file;
        CHECK_FALSE(decode_result(std::span(value).first(size), file.fd));
    }
}

TEST_CASE("manifests keep variants, newest first, bounded", "[cxx][entries]") {
    Manifest manifest;
    const Variant a = {input("@PT2_SRCDIR@/a.h", 'a'), input("/usr/include/x.h", 'x')};
    Variant b = a;
    b[0].hash.fill(std::byte{'b'});
    InputRecord absent;
    absent.path = "/usr/include/a.h.gch";
    b.push_back(absent);
    manifest.add(a);
    manifest.add(b);
    manifest.add(a); // moves to the front, not duplicated
    REQUIRE(manifest.variants.size() == 2);
    CHECK(manifest.variants[0] == a);
    const auto decoded = Manifest::decode(manifest.encode());
    REQUIRE(decoded);
    CHECK(decoded->variants == manifest.variants);
    CHECK(result_key("k", a) != result_key("k", b));
    CHECK(result_key("k", a) != result_key("k2", a));
    CHECK(result_key("k", a).starts_with("r-"));

    for (int i = 0; i < 40; ++i) {
        manifest.add({input("/v" + std::to_string(i), 'v')});
    }
    CHECK(manifest.variants.size() == Manifest::k_max_variants);
    CHECK(manifest.variants[0][0].path == "/v39");

    auto bytes = manifest.encode();
    bytes[20] ^= std::byte{1};
    CHECK_FALSE(Manifest::decode(bytes));
    CHECK_FALSE(Manifest::decode(std::span(bytes).first(10)));
}

TEST_CASE("key fields are length-delimited", "[cxx][entries]") {
    KeyHasher one;
    one.field("a", "bc");
    KeyHasher two;
    two.field("ab", "c");
    CHECK(one.hex_digest() != two.hex_digest());
    CHECK(one.hex_digest().size() == 32);
}

TEST_CASE("compiler facts round-trip and refuse garbage", "[cxx][compiler]") {
    CompilerFacts facts;
    facts.version = "g++ (Debian 12.2.0-14) 12.2.0\n";
    facts.native = "-march=skylake\n";
    facts.library_dirs = {"/usr/lib/gcc/x86_64-linux-gnu/12/", "/lib/x86_64-linux-gnu/"};
    facts.start_files = {"/usr/lib/x86_64-linux-gnu/crti.o"};
    facts.programs = {"/usr/lib/gcc/x86_64-linux-gnu/12/cc1plus", "as", "ld"};
    const auto decoded = CompilerFacts::decode(facts.encode());
    REQUIRE(decoded);
    CHECK(decoded->version == facts.version);
    CHECK(decoded->native == facts.native);
    CHECK(decoded->library_dirs == facts.library_dirs);
    CHECK(decoded->start_files == facts.start_files);
    CHECK(decoded->programs == facts.programs);
    // Facts of the first format (no start files nor programs) are learnt again.
    CHECK_FALSE(CompilerFacts::decode("pt2cache-cxx compiler facts 1\n1\nv1\nn1\n0"));
    auto text = facts.encode();
    CHECK_FALSE(CompilerFacts::decode(text.substr(0, text.size() - 1)));
    CHECK_FALSE(CompilerFacts::decode("nonsense"));
    CHECK_FALSE(machine_fingerprint().empty());
}
