// Builds the tier chain that the configuration asks for.
#pragma once

#include <memory>

#include "config/config.hpp"
#include "daemon/store/stats.hpp"
#include "daemon/store/store.hpp"

namespace pt2cache::daemon {

store::StorePolicy store_policy(const config::Config& config);
std::unique_ptr<store::Store> make_store(const config::Config& config, store::Stats& stats);

} // namespace pt2cache::daemon
