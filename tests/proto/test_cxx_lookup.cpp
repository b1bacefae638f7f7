// SPDX-License-Identifier: MIT
#include <limits>
#include <string>
#include <vector>

#include "proto/bytes.hpp"
#include "proto/cxx_lookup.hpp"
#include "proto/cxx_manifest.hpp"
#include "proto/frame.hpp"

#include <catch2/catch.hpp>

using namespace pt2cache::proto;
using namespace pt2cache::proto::cxx;

namespace {

std::vector<std::byte> request_body(const LookupRequest& request) {
    std::vector<std::byte> frame;
    encode_lookup(frame, 3, request);
    auto header = decode_request_header(std::span(frame).first<k_header_size>(), Limits{});
    REQUIRE(header);
    CHECK(header->op == Op::cxx_lookup);
    CHECK(header->id == 3);
    REQUIRE(header->length == frame.size() - k_header_size);
    return {frame.begin() + k_header_size, frame.end()};
}

InputRecord input(std::string path, FileStatus status, char fill) {
    InputRecord record;
    record.path = std::move(path);
    record.status = status;
    record.size = status == FileStatus::ok ? 3 : 0;
    if (status == FileStatus::ok) {
        record.hash.fill(std::byte(fill));
    }
    return record;
}

FileHash now(FileStatus status, char fill) {
    FileHash hash;
    hash.status = status;
    if (status == FileStatus::ok) {
        hash.size = 3;
        hash.hash.fill(std::byte(fill));
    }
    return hash;
}

} // namespace

TEST_CASE("CXX_LOOKUP request round-trips", "[proto][cxx_lookup]") {
    LookupRequest request{"0123abcd", {{"@PT2_SRCDIR@", "/w/src"}, {"@PT2_TMPDIR@", "/tmp"}}};
    const auto body = request_body(request);
    const auto parsed = parse_lookup(body);
    REQUIRE(parsed);
    CHECK(parsed->common_key == "0123abcd");
    REQUIRE(parsed->rules.size() == 2);
    CHECK(parsed->rules[0].placeholder == "@PT2_SRCDIR@");
    CHECK(parsed->rules[0].directory == "/w/src");
    CHECK(parsed->rules[1].directory == "/tmp");
    CHECK(parse_lookup(request_body(LookupRequest{"k", {}}))); // no rules
}

TEST_CASE("CXX_LOOKUP request limits", "[proto][cxx_lookup]") {
    const auto refused = [](LookupRequest request) {
        CHECK(lookup_request_error(request));
        std::vector<std::byte> frame;
        encode_lookup(frame, 1, request);
        const auto parsed = parse_lookup(std::span(frame).subspan(k_header_size));
        REQUIRE_FALSE(parsed);
        CHECK(parsed.error().status == Status::malformed);
    };
    refused({"", {}});
    refused({std::string(k_max_common_key + 1, 'k'), {}});
    refused({"k", std::vector<PlaceholderRule>(k_max_lookup_rules + 1, {"@P@", "/d"})});
    refused({"k", {{"", "/d"}}});
    refused({"k", {{"@P@", "relative"}}});
    refused({"k", {{"@P@", std::string("/a\0b", 4)}}});
    refused({"k", {{"@P@", "/" + std::string(k_max_rule_directory, 'd')}}});
    CHECK_FALSE(lookup_request_error(
        {std::string(k_max_common_key, 'k'),
         std::vector<PlaceholderRule>(k_max_lookup_rules,
                                      {std::string(255, 'p'), "/" + std::string(4095, 'd')})}));
    // The largest legal request fits the op's body limit.
    LookupRequest largest{
        std::string(k_max_common_key, 'k'),
        std::vector<PlaceholderRule>(k_max_lookup_rules,
                                     {std::string(255, 'p'), "/" + std::string(4095, 'd')})};
    CHECK(request_body(largest).size() <= max_request_body(Op::cxx_lookup, Limits{}));

    auto body = request_body({"k", {{"@P@", "/d"}}});
    body.push_back(std::byte{0});
    CHECK_FALSE(parse_lookup(body)); // trailing bytes
    body.resize(body.size() - 2);
    CHECK_FALSE(parse_lookup(body)); // truncated rule
}

