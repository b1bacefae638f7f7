// SPDX-License-Identifier: MIT
#include "tests/daemon/store/alloc_probe.hpp"

#include <cstdlib>
#include <new>

namespace {

thread_local std::size_t t_largest = 0;

} // namespace

void* operator new(std::size_t size) {
    if (size > t_largest) {
        t_largest = size;
    }
    if (void* block = std::malloc(size == 0 ? 1 : size)) {
        return block;
    }
    throw std::bad_alloc();
}

void operator delete(void* block) noexcept {
    std::free(block);
}

void operator delete(void* block, std::size_t) noexcept {
    std::free(block);
}

namespace pt2cache::tests {

void reset_largest_allocation() {
    t_largest = 0;
}

std::size_t largest_allocation() {
    return t_largest;
}

} // namespace pt2cache::tests
