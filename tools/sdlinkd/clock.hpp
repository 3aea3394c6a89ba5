// SPDX-License-Identifier: GPL-2.0
//
// sdlinkd's time: CLOCK_MONOTONIC (std::chrono::steady_clock on Linux),
// the clock its timerfd runs on.  Logic that depends on time takes "now"
// as an argument, so that tests choose it.
#pragma once

#include <chrono>

namespace sdlinkd {

using Clock = std::chrono::steady_clock;
using Time = Clock::time_point;
using Duration = Clock::duration;
using std::chrono::milliseconds;
using std::chrono::seconds;

} // namespace sdlinkd
