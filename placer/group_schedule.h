// A group-level list schedule of the training step: the hand-written estimate of a candidate's
// step time that sees the critical path and the slack, where EditEstimator's sees only the busiest
// device's load and the traffic.
//
// Every copy of a group (R replicas, or R / T replicas of T shards; M micro-batches each) is two
// tasks on its device: its forward and its backward with the update. Each takes a launch per op
// plus its share (1 / (R M)) of what the group's ops take beyond their launches in the
// one-replica step on a typical device (the cost model's times); without those times, of a third
// (the forward) or two thirds of the group's work, FLOPs and bytes as EditEstimator counts them. A
// forward waits for its producers' forwards, a backward for its own forward and its consumers'
// backwards. A value that crosses devices is a copy task on the receiving device (a GPU's stream
// runs the copies into it, as the simulator's does), a latency per tensor plus its bytes at the
// typical link's speed, run before any op waiting there. Each device runs one task at a time, the
// ready one first in the step's order (forwards by topological rank, then backwards in reverse;
// micro-batch by micro-batch under GPipe; under 1F1B a micro-batch's backward before the next one's
// forward). A group whose copies span k devices all-reduces its gradients in DDP's buckets (about
// 25 MiB, the last groups first, one ring per device set): once the bucket's last backward is done,
// each of the ring's devices spends 2 (k - 1) copy latencies and op launches and 2 (k - 1) / k of
// the bucket's bytes at the link's speed, after anything else it has ready (the ring's ops come
// last in the step's order; on a GPU its hops run on the stream). A sharded group (tensor ways T,
// on an option as wide as its copies) adds the all-reduce of its output per copy in both
// directions.
//
// What it leaves out, so it is only an estimate: memory (an out-of-memory candidate looks
// fine), the minibatch loads and parameter pushes at the step's start, link contention and the
// slower links between hosts, devices of other kinds (every group takes the first device's
// times), the ops no tensor-parallel split reaches. Torch-free and deterministic.
#pragma once

#include <vector>

#include "graph/group_features.h"
#include "placer/action_space.h"

namespace placer::search {

// What the schedule prices tasks with, from the cost model: what copies and op launches cost
// beside their bytes and FLOPs (a copy's latency dwarfs its bytes below some hundreds of
// kilobytes; a small op's launch, its FLOPs), and each group's own time.
struct ScheduleCosts {
  double seconds_per_copy = 0;  // a typical link's (sim::TypicalSecondsPerCopy)
  double seconds_per_op = 0;    // a typical device's (sim::TypicalSecondsPerOp)
  // Per group, the seconds its forward ops, and its backward and update ops, take on a typical
  // device in the one-replica step, launches included (sim::PhaseSecondsPerGroup). Empty: unknown,
  // and the schedule prices groups by their work at the seconds per unit it is given.
  std::vector<double> forward_seconds, backward_seconds;
};

class GroupSchedule {
 public:
  // `work`: per group, its work in the units EditEstimator uses. `seconds_per_byte`: a typical
  // link between two of the devices.
  GroupSchedule(const ActionSpace& space, const graph::GroupFeatures& features,
                std::vector<double> work, double seconds_per_byte, ScheduleCosts costs);

  // Seconds per unit of work, from a judged candidate's busy times (as long as the ops took: on a
  // GPU the copies into it are not counted) less what its op launches took; `seconds` (its step
  // time) stands in for them when they are unknown. Only for costs without the groups' times: the
  // busy times include the gradient ring's ops, which this takes for work.
  double SecondsPerWork(const Candidate& candidate, double seconds,
                        const std::vector<double>& busy) const;
  // The estimated step time of `candidate`, with `seconds_per_work` seconds per unit of work
  // (unused where the costs give the groups' times).
  double StepSeconds(const Candidate& candidate, double seconds_per_work) const;

 private:
  struct Link {
    int group = 0;
    double bytes = 0;
    int tensors = 1;
  };
  ActionSpace space_;
  std::vector<double> work_;
  std::vector<double> param_bytes_;
  std::vector<double> output_bytes_;
  std::vector<double> forward_ops_, backward_ops_;
  std::vector<std::vector<Link>> producers_, consumers_;  // per group
  double total_work_ = 0;
  double seconds_per_byte_;
  ScheduleCosts costs_;
  bool timed_ = false;  // whether costs_ gives every group's times
};

}  // namespace placer::search
