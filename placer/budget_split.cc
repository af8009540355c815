#include "placer/budget_split.h"

#include <algorithm>
#include <cmath>
#include <random>

namespace placer::search {

double EarnedSplit::PolicyShare() const {
  auto rate = [&](EpisodeKind kind) {
    const auto k = static_cast<size_t>(kind);
    return (gain_[k] + o_.prior_gain) / (evaluations_[k] + o_.prior_evaluations);
  };
  const double policy = rate(EpisodeKind::kPolicy);
  return std::clamp(policy / (policy + rate(EpisodeKind::kRefinement)), o_.min_share,
                    1 - o_.min_share);
}

EpisodeKind EarnedSplit::Next() const {
  if (episodes_ < 2) return episodes_ == 0 ? EpisodeKind::kRefinement : EpisodeKind::kPolicy;
  std::mt19937_64 rng(seed_ * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(episodes_));
  return std::uniform_real_distribution<double>(0, 1)(rng) < PolicyShare()
             ? EpisodeKind::kPolicy
             : EpisodeKind::kRefinement;
}

void EarnedSplit::Credit(EpisodeKind kind, double best_before, double best_after, int evaluations) {
  // From no valid candidate to one: as much as a halving.
  const double gain = !std::isfinite(best_after) ? 0
                      : !std::isfinite(best_before)
                          ? std::log(2.0)
                          : std::max(std::log(best_before / best_after), 0.0);
  for (size_t k = 0; k < 2; ++k) {
    gain_[k] *= o_.decay;
    evaluations_[k] *= o_.decay;
  }
  gain_[static_cast<size_t>(kind)] += gain;
  evaluations_[static_cast<size_t>(kind)] += evaluations;
  ++episodes_;
}

nlohmann::json EarnedSplit::SaveState() const {
  return {{"episodes", episodes_}, {"gain", gain_}, {"evaluations", evaluations_}};
}

void EarnedSplit::LoadState(const nlohmann::json& state) {
  episodes_ = state.at("episodes");
  gain_ = state.at("gain");
  evaluations_ = state.at("evaluations");
}

}  // namespace placer::search
