// SPDX-License-Identifier: MIT
#include "daemon/store/xxh3.hpp"

#include <new>
#include <vector>

#include <xxhash.h>

namespace pt2cache::daemon::store {

namespace {

XXH3_state_t* state_of(const std::unique_ptr<void, detail::Xxh3StateDeleter>& state) {
    return static_cast<XXH3_state_t*>(state.get());
}

// A thread's spare states: a hash per request must not cost an aligned
// allocation and its free (a state is some 600 bytes).
struct SpareStates {
    static constexpr std::size_t k_max = 4;
    std::vector<XXH3_state_t*> states;

    SpareStates() { states.reserve(k_max); }
    ~SpareStates() {
        for (XXH3_state_t* state : states) {
            XXH3_freeState(state);
        }
        states.clear();
        gone = true;
    }
    SpareStates(const SpareStates&) = delete;
    SpareStates& operator=(const SpareStates&) = delete;

    // Set when the thread's spares are destroyed: states freed later (by
    // objects that outlive them) go straight back to the allocator.
    static thread_local bool gone;
};
thread_local bool SpareStates::gone = false;
thread_local SpareStates t_spares;

std::unique_ptr<void, detail::Xxh3StateDeleter> new_state() {
    XXH3_state_t* state = nullptr;
    if (!SpareStates::gone && !t_spares.states.empty()) {
        state = t_spares.states.back();
        t_spares.states.pop_back();
    } else {
        state = XXH3_createState();
    }
    if (state == nullptr) {
        throw std::bad_alloc();
    }
    return std::unique_ptr<void, detail::Xxh3StateDeleter>(state);
}

} // namespace

void detail::Xxh3StateDeleter::operator()(void* state) const {
    auto* xxh3 = static_cast<XXH3_state_t*>(state);
    if (!SpareStates::gone && t_spares.states.size() < SpareStates::k_max) {
        t_spares.states.push_back(xxh3); // capacity reserved: never throws
        return;
    }
    XXH3_freeState(xxh3);
}

std::string Hash128::hex() const {
    static constexpr char k_digits[] = "0123456789abcdef";
    std::string out(32, '0');
    for (int i = 0; i < 16; ++i) {
        out[static_cast<std::size_t>(15 - i)] = k_digits[(high >> (4 * i)) & 0xF];
        out[static_cast<std::size_t>(31 - i)] = k_digits[(low >> (4 * i)) & 0xF];
    }
    return out;
}

Xxh3Hash64::Xxh3Hash64()
    : m_state(new_state()) {
    XXH3_64bits_reset(state_of(m_state));
}

void Xxh3Hash64::update(std::span<const std::byte> bytes) {
    XXH3_64bits_update(state_of(m_state), bytes.data(), bytes.size());
}

void Xxh3Hash64::update(std::string_view text) {
    XXH3_64bits_update(state_of(m_state), text.data(), text.size());
}

std::uint64_t Xxh3Hash64::digest() const {
    return XXH3_64bits_digest(state_of(m_state));
}

std::uint64_t Xxh3Hash64::of(std::span<const std::byte> bytes) {
    return XXH3_64bits(bytes.data(), bytes.size());
}

Xxh3Hash128::Xxh3Hash128()
    : m_state(new_state()) {
    XXH3_128bits_reset(state_of(m_state));
}

void Xxh3Hash128::update(std::span<const std::byte> bytes) {
    XXH3_128bits_update(state_of(m_state), bytes.data(), bytes.size());
}

void Xxh3Hash128::update(std::string_view text) {
    XXH3_128bits_update(state_of(m_state), text.data(), text.size());
}

Hash128 Xxh3Hash128::of(std::span<const std::byte> bytes) {
    const XXH128_hash_t hash = XXH3_128bits(bytes.data(), bytes.size());
    return {hash.high64, hash.low64};
}

Hash128 Xxh3Hash128::digest() const {
    const XXH128_hash_t hash = XXH3_128bits_digest(state_of(m_state));
    return {hash.high64, hash.low64};
}

} // namespace pt2cache::daemon::store
