// Profiles the real devices into a cost model for the simulator: every op of the training step
// timed on every device, the copy cost between each pair of devices fitted as a*bytes + b, and
// how much devices of one kind slow each other down.
#pragma once

#include <string>

#include "graph/ir.h"
#include "runtime/device.h"
#include "runtime/sim/cost_model.h"

namespace placer::runtime {

struct ProfileOptions {
  int warmup_steps = 3;
  int timed_steps = 10;  // an op's time is its median over these steps
  uint64_t seed = 0;
  std::string model_name;
};

// Runs the whole step on each device alone (so ops are timed without contention from a placement)
// and, for every pair of CPU workers, a step whose forward ops alternate between the two; and,
// for every device kind with several devices, all of them running the whole step at once, whose
// op times over the times alone give the kind's ContentionSpec. They take turns in blocks of a
// few steps. Copies between two CPU workers are fitted from the executor's own copies in the
// alternating step, and so is the receive cost (how much slower the ops reading the other
// worker's tensors ran than alone, per byte read, their own clones left out); both are taken back
// to what they would have cost alone by the contention, for the fraction of each during which
// the other worker was busy. Copies that involve a GPU (and CPU pairs whose graph crosses with
// fewer than two tensor sizes) are fitted from synchronised copies of 4 KiB to 16 MiB, host
// memory to each GPU included. Throws StepFailure when the step cannot run on a device.
sim::ProfiledCostModel ProfileDevices(const graph::Graph& graph, const DeviceSet& devices,
                                      const ProfileOptions& options);

}  // namespace placer::runtime
