// The placement search: the policy proposes, the Evaluator judges, REINFORCE learns; budgets,
// a cache of evaluated placements, checkpoints, resume, and the run directory's outputs.
#pragma once

#include <atomic>
#include <filesystem>
#include <string>
#include <vector>

#include "graph/grouping.h"
#include "graph/ir.h"
#include "placer/policy.h"
#include "placer/reinforce.h"
#include "runtime/evaluator.h"

namespace placer::search {

struct SearchOptions {
  int policy_steps = 50;
  int max_evaluations = 200;      // distinct placements evaluated (cache hits are free)
  double max_wall_seconds = 600;  // across resumes
  uint64_t seed = 1;
  int checkpoint_every = 10;          // policy steps
  double failing_step_seconds = 100;  // an invalid placement is rewarded as a step this slow
  bool cache = true;                  // never evaluate the same placement twice
  PolicyOptions policy;
  ReinforceOptions reinforce;
  // Known placements (device per group), e.g. single device and data parallel. A fresh search
  // evaluates them first (logged as step -1) and warms the policy up on the best valid one, so
  // that it starts from the best known placement and improves on it.
  std::vector<std::vector<int>> warm_start;
  double warm_start_probability = 0.8;  // per group, after the warm-up
  int warm_start_max_steps = 200;
  std::filesystem::path run_dir;  // outputs and checkpoint; empty: write nothing
  bool resume = false;            // continue from run_dir/checkpoint.pt
  std::string model_name;
  // How the groups were made (e.g. "coarsen, max_groups 256"), for the checkpoint and its
  // messages: a checkpoint remembers its grouping, and a resume under another one is refused.
  std::string grouping_name;
  bool progress = false;                              // a live progress line on stderr
  const std::atomic<bool>* stop_requested = nullptr;  // set by SIGINT/SIGTERM: checkpoint, stop
};

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
  std::vector<int> best_group_devices;
  graph::Placement best;
  double best_seconds = 0;
  std::vector<CurvePoint> curve;
  // The best few distinct valid placements (device per group), fastest first: a measured search
  // picks its best from single noisy measurements, so the caller re-measures these side by side
  // before declaring a winner.
  std::vector<std::vector<int>> top_candidates;
};

// best_placement.yaml, .pb and .pbtxt in `dir`, each written atomically.
void WriteBestPlacement(const std::filesystem::path& dir, const graph::Graph& graph,
                        const graph::Placement& placement, const std::string& model, double seconds,
                        const std::string& evaluator);

// Outputs in run_dir: search.csv (one row per sample), best_placement.yaml/.pb/.pbtxt,
// events.out.tfevents.* (TensorBoard), checkpoint.pt. All files but the append-only logs are
// written atomically.
SearchOutcome RunSearch(const graph::Graph& graph, const graph::Grouping& grouping,
                        runtime::Evaluator& evaluator, const std::vector<std::string>& devices,
                        const SearchOptions& options);

// Uniform random placements of the groups, `evaluations` distinct ones (or all there are).
SearchOutcome RandomSearch(const graph::Graph& graph, const graph::Grouping& grouping,
                           runtime::Evaluator& evaluator, const std::vector<std::string>& devices,
                           int evaluations, uint64_t seed);

}  // namespace placer::search
