// Refinement: an iterated local search over candidates, on whatever judges them (the simulator in
// practice), as FlexFlow's MCMC and Tarnawski et al.'s local search edit placements.
//
// Each round proposes a batch of neighbours of the current candidate, each one random edit away,
// judges them together and moves to the best if it is faster. The edits:
//   - move a group to another option (half of the time one its producers or consumers use),
//   - swap the options of two segments (below), as two stages trade their tails,
//   - shift a boundary between consecutive groups (in topological order) with different options
//     by one group either way, as a pipeline stage boundary moves,
//   - move a band of consecutive groups to one option,
//   - move a segment: a group and the groups connected to it (through producers and consumers)
//     that share its option, grown breadth-first to a random size, to another option (a tower's
//     tail, a branch, a stage),
//   - rebalance: move a segment from the busiest device to the least busy one (the simulator
//     says how long each device was busy),
//   - change the replica count: copy the placement onto idle devices (ActionSpace::ScaleOut), or
//     map options to the nearest the new count allows (groups spread over all replicas stay
//     spread),
//   - change the shape at the same replica count (where the space has pipelines or
//     tensor-parallel shapes): another micro-batch count, schedule or tensor ways (the stages
//     stay: each group keeps its option; a group on an option as wide as the copies has its
//     shards on their own devices, split, once the shape has tensor ways).
// With an EditGuide (edit_proposer.h) each round draws more edits than it judges and judges the
// ones its scorer ranks best (and a few others).
// After `patience` rounds without progress it kicks: a few random edits of the best candidate, and
// the descent goes on from there (iterated local search). Torch-free and deterministic for a seed.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "graph/evaluator.h"
#include "graph/group_features.h"
#include "graph/grouping.h"
#include "placer/action_space.h"
#include "placer/edit_features.h"
#include "placer/edit_proposer.h"
#include "placer/search_options.h"

namespace placer::search {

// What refinement needs to know of a judged candidate: its step time (infinity when invalid) and
// how long each device was busy (empty when unknown).
struct Judgement {
  double seconds = 0;
  std::vector<double> busy;
};
// An evaluator's result as refinement sees it (infinity when invalid).
Judgement JudgementOf(const graph::EvaluationResult& result);
// One judgement per candidate, in order.
using JudgeBatch = std::function<std::vector<Judgement>(const std::vector<Candidate>&)>;

struct RefineOutcome {
  Candidate best;
  double best_seconds = 0;
  int rounds = 0;
};

class Refiner {
 public:
  Refiner(const ActionSpace& space, const graph::GroupFeatures& features, RefinerOptions options,
          uint64_t seed);

  // Iterated local search from `start` (judged `start_judgement`) for at most `rounds` rounds,
  // ending early when `stop()` says so (checked before every round).
  RefineOutcome Run(const Candidate& start, const Judgement& start_judgement, int rounds,
                    const JudgeBatch& judge, const std::function<bool()>& stop);

  // Screens this refiner's edits from now on (an inactive guide: uniform edits again).
  void SetGuide(EditGuide guide);

  // One random edit of `candidate`, whose devices were busy for `busy` (may be empty); never
  // returns it unchanged when another candidate exists.
  Candidate Edit(const Candidate& candidate, const std::vector<double>& busy = {});

  // One edit of the given kind, as Edit draws them (an edit that cannot apply falls back to
  // another, as MoveGroup where the space has one replica count; may return `candidate`).
  Candidate Apply(EditKind kind, const Candidate& candidate, const std::vector<double>& busy = {});

  // The random engine's state, so that a resumed search continues the same sequence.
  std::string SaveState() const;
  void LoadState(const std::string& state);

 private:
  int RandomAllowedOption(int replicas);
  // This round's neighbours of `current`: uniform, or screened by the guide. `rows`: their edit
  // features when the guide is active.
  std::vector<Candidate> Neighbours(const Candidate& current, const Judgement& now,
                                    std::vector<EditFeatureRow>& rows);
  void Learn(const std::vector<EditFeatureRow>& rows, const Judgement& now,
             const std::vector<Judgement>& judged);
  // An edit: its kind, its weight in the draw, whether it needs a space with pipelines, and what
  // it does to a candidate whose devices were busy for the given times.
  struct EditEntry {
    EditKind kind;
    int weight;
    bool needs_other_shapes;  // drawn only where the space has shapes beside its replica counts
    void (*apply)(Refiner&, Candidate&, const std::vector<double>&);
  };
  static const std::vector<EditEntry>& EditTable();
  void MoveGroup(Candidate& c);
  void SwapSegments(Candidate& c);
  void ShiftBoundary(Candidate& c);
  void MoveBand(Candidate& c);
  void MoveSegment(Candidate& c);
  void Rebalance(Candidate& c, const std::vector<double>& busy);
  void ChangeShape(Candidate& c);
  // Up to `size` groups: `start` and, breadth-first, the groups connected to it (producers and
  // consumers) on its option.
  std::vector<size_t> Segment(const Candidate& c, size_t start, size_t size) const;
  size_t SegmentSize();
  void ChangeReplicas(Candidate& c);

  ActionSpace space_;
  RefinerOptions options_;
  int num_groups_;
  std::vector<std::vector<int>> neighbours_;  // per group: producers and consumers
  std::mt19937_64 rng_;
  EditKind last_kind_ = EditKind::kMoveGroup;  // of the last Edit
  EditGuide guide_;
  std::unique_ptr<EditEstimator> estimator_;  // with an active guide
  graph::GroupFeatures features_;             // what the estimator is built from
};

}  // namespace placer::search
