// SPDX-License-Identifier: MIT
#include "daemon/store/read_budget.hpp"

namespace pt2cache::daemon::store {

std::optional<ReadHold> ReadBudget::try_hold(std::uint64_t bytes) {
    if (!try_take(bytes)) {
        return std::nullopt;
    }
    return std::optional<ReadHold>(std::in_place, shared_from_this(), bytes);
}

ReadHold ReadBudget::hold(std::uint64_t bytes) {
    take(bytes);
    return ReadHold(shared_from_this(), bytes);
}

ReadHold::~ReadHold() {
    if (m_budget) {
        m_budget->give_back(m_bytes);
    }
}

Blob ReadHold::attach(const Blob& value) {
    if (!m_budget) {
        return value;
    }
    // Gives the bytes back as the last copy of the value goes.
    return value.with_charge(std::make_shared<const ReadHold>(std::move(*this)));
}

} // namespace pt2cache::daemon::store
