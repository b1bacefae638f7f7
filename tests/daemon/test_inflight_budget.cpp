// SPDX-License-Identifier: MIT
// The in-flight budget's rules between waiting requests
// (daemon/inflight_budget.hpp): the oldest waiter's room is kept for it, and
// when every byte in use is held by waiters the latest to wait gives way.
#include "daemon/inflight_budget.hpp"

#include <catch2/catch.hpp>

using pt2cache::daemon::InflightBudget;

namespace {
constexpr std::uint64_t k_mib = 1 << 20;
// Stand-ins for leases: only their addresses count.
const int first = 0, second = 0, third = 0, newcomer = 0;
} // namespace

TEST_CASE("the oldest waiter's room is kept from later requests", "[daemon][inflight_budget]") {
    InflightBudget budget(16 * k_mib);
    REQUIRE(budget.try_take_for(&second, 10 * k_mib)); // nobody waits: taken
    budget.begin_wait(&first, budget.next_ticket(), 0, 4 * k_mib);
    budget.give_back(4 * k_mib); // 6 MiB in use, 10 free, 4 of them kept
    CHECK_FALSE(budget.try_take_for(&newcomer, 7 * k_mib));
    CHECK(budget.try_take_for(&newcomer, 6 * k_mib));
    CHECK(budget.try_take_for(&first, 4 * k_mib)); // its own room
    CHECK(budget.in_use() == 16 * k_mib);
    budget.end_wait(&first);
    budget.give_back(16 * k_mib);
    CHECK(budget.try_take_for(&newcomer, 16 * k_mib)); // nobody waits: nothing kept
}

TEST_CASE("a request keeps its place among waiters by its ticket", "[daemon][inflight_budget]") {
    InflightBudget budget(8 * k_mib);
    const auto older = budget.next_ticket();
    const auto younger = budget.next_ticket();
    REQUIRE(budget.try_take(8 * k_mib));
    // The older request waits again after a step, after the younger began
    // to: it is still first.
    budget.begin_wait(&second, younger, 0, 2 * k_mib);
    budget.begin_wait(&first, older, 0, 3 * k_mib);
    budget.give_back(3 * k_mib);
    CHECK_FALSE(budget.try_take_for(&second, 2 * k_mib));
    CHECK(budget.try_take_for(&first, 3 * k_mib));
    budget.end_wait(&first);
    budget.give_back(2 * k_mib);
    CHECK(budget.try_take_for(&second, 2 * k_mib));
}

TEST_CASE("when only waiters hold the budget, the latest to wait holding some gives way",
          "[daemon][inflight_budget]") {
    InflightBudget budget(16 * k_mib);
    REQUIRE(budget.try_take(16 * k_mib));
    budget.begin_wait(&first, budget.next_ticket(), 10 * k_mib, 4 * k_mib);
    budget.begin_wait(&second, budget.next_ticket(), 6 * k_mib, 2 * k_mib);
    budget.begin_wait(&third, budget.next_ticket(), 0, 1 * k_mib); // holds nothing to give
    CHECK_FALSE(budget.should_give_way(&first)); // the largest is not the one any more
    CHECK(budget.should_give_way(&second));
    CHECK_FALSE(budget.should_give_way(&third));
    // Bytes held by a request that does not wait come back on their own.
    budget.end_wait(&second);
    CHECK_FALSE(budget.should_give_way(&first));
    budget.end_wait(&first);
    budget.end_wait(&third);
}
