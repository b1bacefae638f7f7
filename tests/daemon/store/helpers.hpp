// SPDX-License-Identifier: MIT
// Shared helpers of the storage tests.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "daemon/store/blob.hpp"
#include "daemon/store/tier.hpp"

namespace pt2cache::tests {

inline std::vector<std::byte> random_bytes(std::size_t size, std::uint64_t seed = 1) {
    std::mt19937_64 engine(seed);
    std::vector<std::byte> out(size);
    for (std::size_t i = 0; i < size; i += 8) {
        std::uint64_t word = engine();
        for (std::size_t j = i; j < std::min(size, i + 8); ++j) {
            out[j] = static_cast<std::byte>(word & 0xFFU);
            word >>= 8U;
        }
    }
    return out;
}

inline std::vector<std::byte> text_bytes(std::size_t size) {
    static const std::string k_line = "def forward(self, x): return torch.relu(x) + 1\n";
    std::vector<std::byte> out(size);
    for (std::size_t i = 0; i < size; ++i) {
        out[i] = static_cast<std::byte>(k_line[i % k_line.size()]);
    }
    return out;
}

inline daemon::store::Entry make_entry(std::vector<std::byte> value,
                                       daemon::store::UnixMs expires_ms = 0) {
    daemon::store::Entry entry;
    entry.value = daemon::store::Blob::adopt(std::move(value));
    entry.created_ms = 1'700'000'000'000;
    entry.expires_ms = expires_ms;
    return entry;
}

inline daemon::store::Entry make_entry(std::string_view text,
                                       daemon::store::UnixMs expires_ms = 0) {
    daemon::store::Entry entry;
    entry.value = daemon::store::Blob::copy_of(text);
    entry.created_ms = 1'700'000'000'000;
    entry.expires_ms = expires_ms;
    return entry;
}

inline std::vector<std::byte> read_file(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<std::byte> out(chars.size());
    std::transform(chars.begin(), chars.end(), out.begin(),
                   [](char c) { return static_cast<std::byte>(c); });
    return out;
}

inline void write_file(const std::filesystem::path& path, std::span<const std::byte> bytes) {
    std::filesystem::create_directories(path.parent_path());
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
}

// Polls `done` every 5 ms for at most `limit`; true when it became true.
template <typename Predicate>
bool wait_until(Predicate done, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!done()) {
        if (std::chrono::steady_clock::now() > deadline) {
            return false;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return true;
}

} // namespace pt2cache::tests
