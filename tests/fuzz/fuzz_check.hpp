// SPDX-License-Identifier: MIT
// Shared by the fuzz targets: FUZZ_CHECK, which aborts (a crash to libFuzzer,
// a failure to the replay test) when a target's invariant does not hold, and
// FuzzInput, which carves typed values out of the fuzzer's bytes.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string_view>

namespace pt2cache::tests::fuzz {

[[noreturn]] inline void check_failed(const char* condition, const char* file, int line) {
    std::fprintf(stderr, "%s:%d: fuzz invariant failed: %s\n", file, line, condition);
    std::abort();
}

#define FUZZ_CHECK(condition)                                                                      \
    do {                                                                                           \
        if (!(condition)) {                                                                        \
            ::pt2cache::tests::fuzz::check_failed(#condition, __FILE__, __LINE__);                 \
        }                                                                                          \
    } while (false)

// Reads from the front of the input; past its end every value is zero or
// empty, so a short input is still a valid one.
class FuzzInput {
public:
    FuzzInput(const std::uint8_t* data, std::size_t size)
        : m_bytes(reinterpret_cast<const std::byte*>(data), size) {}

    std::size_t remaining() const { return m_bytes.size(); }

    template <typename T>
    T integer() {
        T value{};
        const auto n = std::min(sizeof(T), m_bytes.size());
        std::memcpy(&value, m_bytes.data(), n);
        m_bytes = m_bytes.subspan(n);
        return value;
    }

    std::span<const std::byte> bytes(std::size_t count) {
        const auto taken = m_bytes.first(std::min(count, m_bytes.size()));
        m_bytes = m_bytes.subspan(taken.size());
        return taken;
    }

    std::string_view text(std::size_t count) {
        const auto taken = bytes(count);
        return {reinterpret_cast<const char*>(taken.data()), taken.size()};
    }

    std::span<const std::byte> rest() { return bytes(m_bytes.size()); }

private:
    std::span<const std::byte> m_bytes;
};

} // namespace pt2cache::tests::fuzz
