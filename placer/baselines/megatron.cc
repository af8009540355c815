#include "placer/baselines/megatron.h"

#include <fmt/format.h>

#include <algorithm>
#include <exception>
#include <map>
#include <optional>

#include "graph/micro_batches.h"
#include "graph/step_names.h"
#include "graph/tensor_parallel.h"
#include "graph/training_step.h"
#include "placer/baselines/problem.h"
#include "runtime/sim/simulator.h"

namespace placer::baselines {

namespace {

// The pipeline stage of each op of one replica's forward (its shards' ops included), by name:
// contiguous in op order (a topological order), cut where the running work crosses k / P of it.
std::map<std::string, int> StagesOf(const graph::Graph& forward, int stages, const OpWork& work) {
  const std::vector<graph::OpId> ops = forward.OpsInPhase(graph::Phase::kForward);
  std::vector<double> w;
  double total = 0;
  for (graph::OpId id : ops) total += w.emplace_back(work ? std::max(0.0, work(forward, id)) : 1.0);
  std::map<std::string, int> stage_of;
  double before = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    const double middle = total > 0 ? (before + w[i] / 2) / total : 0;
    stage_of[forward.op(ops[i]).name] = std::min(stages - 1, static_cast<int>(stages * middle));
    before += w[i];
  }
  return stage_of;
}

}  // namespace

MegatronStep BuildMegatronStep(const graph::ForwardBuilder& build_forward, int64_t batch,
                               double learning_rate, const std::vector<std::string>& device_names,
                               const MegatronShape& shape, const OpWork& op_work,
                               std::optional<std::vector<std::string>> column_starts) {
  const int num_devices = static_cast<int>(device_names.size());
  const int tensor_ways = shape.tensor_ways, stages = shape.pipeline_stages;
  if (tensor_ways < 1 || stages < 1 || shape.micro_batches < 1 ||
      num_devices % (tensor_ways * stages) != 0) {
    throw graph::GraphError(fmt::format("TP {} x PP {} (M = {}) does not fit {} devices",
                                        tensor_ways, stages, shape.micro_batches, num_devices));
  }
  const int replicas = num_devices / (tensor_ways * stages);
  MegatronStep step;
  // The same ops in every replica's shard.
  std::optional<std::vector<std::string>> starts = std::move(column_starts);
  std::map<std::string, int> stage_of;  // of one replica's forward ops, by name
  const graph::ForwardBuilder sharded = [&](int64_t rows, int64_t normalizer) {
    graph::Graph forward = build_forward(rows, normalizer);
    if (tensor_ways > 1) {
      if (!starts) starts = graph::MegatronColumnStarts(forward, tensor_ways);
      if (starts->empty()) {
        throw graph::GraphError(
            fmt::format("no linear layer pair of the model splits {} ways", tensor_ways));
      }
      graph::TensorParallelGraph split = graph::ShardTensorParallel(forward, *starts, tensor_ways);
      step.partial_sums = split.partial_sums;
      if (!step.split) step.split = split;
      forward = std::move(split.forward);
    }
    if (stage_of.empty()) stage_of = StagesOf(forward, stages, op_work);
    return forward;
  };
  const std::vector<std::string> replica_devices(device_names.begin(),
                                                 device_names.begin() + replicas);
  // Every shard's copy of a parameter it repeats (a LayerNorm's, a row-parallel layer's bias)
  // is tied to the others, in every replica, as data parallelism ties the replicas'.
  auto copies = [&](const graph::Graph& replica) {
    graph::TiedParameters ties;
    if (!step.split) return ties;
    for (const graph::ReplicatedParameter& p : step.split->replicated_parameters) {
      std::vector<graph::TensorId>& group = ties.emplace_back();
      for (int s = 0; s < tensor_ways; ++s) {
        group.push_back(replica.TensorByName(graph::ShardName(s, p.source)));
      }
    }
    return ties;
  };
  graph::DataParallelGraph dp = graph::BuildReplicatedPipelines(
      sharded, batch, replica_devices, shape.micro_batches, learning_rate, {}, copies);
  step.graph = std::move(dp.graph);
  step.placement = std::move(dp.placement);
  step.placement.devices = device_names;
  if (shape.micro_batches > 1) step.placement.schedule = graph::PipelineSchedule::kOneFOneB;
  for (graph::OpId id : step.graph.OpsInPhase(graph::Phase::kForward)) {
    const std::string& name = step.graph.op(id).name;
    const graph::StepName parsed = graph::ParseStepName(name);
    const auto stage = stage_of.find(parsed.base);
    if (stage == stage_of.end()) {
      throw graph::GraphError(fmt::format("op '{}' of the Megatron-style step has no stage", name));
    }
    step.placement.device_of_op[static_cast<size_t>(id)] =
        (parsed.replica.value_or(0) * stages + stage->second) * tensor_ways +
        graph::ShardOfName(name).value_or(0);
  }
  return step;
}

