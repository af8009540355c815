// Profiles the real devices into a cost model for the simulator: every op of the training step
// timed on every device, the copy cost between each pair of devices fitted as a*bytes + b, and
// how much devices of one kind slow each other down.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "graph/device.h"
#include "graph/ir.h"
#include "graph/placement.h"
#include "runtime/sim/cost_model.h"

namespace placer::runtime {

struct ProfileOptions {
  int warmup_steps = 3;
  int timed_steps = 10;  // an op's time is its median over these steps
  uint64_t seed = 0;
  std::string model_name;
  // The contention phase: with a placement, every device runs its share of it at once in one
  // executor, as a measured step of that placement does (a data-parallel step's replicas: give
  // the replicated graph's placement); without, every device of a kind runs the whole step.
  std::optional<graph::Placement> concurrent_shares;
};

// Runs the whole step on each device alone (so ops are timed without contention from a placement)
// and, for every pair of CPU workers, a step whose forward ops alternate between the two; and,
// for every device kind with several devices, all of them running at once (the whole step each,
// or their shares of ProfileOptions::concurrent_shares), whose op times over the times alone give
// the kind's ContentionSpec. They take turns in blocks of a
// few steps. Copies between two CPU workers are fitted from the executor's own copies in the
// alternating step, and so is the receive cost (how much slower the ops reading the other
// worker's tensors ran than alone, per byte read, their own clones left out); both are taken back
// to what they would have cost alone by the contention, for the fraction of each during which
// the other worker was busy. Copies that involve a GPU (and CPU pairs whose graph crosses with
// fewer than two tensor sizes) are fitted from synchronised copies of 4 KiB to 16 MiB, host
// memory to each GPU included. Throws StepFailure when the step cannot run on a device.
sim::ProfiledCostModel ProfileDevices(const graph::Graph& graph, const graph::DeviceSet& devices,
                                      const ProfileOptions& options);

// What the alternating step of two CPU workers recorded (its pieces exposed for the tests).
struct CrossingTimes {
  // One timing from the step: the seconds measured and the fraction of them during which the
  // other worker was busy too (so that the time alone can be told from contention).
  struct Timed {
    double seconds = 0;
    double overlap = 0;
  };
  std::vector<int> device_of_op;  // the expanded alternating placement
  std::map<std::string, std::map<std::string, std::vector<Timed>>> copy_times;  // lane, tensor
  std::map<std::string, std::vector<Timed>> op_times;  // the op's own time, its clones left out
};

// The link from `from` to `to` (indices into `names`) fitted from the crossing step: a*bytes + b
// from the median time of each tensor copied that way, and the receive cost per byte: the ops on
// `to` took this much longer than alone (`alone` holds every op's median alone on `to`), over the
// bytes they read from `from`; both as they would have taken with the other worker idle
// (`contention`: the slowdown of two busy CPU workers, 1 for none). nullopt when that direction
// copied fewer than two tensor sizes.
std::optional<sim::LinkSpec> FitCrossingLink(const graph::Graph& graph,
                                             const CrossingTimes& crossing,
                                             const std::vector<std::string>& names, int from,
                                             int to, const std::map<std::string, double>& alone,
                                             double contention = 1);

}  // namespace placer::runtime