TEST_CASE("CXX_LOOKUP response round-trips and is checked", "[proto][cxx_lookup]") {
    const std::vector<std::byte> manifest(40, std::byte{7});
    const std::vector<std::byte> result(10, std::byte{9});
    std::vector<std::byte> frame;
    encode_lookup_response_head(frame, 4, LookupOutcome::hit, manifest, result.size());
    frame.insert(frame.end(), result.begin(), result.end());
    const auto header = decode_response_header(std::span(frame).first<k_header_size>());
    REQUIRE(header);
    CHECK(header->length == frame.size() - k_header_size);
    const auto parsed = parse_lookup_response(std::span(frame).subspan(k_header_size));
    REQUIRE(parsed);
    CHECK(parsed->outcome == LookupOutcome::hit);
    CHECK(std::ranges::equal(parsed->manifest, manifest));
    CHECK(std::ranges::equal(parsed->result, result));

    const auto body_of = [](LookupOutcome outcome, std::span<const std::byte> m,
                            std::span<const std::byte> r) {
        std::vector<std::byte> out;
        encode_lookup_response_head(out, 1, outcome, m, r.size());
        out.insert(out.end(), r.begin(), r.end());
        out.erase(out.begin(), out.begin() + k_header_size);
        return out;
    };
    CHECK(parse_lookup_response(body_of(LookupOutcome::no_manifest, {}, {})));
    CHECK(parse_lookup_response(body_of(LookupOutcome::undecided, manifest, {})));
    CHECK_FALSE(parse_lookup_response(body_of(LookupOutcome::no_manifest, manifest, {})));
    CHECK_FALSE(parse_lookup_response(body_of(LookupOutcome::no_match, manifest, result)));
    auto unknown = body_of(LookupOutcome::no_match, manifest, {});
    unknown[0] = std::byte{4};
    CHECK_FALSE(parse_lookup_response(unknown));
    auto cut = body_of(LookupOutcome::no_match, manifest, {});
    cut.pop_back();
    CHECK_FALSE(parse_lookup_response(cut)); // ends inside the manifest
}

TEST_CASE("a CXX_LOOKUP response fits one frame or is not sent", "[proto][cxx_lookup]") {
    constexpr std::size_t max = 0xFFFF'FFFFu;
    CHECK(lookup_response_fits(0, 0));
    CHECK(lookup_response_fits(max - 5, 0));
    CHECK(lookup_response_fits(0, max - 5));
    CHECK(lookup_response_fits(1000, max - 1005));
    CHECK_FALSE(lookup_response_fits(1000, max - 1004));
    CHECK_FALSE(lookup_response_fits(max - 4, 0));
    CHECK_FALSE(lookup_response_fits(k_max_frame_value, k_max_frame_value));
    CHECK_FALSE(lookup_response_fits(std::numeric_limits<std::size_t>::max(), 1));
}

TEST_CASE("placeholders expand rule by rule, in order", "[proto][cxx_lookup]") {
    const std::vector<PlaceholderRule> rules = {{"@PT2_SRCDIR@", "/w/a"}, {"@PT2_TMPDIR@", "/t"}};
    CHECK(expand_placeholders("@PT2_SRCDIR@/k.h", rules) == "/w/a/k.h");
    CHECK(expand_placeholders("@PT2_TMPDIR@/x/@PT2_SRCDIR@", rules) == "/t/x//w/a");
    CHECK(expand_placeholders("/usr/include/cmath", rules) == "/usr/include/cmath");
    CHECK(expand_placeholders("@PT2_CACHEDIR@/h", rules) == "@PT2_CACHEDIR@/h");
    // Rules apply one after the other: a later rule expands what an earlier one put in.
    const std::vector<PlaceholderRule> tricky = {{"@A@", "/@B@"}, {"@B@", "/b"}};
    CHECK(expand_placeholders("@A@/f", tricky) == "//b/f");
    // A match is looked for after the previous one, never in what it put in.
    const std::vector<PlaceholderRule> again = {{"@A@", "/x@A@"}};
    CHECK(expand_placeholders("@A@@A@", again) == "/x@A@/x@A@");
}

