// The placement search: start from everything known, then learn and refine.
//
//   1. Warm starts (every baseline's placement, as candidates) are judged first, in one batch.
//   2. The policy imitates them (weighted by how fast they are), then gets a fresh optimizer.
//   3. Policy steps: K candidates sampled against the incumbent (the best so far), judged in one
//      batch (duplicates and candidates judged before cost nothing), one PPO update. Every few
//      steps the policy imitates its own elite (the fastest distinct candidates so far:
//      self-imitation, Post's cross-entropy step), and a short refinement (refiner.h) starts from
//      the best candidate the policy sampled in those steps.
//   4. A final refinement from the best candidate, with the rest of the budget.
// That is the fixed split of the budget (search_options.h). With the earned split, steps 3 and 4
// become episodes of either kind, the next one's kind drawn by what each kind has gained per
// evaluation lately (budget_split.h).
// The loop only decides; files (log, checkpoints, best placement, TensorBoard, progress) are the
// RunDirectory's (run_directory.h). Budgets: policy steps, distinct evaluations, wall time.
#pragma once

#include <atomic>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "graph/group_features.h"
#include "graph/grouping.h"
#include "placer/action_space.h"
#include "placer/candidate_evaluator.h"
#include "placer/edit_proposer.h"
#include "placer/learner.h"
#include "placer/policy.h"
#include "placer/refiner.h"
#include "placer/search_options.h"

namespace placer::search {

class RunDirectory;

struct CurvePoint {
  int step = 0;
  int evaluations = 0;
  double wall_seconds = 0;
  double best_seconds = 0;  // best valid so far (infinity while none)
  double mean_seconds = 0;  // mean over this step's samples (invalid ones at the failing time)
};

struct SearchOutcome {
  bool interrupted = false;  // stopped by a signal; the checkpoint allows --resume
  int steps = 0;
  int evaluations = 0;
  double wall_seconds = 0;
  bool found_valid = false;
  RankedCandidate best;
  std::vector<CurvePoint> curve;
  // The fastest distinct valid candidates, fastest first (best included): the verifier re-measures
  // them side by side, since a measured search ranks them by single noisy measurements.
  std::vector<RankedCandidate> elite;
};

// Everything the search needs to know about the problem.
struct SearchProblem {
  const CandidateEvaluator* evaluator = nullptr;
  graph::GroupFeatures features;
  std::vector<NamedCandidate> warm_starts;
  double seconds_per_byte = 0;   // a typical link between the devices (EditGuide); 0: unknown
  ScheduleCosts schedule_costs;  // what the group-level schedule prices with (EditGuide)
};

// `run_dir`: where outputs and checkpoints go (nullptr: nowhere, nothing to resume).
SearchOutcome RunSearch(const SearchProblem& problem, const SearchOptions& options,
                        RunDirectory* run_dir);

// The policy's first answer, before it learns anything in this run (issue 27's zero-shot): its
// greedy decoding with no incumbent, the machine's scale taken, as the search takes it, from the
// fastest valid warm start. The warm starts are judged for that scale only; the outcome counts the
// answer's own evaluation (1). Pretrained weights (options.policy.pretrained_file) make it the
// pretrained policy's zero-shot answer; without them it is the untrained network's.
SearchOutcome PolicyZeroShot(const SearchProblem& problem, const SearchOptions& options);

// Uniform random candidates (a uniform step shape of the space: a replica count, or one replica
// with a micro-batch count and schedule; then a uniform allowed option per group),
// `evaluations` distinct ones, judged in batches of `batch`.
SearchOutcome RandomSearch(const CandidateEvaluator& evaluator, int evaluations, uint64_t seed,
                           int batch = 64);

}  // namespace placer::search
