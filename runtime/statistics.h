// The one median of the project: the profiler's op and link times, a measured step time and every
// benchmark's figure are summarised by it, so that they agree on even counts.
#pragma once

#include <algorithm>
#include <stdexcept>
#include <vector>

namespace placer::runtime {

// The middle value, or the mean of the middle two for an even count; an empty sample has none.
inline double Median(std::vector<double> values) {
  if (values.empty()) throw std::invalid_argument("the median of no values");
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid), values.end());
  const double upper = values[mid];
  if (values.size() % 2 == 1) return upper;
  const double lower =
      *std::max_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid));
  return 0.5 * (lower + upper);
}

}  // namespace placer::runtime