TEST_CASE("placeholder expansion stops at a length", "[proto][cxx_lookup]") {
    const std::vector<PlaceholderRule> rules = {{"@A@", "/aaaa"}, {"a", "/bb"}};
    CHECK(expand_placeholders("@A@/f", rules) == "//bb/bb/bb/bb/f");
    CHECK(expand_placeholders_within("@A@/f", rules, 15) == "//bb/bb/bb/bb/f");
    CHECK_FALSE(expand_placeholders_within("@A@/f", rules, 14));
    CHECK_FALSE(expand_placeholders_within("/toolong", {}, 7));
    CHECK(expand_placeholders_within("/short", {}, 6) == "/short");
    // Rules that multiply: each '/' becomes 4096, twice (16 M per '/'), then
    // doubled: refused after a few KB of work, not expanded.
    const std::vector<PlaceholderRule> growing = {
        {"/", std::string(4096, '/')}, {"/", std::string(4096, '/')}, {"/", "//"}};
    CHECK_FALSE(expand_placeholders_within("/a/b/c", growing, 4096));
}

TEST_CASE("manifest variants match on status and hash of every input", "[proto][cxx_lookup]") {
    Manifest manifest;
    manifest.variants.push_back(
        {input("/h.h", FileStatus::ok, 'a'), input("/h.h.gch", FileStatus::not_found, 0)});
    manifest.variants.push_back(
        {input("/h.h", FileStatus::ok, 'b'), input("/g.h", FileStatus::ok, 'c')});
    const auto paths = manifest_paths(manifest);
    REQUIRE(paths.paths.size() == 3);
    CHECK(paths.paths[0] == "/h.h");
    CHECK(paths.paths[1] == "/h.h.gch");
    CHECK(paths.paths[2] == "/g.h");
    CHECK(paths.index[1] == std::vector<std::size_t>{0, 2});

    std::vector<FileHash> state = {now(FileStatus::ok, 'a'), now(FileStatus::not_found, 0),
                                   now(FileStatus::ok, 'c')};
    CHECK(variant_matches(manifest, paths, 0, state));
    CHECK_FALSE(variant_matches(manifest, paths, 1, state));
    state[0] = now(FileStatus::ok, 'b');
    CHECK_FALSE(variant_matches(manifest, paths, 0, state));
    CHECK(variant_matches(manifest, paths, 1, state));
    // A .gch that appears, or an input that cannot be read, is a mismatch.
    state[0] = now(FileStatus::ok, 'a');
    state[1] = now(FileStatus::ok, 'z');
    CHECK_FALSE(variant_matches(manifest, paths, 0, state));
    state[1] = now(FileStatus::unreadable, 0);
    CHECK_FALSE(variant_matches(manifest, paths, 0, state));
}

TEST_CASE("a directory pin matches only where its placeholder expands to that directory",
          "[proto][cxx_lookup]") {
    const PlaceholderRule built{"@PT2_SRCDIR@", "/w/a"};
    const auto pin = pin_record(built);
    CHECK(pin.path == "@PT2_SRCDIR@");
    CHECK(pin.status == FileStatus::ok);

    Manifest manifest;
    manifest.variants.push_back({input("@PT2_SRCDIR@/k.cpp", FileStatus::ok, 'k'), pin});
    const auto paths = manifest_paths(manifest);
    const auto state_under = [&](const std::vector<PlaceholderRule>& rules) {
        std::vector<FileHash> state;
        for (const auto path : paths.paths) {
            const auto pinned = pin_state(path, rules);
            state.push_back(pinned ? *pinned : now(FileStatus::ok, 'k'));
        }
        return state;
    };
    CHECK(variant_matches(manifest, paths, 0, state_under({{"@PT2_SRCDIR@", "/w/a"}})));
    // Another directory, one that only starts like it, or no such rule at all.
    CHECK_FALSE(variant_matches(manifest, paths, 0, state_under({{"@PT2_SRCDIR@", "/w/b"}})));
    CHECK_FALSE(variant_matches(manifest, paths, 0, state_under({{"@PT2_SRCDIR@", "/w/a/x"}})));
    CHECK_FALSE(variant_matches(manifest, paths, 0, state_under({{"@PT2_TMPDIR@", "/w/a"}})));
    // Only a bare placeholder is a pin; paths under one are files to hash.
    CHECK_FALSE(pin_state("@PT2_SRCDIR@/k.cpp", {{{"@PT2_SRCDIR@", "/w/a"}}}));
    CHECK_FALSE(pin_state("/usr/include/cmath", {}));
    CHECK(pin_state("@PT2_CACHEDIR@", {})->status == FileStatus::unreadable);
    // A pin survives the manifest's encoding.
    const auto decoded = Manifest::decode(manifest.encode());
    REQUIRE(decoded);
    CHECK(decoded->variants == manifest.variants);
}
