// SPDX-License-Identifier: MIT
#include "tests/daemon/store/alloc_probe.hpp"

#include <cstdlib>
#include <new>

namespace {

thread_local std::size_t t_largest = 0;

void* allocate(std::size_t size) noexcept {
    if (size > t_largest) {
        t_largest = size;
    }
    return std::malloc(size == 0 ? 1 : size);
}

} // namespace

// Every replaceable (non-aligned) form, so that all of them pair malloc with
// free: under ASan, a block from the sanitizer's own operator new released by
// this free would be an alloc-dealloc mismatch.
void* operator new(std::size_t size) {
    if (void* block = allocate(size)) {
        return block;
    }
    throw std::bad_alloc();
}
void* operator new[](std::size_t size) {
    return operator new(size);
}
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
    return allocate(size);
}
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept {
    return allocate(size);
}
void operator delete(void* block) noexcept {
    std::free(block);
}
void operator delete[](void* block) noexcept {
    std::free(block);
}
void operator delete(void* block, std::size_t) noexcept {
    std::free(block);
}
void operator delete[](void* block, std::size_t) noexcept {
    std::free(block);
}
void operator delete(void* block, const std::nothrow_t&) noexcept {
    std::free(block);
}
void operator delete[](void* block, const std::nothrow_t&) noexcept {
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
