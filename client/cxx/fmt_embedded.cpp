// SPDX-License-Identifier: MIT
//
// fmt's compiled part (what libfmt.so holds), built into pt2cache-cxx so that
// the launcher runs without loading libfmt.so and, through it, libstdc++.so:
// it starts on every compile (docs/cxx.md, "Benchmark"). Debian ships fmt
// only as a shared library; format-inl.h is its public implementation header.
#include <fmt/format-inl.h>

FMT_BEGIN_NAMESPACE
namespace detail {
// Declared `extern template` by <fmt/format.h>.
template FMT_API auto thousands_sep_impl<char>(locale_ref) -> thousands_sep_result<char>;
template FMT_API auto decimal_point_impl(locale_ref) -> char;
} // namespace detail
FMT_END_NAMESPACE
