#include "cli/side_by_side.h"

#include <algorithm>

namespace placer::cli {

size_t SideBySide::Add(runtime::Evaluator& evaluator, graph::Placement placement) {
  entries_.emplace_back(&evaluator, std::move(placement));
  return entries_.size() - 1;
}

std::vector<runtime::EvaluationResult> SideBySide::Run(int rounds) {
  std::vector<std::vector<runtime::EvaluationResult>> results(entries_.size());
  for (int round = 0; round < rounds; ++round) {
    for (size_t i = 0; i < entries_.size(); ++i) {
      results[i].push_back(entries_[i].first->Evaluate(entries_[i].second));
    }
  }
  std::vector<runtime::EvaluationResult> chosen;
  for (auto& per_round : results) {
    // Invalid rounds sort last; an invalid placement stays invalid.
    std::sort(per_round.begin(), per_round.end(), [](const auto& a, const auto& b) {
      if (a.valid != b.valid) return a.valid;
      return a.step_seconds < b.step_seconds;
    });
    auto valid =
        std::count_if(per_round.begin(), per_round.end(), [](const auto& r) { return r.valid; });
    chosen.push_back(valid > 0 ? per_round[static_cast<size_t>(valid - 1) / 2] : per_round.front());
  }
  return chosen;
}

int RoundsFor(const runtime::Evaluator& evaluator) {
  return evaluator.name() == "simulated" ? 1 : 3;
}

}  // namespace placer::cli