MegatronBaselineResult MegatronBaseline(const graph::Graph& base,
                                        const graph::ForwardBuilder& build_forward, int64_t batch,
                                        double learning_rate, const graph::DeviceSet& devices,
                                        const sim::CostModel& costs, int devices_per_host,
                                        int64_t max_ops, std::vector<std::string>* log) {
  MegatronBaselineResult outcome;
  const auto num_devices = static_cast<int>(devices.size());
  const int host = devices_per_host > 0 ? devices_per_host : num_devices;
  const std::vector<std::string> names = graph::DeviceNames(devices);
  auto say = [&](std::string line) {
    if (log != nullptr) log->push_back(std::move(line));
  };
  const OpWork work = [&](const graph::Graph& forward, graph::OpId op) {
    return costs.OpSeconds(forward, op, devices.front());
  };
  // Megatron's starts at T (empty for T = 1): one pick per T, shared by its shapes.
  std::optional<std::vector<std::string>> starts;
  auto try_shape = [&](const MegatronShape& shape) {
    const int replicas = num_devices / (shape.tensor_ways * shape.pipeline_stages);
    const std::string name =
        shape.pipeline_stages == 1
            ? fmt::format("TP {} x DP {}", shape.tensor_ways, replicas)
            : fmt::format("TP {} x PP {} x DP {} (M = {})", shape.tensor_ways,
                          shape.pipeline_stages, replicas, shape.micro_batches);
    if (batch % (int64_t{replicas} * shape.micro_batches) != 0) {
      say(fmt::format("Megatron-style: {} left out: {} rows do not split {}", name, batch,
                      shape.micro_batches == 1 ? fmt::format("{} ways", replicas)
                                               : fmt::format("into {} x {} micro-batches", replicas,
                                                             shape.micro_batches)));
      return;
    }
    // A shard holds its share of a split op and a whole copy of the rest, and splits add
    // collectives: R replicas have at least R times the plain step's ops. A step over the bound is
    // not built only to be dropped (the NMT's TP 1 x DP 8: 425k ops, over 200 MB).
    if (int64_t{replicas} * base.num_ops() > max_ops) {
      say(fmt::format("Megatron-style: {} left out: at least {} x {} ops are over {}", name,
                      replicas, base.num_ops(), max_ops));
      return;
    }
    MegatronStep step;
    try {
      step = BuildMegatronStep(build_forward, batch, learning_rate, names, shape, work, starts);
    } catch (const std::exception& e) {
      say(fmt::format("Megatron-style: {} left out: {}", name, e.what()));
      return;
    }
    if (step.graph.num_ops() > max_ops) {
      say(fmt::format("Megatron-style: {} left out: its {} ops are over {}", name,
                      step.graph.num_ops(), max_ops));
      return;
    }
    const sim::Simulator simulator(step.graph, devices, costs);
    MegatronTrial trial{.tensor_ways = shape.tensor_ways,
                        .pipeline_stages = shape.pipeline_stages,
                        .micro_batches = shape.micro_batches,
                        .replicas = replicas,
                        .partial_sums = step.partial_sums};
    trial.result = simulator.ToEvaluationResult(simulator.Simulate(step.placement));
    say(fmt::format("Megatron-style: {} ({} sums per replica): {}", name, trial.partial_sums,
                    trial.result.valid ? fmt::format("{:.3f} ms", trial.result.step_seconds * 1e3)
                                       : trial.result.invalid_reason));
    outcome.trials.push_back(std::move(trial));
  };
  for (int ways = 1; ways <= host && ways <= num_devices; ways *= 2) {
    if (host % ways != 0 || num_devices % ways != 0) continue;
    starts.reset();
    if (ways > 1) {
      try {
        starts = graph::MegatronColumnStarts(build_forward(batch, 0), ways);
      } catch (const graph::GraphError& e) {
        say(fmt::format("Megatron-style: TP {} left out: {}", ways, e.what()));
        continue;
      }
    }
    try_shape({.tensor_ways = ways});
    // Pipelines of tensor-parallel stages (T = 1: the pipeline baseline's grid).
    for (int stages = 2; ways > 1 && ways * stages <= num_devices; stages *= 2) {
      if (num_devices % (ways * stages) != 0) continue;
      for (int m : {stages, 2 * stages, 4 * stages}) {
        try_shape({.tensor_ways = ways, .pipeline_stages = stages, .micro_batches = m});
      }
    }
  }
  outcome.best = FastestValid(outcome.trials);
  return outcome;
}

}  // namespace placer::baselines
