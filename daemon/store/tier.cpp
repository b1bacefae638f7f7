// SPDX-License-Identifier: MIT
#include "daemon/store/tier.hpp"

#include <chrono>

namespace pt2cache::daemon::store {

UnixMs now_ms() {
    using namespace std::chrono;
    return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

} // namespace pt2cache::daemon::store
