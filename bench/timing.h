// What every benchmark needs to report a figure: the median of repeated measurements and the
// seconds since a time point.
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

namespace placer::bench {

using Clock = std::chrono::steady_clock;

// The median (the mean of the middle two for an even count). `v` must not be empty.
inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

inline double SecondsSince(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

}  // namespace placer::bench
