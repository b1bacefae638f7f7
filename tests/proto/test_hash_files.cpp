// SPDX-License-Identifier: MIT
#include <string>
#include <vector>

#include "proto/bytes.hpp"
#include "proto/cxx_value.hpp"
#include "proto/frame.hpp"
#include "proto/hash_files.hpp"

#include <catch2/catch.hpp>

using namespace pt2cache::proto;

namespace {

// The body of a request frame encoded by encode_hash_files.
std::vector<std::byte> request_body(const std::vector<std::string>& paths) {
    std::vector<std::byte> frame;
    encode_hash_files(frame, 7, paths);
    auto header = decode_request_header(std::span(frame).first<k_header_size>(), Limits{});
    REQUIRE(header);
    CHECK(header->op == Op::hash_files);
    CHECK(header->id == 7);
    REQUIRE(header->length == frame.size() - k_header_size);
    return {frame.begin() + k_header_size, frame.end()};
}

} // namespace

TEST_CASE("HASH_FILES request round-trips", "[proto][hash_files]") {
    const std::vector<std::string> paths = {"/usr/include/stdio.h", "/a b/c"};
    const auto body = request_body(paths);
    const auto parsed = parse_hash_files(body);
    REQUIRE(parsed);
    REQUIRE(parsed->size() == 2);
    CHECK((*parsed)[0] == "/usr/include/stdio.h");
    CHECK((*parsed)[1] == "/a b/c");
}

TEST_CASE("HASH_FILES request refuses bad paths and counts", "[proto][hash_files]") {
    CHECK_FALSE(parse_hash_files(request_body({"relative/path"})));
    CHECK_FALSE(parse_hash_files(request_body({""})));
    CHECK_FALSE(parse_hash_files(request_body({std::string("/nul\0x", 6)})));
    CHECK_FALSE(parse_hash_files(request_body({"/" + std::string(k_max_hash_path, 'x')})));
    CHECK_FALSE(parse_hash_files(request_body({})));
    std::vector<std::string> many(k_max_hash_files + 1, "/x");
    CHECK_FALSE(parse_hash_files(request_body(many)));
    many.pop_back();
    CHECK(parse_hash_files(request_body(many)));
    // Truncated and trailing bytes.
    auto body = request_body({"/abc"});
    CHECK_FALSE(parse_hash_files(std::span(body).first(body.size() - 1)));
    body.push_back(std::byte{0});
    const auto error = parse_hash_files(body);
    REQUIRE_FALSE(error);
    CHECK(error.error().status == Status::malformed);
}

TEST_CASE("HASH_FILES body above its limit is refused before reading", "[proto][hash_files]") {
    std::vector<std::byte> frame;
    encode_header({Op::hash_files, 0, 1, static_cast<std::uint32_t>(k_max_hash_files_body + 1)},
                  frame);
    const auto header = decode_request_header(std::span(frame).first<k_header_size>(), Limits{});
    REQUIRE_FALSE(header);
    CHECK(header.error().status == Status::malformed);
    CHECK(op_name(Op::hash_files) == "HASH_FILES");
}

TEST_CASE("HASH_FILES response round-trips and is checked", "[proto][hash_files]") {
    std::vector<FileHash> hashes(3);
    hashes[0].status = FileStatus::ok;
    hashes[0].size = 42;
    hashes[0].hash.fill(std::byte{0xAB});
    hashes[1].status = FileStatus::not_found;
    hashes[1].size = 99; // not sent for a non-OK status
    hashes[2].status = FileStatus::skipped;
    const auto body = encode_hash_files_body(hashes);
    CHECK(body.size() == 2 + 3 * k_file_hash_size);
    const auto parsed = parse_hash_files_response(body, 3);
    REQUIRE(parsed);
    CHECK((*parsed)[0].status == FileStatus::ok);
    CHECK((*parsed)[0].size == 42);
    CHECK((*parsed)[0].hash == hashes[0].hash);
    CHECK((*parsed)[1].status == FileStatus::not_found);
    CHECK((*parsed)[1].size == 0);
    CHECK((*parsed)[2].status == FileStatus::skipped);
    CHECK_FALSE(parse_hash_files_response(body, 2));
    auto bad = body;
    bad[2] = std::byte{6}; // unknown status
    CHECK_FALSE(parse_hash_files_response(bad, 3));
    CHECK_FALSE(parse_hash_files_response(std::span(body).first(body.size() - 1), 3));
}

TEST_CASE("cxx result header round-trips and rejects non-results", "[proto][cxx]") {
    cxx::ResultHeader header;
    header.build_ms = 1234;
    header.mode = 0777;
    header.stdout_size = 1;
    header.stderr_size = 2;
    header.output_size = 3;
    header.compressed_size = 5;
    std::vector<std::byte> value;
    cxx::encode_result_header(header, value);
    CHECK(value.size() == cxx::k_result_header_size);
    value.resize(value.size() + 5 + cxx::k_checksum_size);
    const auto parsed = cxx::parse_result_header(value);
    REQUIRE(parsed);
    CHECK(parsed->build_ms == 1234);
    CHECK(parsed->mode == 0777);
    CHECK(parsed->compressed_size == 5);
    // Sizes that do not add up, a short value, a wrong magic.
    value.push_back(std::byte{0});
    CHECK_FALSE(cxx::parse_result_header(value));
    CHECK_FALSE(cxx::parse_result_header(std::span(value).first(10)));
    value.pop_back();
    value[0] = std::byte{'X'};
    CHECK_FALSE(cxx::parse_result_header(value));
}
