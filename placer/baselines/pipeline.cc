#include "placer/baselines/pipeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "graph/micro_batches.h"
#include "graph/step_names.h"
#include "placer/baselines/problem.h"
#include "runtime/sim/simulator.h"

namespace placer::baselines {

using graph::OpId;
using graph::Phase;
using graph::TensorId;

StagePartition PartitionIntoStages(const graph::Graph& graph, const graph::DeviceSet& devices,
                                   const sim::CostModel& costs) {
  if (devices.empty()) throw std::invalid_argument("a pipeline needs at least one device");
  std::vector<OpId> forward;
  for (OpId id : graph.TopologicalOrder()) {
    if (graph.op(id).phase == Phase::kForward) forward.push_back(id);
  }
  const size_t n = forward.size();
  const size_t stages = devices.size();
  std::vector<int> position(static_cast<size_t>(graph.num_ops()), -1);
  for (size_t i = 0; i < n; ++i) position[static_cast<size_t>(forward[i])] = static_cast<int>(i);
  std::vector<OpId> backward_of(static_cast<size_t>(graph.num_ops()), graph::kNoOp);
  for (OpId id = 0; id < graph.num_ops(); ++id) {
    if (graph.op(id).phase == Phase::kBackward && graph.op(id).forward_op != graph::kNoOp) {
      backward_of[static_cast<size_t>(graph.op(id).forward_op)] = id;
    }
  }
  // work[s][i]: forward and backward time of the first i forward ops on device s (prefix sums).
  std::vector<std::vector<double>> work(stages, std::vector<double>(n + 1, 0));
  for (size_t s = 0; s < stages; ++s) {
    for (size_t i = 0; i < n; ++i) {
      double seconds = costs.OpSeconds(graph, forward[i], devices[s]);
      const OpId backward = backward_of[static_cast<size_t>(forward[i])];
      if (backward != graph::kNoOp) seconds += costs.OpSeconds(graph, backward, devices[s]);
      work[s][i + 1] = work[s][i] + seconds;
    }
  }
  // cut_bytes[i]: activations produced by the first i forward ops and read after them.
  std::vector<int64_t> cut_bytes(n + 1, 0);
  for (TensorId t = 0; t < graph.num_tensors(); ++t) {
    const graph::Tensor& tensor = graph.tensor(t);
    if (tensor.producer == graph::kNoOp) continue;
    const int from = position[static_cast<size_t>(tensor.producer)];
    if (from < 0) continue;
    int last = from;
    for (OpId consumer : tensor.consumers)
      last = std::max(last, position[static_cast<size_t>(consumer)]);
    for (int cut = from + 1; cut <= last; ++cut)
      cut_bytes[static_cast<size_t>(cut)] += tensor.bytes();
  }
  // send[s][end]: the activations of a stage s that ends at `end` to the next stage, and their
  // gradients back (computed once: the dynamic program below asks for them O(S n^2) times).
  std::vector<std::vector<double>> send(stages, std::vector<double>(n + 1, 0));
  for (size_t s = 0; s + 1 < stages; ++s) {
    for (size_t end = 0; end < n; ++end) {
      if (cut_bytes[end] > 0) {
        send[s][end] = 2 * costs.TransferSeconds(cut_bytes[end], &devices[s], devices[s + 1]);
      }
    }
  }
  auto stage_seconds = [&](size_t s, size_t begin, size_t end) {
    double seconds = work[s][end] - work[s][begin];
    if (begin < end) seconds += send[s][end];
    return seconds;
  };
  // best[s][i]: the smallest bottleneck placing the first i ops on stages 0..s.
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(stages, std::vector<double>(n + 1, kInf));
  std::vector<std::vector<size_t>> split(stages, std::vector<size_t>(n + 1, 0));
  for (size_t i = 0; i <= n; ++i) best[0][i] = stage_seconds(0, 0, i);
  for (size_t s = 1; s < stages; ++s) {
    for (size_t i = 0; i <= n; ++i) {
      // From the longest previous stages down: on a tie, later stages stay empty. Stage s's own
      // time only grows as it starts earlier (work is a prefix sum, its send does not depend on
      // where it starts), so once it reaches the best bottleneck no earlier start can beat it.
      for (size_t j = i + 1; j-- > 0;) {
        const double own = stage_seconds(s, j, i);
        if (own >= best[s][i]) break;
        const double bottleneck = std::max(best[s - 1][j], own);
        if (bottleneck < best[s][i]) {
          best[s][i] = bottleneck;
          split[s][i] = j;
        }
      }
    }
  }
  StagePartition partition;
  partition.bottleneck_seconds = best[stages - 1][n];
  partition.stage_end.assign(stages, 0);
  size_t end = n;
  for (size_t s = stages; s-- > 0;) {
    partition.stage_end[s] = static_cast<int>(end);
    if (s > 0) end = split[s][end];
  }
  std::vector<std::string> names;
  for (const graph::Device& d : devices) names.push_back(d.name);
  partition.placement = graph::Placement::AllOn(graph, std::move(names), 0);
  size_t stage = 0;
  for (size_t i = 0; i < n; ++i) {
    while (static_cast<int>(i) >= partition.stage_end[stage]) ++stage;
    partition.placement.device_of_op[static_cast<size_t>(forward[i])] = static_cast<int>(stage);
  }
  return partition;
}

const StagePartition& PipelineBaselineResult::StagesFor(int replicas) const {
  for (size_t i = 0; i < replica_counts.size(); ++i) {
    if (replica_counts[i] == replicas) return stages[i];
  }
  throw std::invalid_argument(fmt::format("no stages for {} replicas", replicas));
}

namespace {

// The step graph of R replicas in M micro-batches: `built`'s, else built afresh.
std::shared_ptr<const graph::Graph> StepGraph(int replicas, int micro_batches,
                                              const graph::ForwardBuilder& build_forward,
                                              int64_t batch, double learning_rate,
                                              const BuiltStep& built) {
  if (built) {
    if (const graph::Graph* step = built(replicas, micro_batches)) {
      return std::shared_ptr<const graph::Graph>(std::shared_ptr<void>(), step);  // not owned
    }
  }
  if (replicas == 1) {
    return std::make_shared<const graph::Graph>(
        graph::BuildMicroBatched(build_forward, batch, micro_batches, learning_rate).graph);
  }
  return std::make_shared<const graph::Graph>(
      graph::BuildReplicatedPipelines(build_forward, batch, graph::ReplicaLabels(replicas),
                                      micro_batches, learning_rate)
          .graph);
}

}  // namespace

PipelineStep BuildPipelineStep(const PipelineBaselineResult& result, const PipelineTrial& trial,
                               const graph::Graph& base, const graph::ForwardBuilder& build_forward,
                               int64_t batch, double learning_rate,
                               const std::vector<std::string>& device_names,
                               const BuiltStep& built) {
  const StagePartition& stages = result.StagesFor(trial.replicas);
  graph::Placement per_stage = stages.placement;
  per_stage.devices = device_names;
  PipelineStep out{.graph = StepGraph(trial.replicas, trial.micro_batches, build_forward, batch,
                                      learning_rate, built)};
  const graph::Graph& step = *out.graph;
  if (trial.replicas == 1) {
    out.placement =
        graph::PlaceMicroBatches(step, trial.micro_batches, base, per_stage, trial.schedule);
    return out;
  }
  const int stride = static_cast<int>(device_names.size()) / trial.replicas;
  const graph::ReplicaMap map = graph::MapReplicas(step, base);
  out.placement = {.devices = device_names,
                   .device_of_op = std::vector<int>(static_cast<size_t>(step.num_ops()), -1),
                   .micro_batches = trial.micro_batches,
                   .schedule = trial.schedule};
  for (OpId id : step.OpsInPhase(Phase::kForward)) {
    const auto op = static_cast<size_t>(id);
    out.placement.device_of_op[op] = per_stage.device_of_op[static_cast<size_t>(map.base_op[op])] +
                                     map.replica_of_op[op] * stride;
  }
  return out;
}

PipelineBaselineResult PipelineBaseline(const graph::Graph& base,
                                        const graph::ForwardBuilder& build_forward, int64_t batch,
                                        double learning_rate, const graph::DeviceSet& devices,
                                        const sim::CostModel& costs, const PipelineGrid& grid,
                                        std::vector<std::string>* skipped) {
  PipelineBaselineResult outcome;
  const auto num_devices = static_cast<int>(devices.size());
  std::vector<int> replica_counts = {1};
  for (int r : grid.replica_counts) {
    if (r > 1 && num_devices % r == 0 && num_devices / r >= 2 &&
        std::find(replica_counts.begin(), replica_counts.end(), r) == replica_counts.end()) {
      replica_counts.push_back(r);
    }
  }
  const std::vector<std::string> names = graph::DeviceNames(devices);
  for (int r : replica_counts) {
    outcome.replica_counts.push_back(r);
    outcome.stages.push_back(PartitionIntoStages(
        base, graph::DeviceSet(devices.begin(), devices.begin() + num_devices / r), costs));
    for (int m : grid.micro_batch_counts) {
      if (m < 1 || batch % (int64_t{r} * m) != 0) continue;
      if (int64_t{r} * m * base.num_ops() > grid.max_ops) {
        if (skipped != nullptr) {
          skipped->push_back(fmt::format("{} replicas x M = {} left out: {} x {} ops is over {}", r,
                                         m, r * m, base.num_ops(), grid.max_ops));
        }
        continue;
      }
      // Both schedules run the same step.
      PipelineStep step = BuildPipelineStep(outcome, {.replicas = r, .micro_batches = m}, base,
                                            build_forward, batch, learning_rate, names, grid.built);
      const sim::Simulator simulator(*step.graph, devices, costs);
      for (graph::PipelineSchedule schedule :
           {graph::PipelineSchedule::kGPipe, graph::PipelineSchedule::kOneFOneB}) {
        if (m == 1 && schedule != graph::PipelineSchedule::kGPipe) continue;  // the same step
        PipelineTrial trial{.replicas = r, .micro_batches = m, .schedule = schedule};
        step.placement.schedule = schedule;
        trial.result = simulator.ToEvaluationResult(simulator.Simulate(step.placement));
        outcome.trials.push_back(std::move(trial));
      }
    }
  }
  outcome.best = FastestValid(outcome.trials);
  return outcome;
}

}  // namespace placer::baselines
