#include "placer/baselines/megatron.h"

#include <fmt/format.h>

#include <exception>
#include <optional>

#include "graph/tensor_parallel.h"
#include "graph/training_step.h"
#include "placer/baselines/problem.h"
#include "runtime/sim/simulator.h"

namespace placer::baselines {

MegatronStep BuildMegatronStep(const graph::ForwardBuilder& build_forward, int64_t batch,
                               double learning_rate, const std::vector<std::string>& device_names,
                               int tensor_ways) {
  const int num_devices = static_cast<int>(device_names.size());
  const int replicas = num_devices / tensor_ways;
  MegatronStep step;
  graph::ForwardBuilder sharded = build_forward;
  std::optional<std::vector<std::string>> starts;  // the same ops in every replica's shard
  if (tensor_ways > 1) {
    sharded = [&](int64_t rows, int64_t normalizer) {
      graph::Graph forward = build_forward(rows, normalizer);
      if (!starts) starts = graph::MegatronColumnStarts(forward, tensor_ways);
      if (starts->empty()) {
        throw graph::GraphError(
            fmt::format("no linear layer pair of the model splits {} ways", tensor_ways));
      }
      graph::TensorParallelGraph split = graph::ShardTensorParallel(forward, *starts, tensor_ways);
      step.partial_sums = split.partial_sums;
      if (!step.split) step.split = split;
      return std::move(split.forward);
    };
  }
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
  graph::DataParallelGraph dp = graph::BuildDataParallel(
      sharded, batch, replica_devices, std::vector<double>(static_cast<size_t>(replicas), 1.0),
      learning_rate, {}, copies);
  step.graph = std::move(dp.graph);
  step.placement = std::move(dp.placement);
  step.placement.devices = device_names;
  for (graph::OpId id : step.graph.OpsInPhase(graph::Phase::kForward)) {
    const std::string& name = step.graph.op(id).name;
    const int replica = graph::ParseStepName(name).replica.value_or(0);
    step.placement.device_of_op[static_cast<size_t>(id)] =
        replica * tensor_ways + graph::ShardOfName(name).value_or(0);
  }
  return step;
}

MegatronBaselineResult MegatronBaseline(const graph::ForwardBuilder& build_forward, int64_t batch,
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
  for (int ways = 1; ways <= host && ways <= num_devices; ways *= 2) {
    if (host % ways != 0 || num_devices % ways != 0) continue;
    const int replicas = num_devices / ways;
    if (batch % replicas != 0) {
      say(fmt::format("Megatron-style: TP {} x DP {} left out: {} rows do not split {} ways", ways,
                      replicas, batch, replicas));
      continue;
    }
    MegatronStep step;
    try {
      step = BuildMegatronStep(build_forward, batch, learning_rate, names, ways);
    } catch (const std::exception& e) {
      say(fmt::format("Megatron-style: TP {} x DP {} left out: {}", ways, replicas, e.what()));
      continue;
    }
    if (step.graph.num_ops() > max_ops) {
      say(fmt::format("Megatron-style: TP {} x DP {} left out: its {} ops are over {}", ways,
                      replicas, step.graph.num_ops(), max_ops));
      continue;
    }
    const sim::Simulator simulator(step.graph, devices, costs);
    MegatronTrial trial{
        .tensor_ways = ways, .replicas = replicas, .partial_sums = step.partial_sums};
    trial.result = simulator.ToEvaluationResult(simulator.Simulate(step.placement));
    say(fmt::format("Megatron-style: TP {} x DP {} ({} sums per replica): {}", ways, replicas,
                    trial.partial_sums,
                    trial.result.valid ? fmt::format("{:.3f} ms", trial.result.step_seconds * 1e3)
                                       : trial.result.invalid_reason));
    outcome.trials.push_back(std::move(trial));
  }
  outcome.best = FastestValid(outcome.trials);
  return outcome;
}

}  // namespace placer::baselines
