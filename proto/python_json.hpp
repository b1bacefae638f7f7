// SPDX-License-Identifier: MIT
// JSON and Python text written byte for byte as CPython writes it, so that
// entries pt2cached produces equal the ones PyTorch Inductor produces
// (docs/protocol.md, "Bundles"). Pure functions, no I/O.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace pt2cache::proto {

// How deep untrusted JSON may nest: the functions below (and any code that
// walks a value) recurse once per level, and CPython's json module gives up
// near 1,000 levels anyway. Inductor's values nest 3 deep.
inline constexpr std::size_t k_max_json_depth = 512;

// `text` parsed, or a discarded value when it is not JSON or nests deeper
// than k_max_json_depth (a deeper value once took a thread's whole stack).
nlohmann::ordered_json parse_json(std::string_view text);

// `json.dumps(value)` with default arguments: separators ", " and ": ", keys
// in insertion order, ensure_ascii (every character outside ' '..'~' as
// \uXXXX in lowercase hex, surrogate pairs above U+FFFF), integers as
// integers, floats as `repr(float)` ("1.0", "1e-05", "Infinity", "NaN").
// Strings that are not valid UTF-8 (Python strings always are) have each
// invalid byte written as \ufffd. Binary values are written as lists of
// integers.
std::string python_json_dumps(const nlohmann::ordered_json& value);

// Appends `python_json_dumps(value)` to `out`.
void python_json_dump(const nlohmann::ordered_json& value, std::string& out);

// `repr(value)` of a Python float: the shortest text that reads back as the
// same double, in fixed notation when the decimal exponent is in [-4, 16),
// else as "1.5e+16"; "inf", "-inf" and "nan" for the non-finite.
std::string python_float_repr(double value);

// `repr(obj)` where obj is what `json.loads` makes of `value`: dicts as
// {'k': v}, lists as [a, b], str with Python's choice of quotes and escapes,
// True/False/None, floats as above. Non-ASCII characters are kept as they
// are, except those CPython never treats as printable in the Latin-1,
// General Punctuation and Specials blocks (escaped as \xNN / \uNNNN).
std::string python_repr(const nlohmann::ordered_json& value);

} // namespace pt2cache::proto
