// Side-by-side judgement: several candidates judged in the same rounds, round-robin, so that the
// drift of a shared machine (steal time, frequency changes; +-20% between runs on the development
// VM) hits every candidate alike; each keeps its median round. A candidate listed twice is judged
// once per round and both rows get the same result: two rows of one placement never differ by
// noise. This is how a measured search picks its answer among its best candidates and the warm
// starts, and how `compare` fills its table.
#pragma once

#include <vector>

#include "placer/action_space.h"
#include "placer/candidate_evaluator.h"
#include "runtime/evaluator.h"

namespace placer::search {

struct SideBySideResult {
  runtime::EvaluationResult result;   // of the median round (invalid: of the first round)
  std::vector<double> round_seconds;  // each valid round's step time, in round order
};

// Rounds for an evaluator: a simulation gives the same answer every time.
int RoundsFor(const CandidateEvaluator& evaluator, int measured_rounds = 3);

std::vector<SideBySideResult> SideBySide(const CandidateEvaluator& evaluator,
                                         const std::vector<Candidate>& candidates, int rounds);

}  // namespace placer::search
