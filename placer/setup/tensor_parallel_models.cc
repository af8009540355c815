#include "placer/setup/tensor_parallel_models.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <unordered_map>

#include "graph/step_names.h"
#include "graph/tensor_parallel.h"

namespace placer::setup {

std::vector<search::TensorParallelShape> DefaultTensorParallelShapes(
    int num_devices, int devices_per_host, const std::vector<int>& replica_counts) {
  const int host = devices_per_host > 0 ? devices_per_host : num_devices;
  std::vector<search::TensorParallelShape> shapes;
  for (int ways = 2; ways <= host && ways <= num_devices; ways *= 2) {
    if (host % ways != 0 || num_devices % ways != 0) continue;
    if (std::find(replica_counts.begin(), replica_counts.end(), num_devices) !=
        replica_counts.end()) {
      shapes.push_back({num_devices, ways});
    }
  }
  return shapes;
}

baselines::MegatronStep BuildTensorParallelStep(
    const graph::ForwardBuilder& build_forward, int64_t batch, double learning_rate,
    const search::TensorParallelShape& shape,
    std::optional<std::vector<std::string>> column_starts) {
  // Names only: the copies are devices of the step's placement, which a candidate's options set.
  std::vector<std::string> copies;
  for (int c = 0; c < shape.replicas; ++c) copies.push_back(fmt::format("copy{}", c));
  return baselines::BuildMegatronStep(build_forward, batch, learning_rate, copies,
                                      {.tensor_ways = shape.tensor_ways}, nullptr,
                                      std::move(column_starts));
}

search::ReplicatedModel TensorParallelModel(const graph::Graph& base,
                                            const graph::Grouping& grouping,
                                            const graph::ForwardBuilder& build_forward,
                                            int64_t batch, double learning_rate,
                                            const search::TensorParallelShape& shape,
                                            const std::vector<std::string>& column_starts) {
  const int replicas = shape.replicas / shape.tensor_ways;
  if (batch % replicas != 0) {
    throw graph::GraphError(fmt::format("{} rows do not split over {} replicas", batch, replicas));
  }
  // One replica's forward as the model builds it, to name the model op each split op serves.
  std::optional<graph::Graph> replica_forward;
  const graph::ForwardBuilder keep_first = [&](int64_t rows, int64_t normalizer) {
    graph::Graph forward = build_forward(rows, normalizer);
    if (!replica_forward) replica_forward = forward;
    return forward;
  };
  baselines::MegatronStep step =
      BuildTensorParallelStep(keep_first, batch, learning_rate, shape, column_starts);
  const graph::TensorParallelGraph& split = step.split.value();
  std::unordered_map<std::string, int> group_of_name;  // of the split forward's ops
  for (graph::OpId id = 0; id < split.forward.num_ops(); ++id) {
    const std::string& source = replica_forward->op(split.source_op[static_cast<size_t>(id)]).name;
    const std::optional<graph::OpId> in_base = base.FindOp(source);
    if (!in_base) {
      throw graph::GraphError(fmt::format("op '{}' of a replica is not in the model", source));
    }
    group_of_name[split.forward.op(id).name] = grouping.group_of_op[static_cast<size_t>(*in_base)];
  }
  search::ReplicatedModel model;
  model.replicas = shape.replicas;
  model.tensor_ways = shape.tensor_ways;
  model.shard_sizes.assign(static_cast<size_t>(replicas), batch / replicas);
  model.graph = std::move(step.graph);
  model.group_of_op.assign(static_cast<size_t>(model.graph.num_ops()), -1);
  model.replica_of_op.assign(static_cast<size_t>(model.graph.num_ops()), -1);
  model.forward_ops = model.graph.OpsInPhase(graph::Phase::kForward);
  for (graph::OpId id : model.forward_ops) {
    const auto op = static_cast<size_t>(id);
    const std::string& name = model.graph.op(id).name;
    const auto group = group_of_name.find(graph::ParseStepName(name).base);
    if (group == group_of_name.end()) {
      throw graph::GraphError(fmt::format("op '{}' of the split step has no group", name));
    }
    model.group_of_op[op] = group->second;
    // BuildMegatronStep's device of a forward op, one stage: replica r's shard s on r T + s.
    model.replica_of_op[op] = step.placement.device_of_op[op];
  }
  model.num_groups = grouping.num_groups();
  return model;
}

}  // namespace placer::setup
