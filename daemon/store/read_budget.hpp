// SPDX-License-Identifier: MIT
// The daemon's budget for large values read from disk for replies: a GET of
// a value of 1 MiB or more (SharedReads::k_min_value_size, the values that
// reads share) takes its size from the budget before the
// value is read, and gives it back when the last copy the reply holds is
// gone (after it is written to the client). Without it, sixty connections
// each sending one GET of a different 48 MiB entry kept on disk made the
// daemon read all of them at once (2.97 GB), whatever their clients read;
// now a GET finding no room waits for it, and is refused after a while (see
// docs/architecture.md, "Limits on untrusted input"). A value read while the
// budget is empty is always taken, so that no value is too large to serve.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>

#include "daemon/store/blob.hpp"
#include "daemon/store/byte_budget.hpp"

namespace pt2cache::daemon::store {

class ReadHold;

class ReadBudget : public ByteBudget, public std::enable_shared_from_this<ReadBudget> {
public:
    explicit ReadBudget(std::uint64_t limit)
        : ByteBudget(limit, WhenEmpty::take_anything) {}

    // try_take, as a hold to be attached to the value read.
    std::optional<ReadHold> try_hold(std::uint64_t bytes);
    // take, as a hold: for a value read before its size was known (a
    // remote get), which the reads after it wait for.
    ReadHold hold(std::uint64_t bytes);
};

// Bytes taken from a ReadBudget for one read: given back when the hold goes,
// unless attached to the value read. Empty (holding nothing) by default.
class ReadHold {
public:
    ReadHold() = default;
    ReadHold(std::shared_ptr<ReadBudget> budget, std::uint64_t bytes)
        : m_budget(std::move(budget))
        , m_bytes(bytes) {}
    ReadHold(ReadHold&& other) noexcept
        : m_budget(std::move(other.m_budget))
        , m_bytes(other.m_bytes) {}
    ReadHold& operator=(ReadHold&&) = delete;
    ~ReadHold();

    // `value` carrying the held bytes: they are given back when its last
    // copy is gone. Blob::without_charge() is the value for a longer-lived
    // holder (the memory tier), that must not keep them. `value` itself when
    // empty; empty afterwards.
    Blob attach(const Blob& value);

private:
    std::shared_ptr<ReadBudget> m_budget;
    std::uint64_t m_bytes = 0;
};

} // namespace pt2cache::daemon::store
