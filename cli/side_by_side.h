// Evaluates several placements side by side: round-robin over a few rounds, so that the drift of
// a shared machine (steal time, frequency changes; +-20% between runs on the development VM) hits
// every placement alike, and each keeps the round with its median step time.
#pragma once

#include <vector>

#include "graph/placement.h"
#include "runtime/evaluator.h"

namespace placer::cli {

class SideBySide {
 public:
  // `evaluator` must outlive Run(). Returns the placement's index in Run()'s result.
  size_t Add(runtime::Evaluator& evaluator, graph::Placement placement);
  std::vector<runtime::EvaluationResult> Run(int rounds);

 private:
  std::vector<std::pair<runtime::Evaluator*, graph::Placement>> entries_;
};

// Rounds for the configured evaluator: a simulation gives the same answer every time.
int RoundsFor(const runtime::Evaluator& evaluator);

}  // namespace placer::cli
