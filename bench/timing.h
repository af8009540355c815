// What every benchmark needs to report a figure: the median of repeated measurements and the
// seconds since a time point.
#pragma once

#include <chrono>

#include "runtime/statistics.h"

namespace placer::bench {

using Clock = std::chrono::steady_clock;

using runtime::Median;

inline double SecondsSince(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

}  // namespace placer::bench
