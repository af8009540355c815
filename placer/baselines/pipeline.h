// The pipeline baseline: the model's forward ops in topological order cut into contiguous stages,
// one per device, by dynamic programming (PipeDream's planner without stage replication, as
// Tarnawski et al. state it), then run as micro-batches under GPipe or 1F1B with the micro-batch
// count and schedule that give the shortest simulated step within every device's memory.
// Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/data_parallel.h"
#include "graph/device.h"
#include "graph/evaluator.h"
#include "graph/ir.h"
#include "graph/placement.h"
#include "runtime/sim/cost_model.h"

namespace placer::baselines {

// Contiguous stages of the forward ops of `graph` (a training step) over `devices`, stage s on
// device s: the split that minimises the slowest stage's time, a stage's time being its ops'
// forward and backward times on its device plus the transfer of everything that crosses the cut
// after it (activations on, gradients back). Stages may be empty at the end (fewer stages are
// better when communication dominates). `bottleneck_seconds` is that slowest stage's time.
struct StagePartition {
  graph::Placement placement;  // of `graph`
  std::vector<int> stage_end;  // per stage: one past its last forward op in topological order
  double bottleneck_seconds = 0;
};
StagePartition PartitionIntoStages(const graph::Graph& graph, const graph::DeviceSet& devices,
                                   const sim::CostModel& costs);

// One simulated (micro-batch count, schedule) of the stage partition.
struct PipelineTrial {
  int micro_batches = 1;
  graph::PipelineSchedule schedule = graph::PipelineSchedule::kGPipe;
  graph::EvaluationResult result;  // simulated; invalid when a device runs out of memory
};

struct PipelineBaselineResult {
  StagePartition stages;
  std::vector<PipelineTrial> trials;  // every micro-batch count and schedule tried
  int best = -1;                      // index into trials of the fastest valid one; -1 if none
};

// The partition of `base` (the training step at `batch` rows, as `build_forward` builds it), then
// every micro-batch count of `micro_batch_counts` that divides the batch under both schedules,
// each simulated on `devices` with `costs`.
PipelineBaselineResult PipelineBaseline(
    const graph::Graph& base, const graph::ForwardBuilder& build_forward, int64_t batch,
    double learning_rate, const graph::DeviceSet& devices, const sim::CostModel& costs,
    const std::vector<int>& micro_batch_counts = {1, 2, 4, 8, 16, 32});

}  // namespace placer::baselines
