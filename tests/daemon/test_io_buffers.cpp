// SPDX-License-Identifier: MIT
#include <cstring>
#include <string>

#include "daemon/io_buffers.hpp"

#include <catch2/catch.hpp>

using pt2cache::daemon::InputBuffer;

namespace {

void append(InputBuffer& input, const std::string& text) {
    auto space = input.prepare(text.size());
    std::memcpy(space.data(), text.data(), text.size());
    input.commit(text.size());
}

std::string readable(const InputBuffer& input) {
    const auto bytes = input.readable();
    return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

} // namespace

TEST_CASE("an input buffer gives back a consumed request's room, keeping what follows it",
          "[daemon][io_buffers]") {
    InputBuffer input;
    const std::string large(1 << 20, 'x');
    append(input, large + "next");
    REQUIRE(input.capacity() >= large.size());
    input.consume(large.size()); // "next" stays: consume alone keeps the room
    CHECK(input.capacity() >= large.size());
    input.shrink_to_content();
    CHECK(input.capacity() == InputBuffer::k_base);
    CHECK(readable(input) == "next");
    append(input, "more");
    CHECK(readable(input) == "nextmore");
}

TEST_CASE("an input buffer keeps its room while most of it is still to be read",
          "[daemon][io_buffers]") {
    InputBuffer input;
    const std::string large(1 << 20, 'y');
    append(input, large);
    input.consume(100);
    const auto capacity = input.capacity();
    input.shrink_to_content();
    CHECK(input.capacity() == capacity);
    CHECK(readable(input) == large.substr(100));
}
