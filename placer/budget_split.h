// The earned split of the search's budget (search.budget_split: earned, search_options.h): which
// kind of episode comes next, the policy's or refinement's, drawn in proportion to the
// improvement of the best step time per evaluation that each kind has brought lately.
// Torch-free; its state is the search checkpoint's.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "placer/search_options.h"

namespace placer::search {

enum class EpisodeKind { kRefinement = 0, kPolicy = 1 };

class EarnedSplit {
 public:
  EarnedSplit(const EarnedSplitOptions& options, uint64_t seed) : o_(options), seed_(seed) {}

  // The next episode's kind when both are possible: refinement's first (it is cheaper and mostly
  // pays at once), then the policy's, then drawn. A draw of its own per episode (from the seed
  // and the episode's index), so that a resumed search draws as the uninterrupted one did.
  EpisodeKind Next() const;
  // The chance that a drawn episode is the policy's, at least min_share either way.
  double PolicyShare() const;
  // An episode of `kind` took the best step time from `best_before` to `best_after` seconds
  // (infinity while none is valid) and judged `evaluations` new candidates.
  void Credit(EpisodeKind kind, double best_before, double best_after, int evaluations);

  int episodes() const { return episodes_; }
  nlohmann::json SaveState() const;
  void LoadState(const nlohmann::json& state);

 private:
  EarnedSplitOptions o_;
  uint64_t seed_;
  int episodes_ = 0;
  std::array<double, 2> gain_{};         // per EpisodeKind, decayed sums of log-improvements
  std::array<double, 2> evaluations_{};  // per EpisodeKind, decayed sums
};

}  // namespace placer::search
