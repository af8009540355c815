// The pipeline baseline: the model's forward ops in topological order cut into contiguous stages,
// one per device, by dynamic programming (PipeDream's planner without stage replication, as
// Tarnawski et al. state it), then run as micro-batches under GPipe or 1F1B with the micro-batch
// count and schedule that give the shortest simulated step within every device's memory. With
// replicas, the DP x PP grid a practitioner configures by hand (Megatron's data-parallel size
// times pipeline size): R pipelines of D / R contiguous stages each, pipeline r on devices
// r D / R and up, data parallel between them (graph::BuildReplicatedPipelines).
// Torch-free.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
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

// One simulated (replica count, micro-batch count, schedule) of the grid.
struct PipelineTrial {
  int replicas = 1;
  int micro_batches = 1;
  graph::PipelineSchedule schedule = graph::PipelineSchedule::kGPipe;
  graph::EvaluationResult result;  // simulated; invalid when a device runs out of memory
};

struct PipelineBaselineResult {
  // Per replica count tried (in the order given): the stages of one pipeline, over the first
  // D / R devices.
  std::vector<int> replica_counts;
  std::vector<StagePartition> stages;
  std::vector<PipelineTrial> trials;  // every shape tried
  int best = -1;                      // index into trials of the fastest valid one; -1 if none
  const StagePartition& StagesFor(int replicas) const;
};

// A step of the grid that was built already (the search's, of the same shape), or null: it is
// simulated where it is instead of being built a second time beside it. It must be the graph the
// grid would build (one replica: graph::BuildMicroBatched; more: graph::BuildReplicatedPipelines).
using BuiltStep = std::function<const graph::Graph*(int replicas, int micro_batches)>;

// The grid's shapes, and what it may reuse.
struct PipelineGrid {
  std::vector<int> micro_batch_counts = {1, 2, 4, 8, 16, 32};
  std::vector<int> replica_counts = {1};
  int64_t max_ops = 250'000;  // a shape whose R x M copies of the step exceed it is skipped
  BuiltStep built;            // empty: every step is built afresh
};

// For every replica count R of `grid.replica_counts` that divides the D devices into pipelines of
// at least two stages (R = 1 always): the partition of `base` (the training step at `batch` rows,
// as `build_forward` builds it) over the first D / R devices, then every micro-batch count of
// `grid.micro_batch_counts` for which R x M divides the batch, under both schedules, each
// simulated on `devices` with `costs`. A shape over `grid.max_ops` is said in `skipped`.
PipelineBaselineResult PipelineBaseline(const graph::Graph& base,
                                        const graph::ForwardBuilder& build_forward, int64_t batch,
                                        double learning_rate, const graph::DeviceSet& devices,
                                        const sim::CostModel& costs, const PipelineGrid& grid = {},
                                        std::vector<std::string>* skipped = nullptr);

// The step of trial `trial` (`built`'s, else built afresh: one replica graph::BuildMicroBatched,
// more graph::BuildReplicatedPipelines) and its placement: replica r's copy of an op on the device
// of its stage, plus r D / R.
struct PipelineStep {
  std::shared_ptr<const graph::Graph> graph;  // owns it when built here
  graph::Placement placement;
};
PipelineStep BuildPipelineStep(const PipelineBaselineResult& result, const PipelineTrial& trial,
                               const graph::Graph& base, const graph::ForwardBuilder& build_forward,
                               int64_t batch, double learning_rate,
                               const std::vector<std::string>& device_names,
                               const BuiltStep& built = {});

}  // namespace placer::baselines
