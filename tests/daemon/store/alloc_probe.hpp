// SPDX-License-Identifier: MIT
// Records the largest single allocation made by the current thread, by
// replacing the global operator new in this test binary.
#pragma once

#include <cstddef>

namespace pt2cache::tests {

void reset_largest_allocation();
std::size_t largest_allocation();

} // namespace pt2cache::tests
