// Builds the tier chain that the configuration asks for.
#pragma once

#include <memory>

#include "config/config.hpp"
#include "daemon/store/read_budget.hpp"
#include "daemon/store/stats.hpp"
#include "daemon/store/store.hpp"

namespace pt2cache::daemon {

store::StorePolicy store_policy(const config::Config& config);
// `reads`: the read budget the disk tier's GETs take large values from
// (null: unbounded).
std::unique_ptr<store::Store> make_store(const config::Config& config, store::Stats& stats,
                                         std::shared_ptr<store::ReadBudget> reads = nullptr);

} // namespace pt2cache::daemon
