// The one median of the project: the profiler's op and link times, a measured step time and every
// benchmark's figure are summarised by it, so that they agree on even counts. And the one rank
// correlation, for the fidelity benchmark and the tests that compare two orderings.
#pragma once

#include <algorithm>
#include <cmath>
#include <numeric>
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

// Each value's rank, 0 for the smallest; ties share their mean rank.
inline std::vector<double> Ranks(const std::vector<double>& values) {
  std::vector<size_t> order(values.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return values[a] < values[b]; });
  std::vector<double> ranks(values.size());
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j + 1 < order.size() && values[order[j + 1]] == values[order[i]]) ++j;
    for (size_t k = i; k <= j; ++k) ranks[order[k]] = 0.5 * static_cast<double>(i + j);
    i = j + 1;
  }
  return ranks;
}

// Spearman's rank correlation of two samples of one size (at least two).
inline double Spearman(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size() || a.size() < 2) {
    throw std::invalid_argument("a rank correlation needs two samples of one size, at least 2");
  }
  const std::vector<double> ra = Ranks(a), rb = Ranks(b);
  const double mean = 0.5 * static_cast<double>(a.size() - 1);
  double cov = 0, va = 0, vb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    cov += (ra[i] - mean) * (rb[i] - mean);
    va += (ra[i] - mean) * (ra[i] - mean);
    vb += (rb[i] - mean) * (rb[i] - mean);
  }
  return cov / std::sqrt(va * vb);
}

}  // namespace placer::runtime
