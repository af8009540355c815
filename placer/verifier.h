// Side-by-side judgement: several candidates judged in the same rounds, round-robin, so that the
// drift of a shared machine (steal time, frequency changes; +-20% between runs on the development
// VM) hits every candidate alike, and then compared round by round (placer/paired_comparison.h):
// each candidate's ratio to the fastest with its interval, the rows tied with it, and the answer,
// the simplest of those. A candidate listed twice is judged once per round and both rows get the
// same result: two rows of one placement never differ by noise. This is how a measured search
// picks its answer among its best candidates and the warm starts, and how `compare` fills its
// table.
#pragma once

#include <optional>
#include <vector>

#include "graph/evaluator.h"
#include "placer/action_space.h"
#include "placer/candidate_evaluator.h"
#include "placer/paired_comparison.h"

namespace placer::search {

struct SideBySideResult {
  // Of the median valid round (invalid: of the first round), with the step time the geometric
  // mean of the valid rounds: what the ranking compares.
  graph::EvaluationResult result;
  std::vector<double> round_seconds;  // per round, NaN where invalid or not measured
};

// What each candidate is, for the ranking.
struct Role {
  Simplicity simplicity = Simplicity::kOther;
  bool may_answer = true;
};

struct SideBySideVerdict {
  std::vector<SideBySideResult> results;  // per candidate, in their order
  std::vector<bool> tied;                 // per candidate: tied with the fastest
  std::vector<PairedRatio> to_fastest;    // per candidate
  std::vector<size_t> placement;          // per candidate: equal for rows of one placement
  // Indices into the candidates. Of a candidate listed twice, the answer is the row with the
  // simplest role (a learned candidate that is data parallelism answers as data parallelism).
  std::optional<size_t> fastest, answer;
  int rounds = 0;  // rounds run (the contenders' count)
};

// Rounds for an evaluator: a simulation gives the same answer every time, one round.
RoundOptions RoundsFor(const CandidateEvaluator& evaluator, RoundOptions measured = {});

// `roles`: one per candidate (empty: every candidate kOther and may answer).
SideBySideVerdict SideBySide(const CandidateEvaluator& evaluator,
                             const std::vector<Candidate>& candidates,
                             const std::vector<Role>& roles, const RoundOptions& options);

}  // namespace placer::search
