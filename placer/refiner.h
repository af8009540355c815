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
//   - change the replica count: copy the placement onto idle devices (ActionSpace::ScaleOut), or
//     map options to the nearest the new count allows (groups spread over all replicas stay
//     spread).
// After `patience` rounds without progress it kicks: a few random edits of the best candidate, and
// the descent goes on from there (iterated local search). Torch-free and deterministic for a seed.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "graph/grouping.h"
#include "placer/action_space.h"

namespace placer::search {

struct RefinerOptions {
  int neighbours_per_round = 32;  // candidates judged together
  int patience = 3;               // rounds without progress before a kick
  int kick_edits = 3;             // random edits of a kick
};

// Seconds per candidate, in order; infinity for an invalid one.
using JudgeBatch = std::function<std::vector<double>(const std::vector<Candidate>&)>;

struct RefineOutcome {
  Candidate best;
  double best_seconds = 0;
  int rounds = 0;
};

class Refiner {
 public:
  Refiner(const ActionSpace& space, const graph::GroupFeatures& features, RefinerOptions options,
          uint64_t seed);

  // Iterated local search from `start` (whose time is `start_seconds`) for at most `rounds`
  // rounds, ending early when `stop()` says so (checked before every round).
  RefineOutcome Run(const Candidate& start, double start_seconds, int rounds,
                    const JudgeBatch& judge, const std::function<bool()>& stop);

  // One random edit of `candidate`; never returns it unchanged when another candidate exists.
  Candidate Edit(const Candidate& candidate);

  // The random engine's state, so that a resumed search continues the same sequence.
  std::string SaveState() const;
  void LoadState(const std::string& state);

 private:
  int RandomAllowedOption(int replicas);
  void MoveGroup(Candidate& c);
  void SwapSegments(Candidate& c);
  void ShiftBoundary(Candidate& c);
  void MoveBand(Candidate& c);
  void MoveSegment(Candidate& c);
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
};

}  // namespace placer::search
