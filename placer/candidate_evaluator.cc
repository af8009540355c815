#include "placer/candidate_evaluator.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "graph/micro_batches.h"

namespace placer::search {

ReplicatedModel SingleReplica(graph::Graph graph, const graph::Grouping& grouping) {
  ReplicatedModel model;
  model.replicas = 1;
  model.graph = std::move(graph);
  model.group_of_op = grouping.group_of_op;
  model.group_of_op.resize(static_cast<size_t>(model.graph.num_ops()), -1);
  model.replica_of_op.assign(static_cast<size_t>(model.graph.num_ops()), -1);
  model.forward_ops = model.graph.OpsInPhase(graph::Phase::kForward);
  for (graph::OpId id : model.forward_ops) model.replica_of_op[static_cast<size_t>(id)] = 0;
  model.num_groups = grouping.num_groups();
  return model;
}

ReplicatedModel Replicated(graph::DataParallelGraph replicated, const graph::Graph& base,
                           const graph::Grouping& grouping) {
  ReplicatedModel model;
  model.replicas = static_cast<int>(replicated.shard_sizes.size());
  model.shard_sizes = std::move(replicated.shard_sizes);
  model.graph = std::move(replicated.graph);
  graph::ReplicaMap map = graph::MapReplicas(model.graph, base);
  model.replica_of_op = std::move(map.replica_of_op);
  model.group_of_op.assign(static_cast<size_t>(model.graph.num_ops()), -1);
  model.forward_ops = model.graph.OpsInPhase(graph::Phase::kForward);
  for (graph::OpId id : model.forward_ops) {
    model.group_of_op[static_cast<size_t>(id)] =
        grouping.group_of_op[static_cast<size_t>(map.base_op[static_cast<size_t>(id)])];
  }
  model.num_groups = grouping.num_groups();
  return model;
}

ReplicatedModel MicroBatched(graph::MicroBatchedGraph mb, const graph::Graph& base,
                             const graph::Grouping& grouping) {
  // Every micro-batch's copy of an op belongs to the op's group: PlaceMicroBatches' mapping of a
  // "placement" of `base` whose devices are the groups.
  graph::Placement groups_of_base = graph::Placement::AllOn(base, {"groups"}, 0);
  for (graph::OpId id : base.OpsInPhase(graph::Phase::kForward)) {
    groups_of_base.device_of_op[static_cast<size_t>(id)] =
        grouping.group_of_op[static_cast<size_t>(id)];
  }
  const graph::Placement mapped =
      graph::PlaceMicroBatches(mb, base, groups_of_base, graph::PipelineSchedule::kGPipe);
  ReplicatedModel model;
  model.micro_batches = mb.micro_batches;
  model.shard_sizes = {mb.micro_batch_size * mb.micro_batches};
  model.graph = std::move(mb.graph);
  model.group_of_op.assign(static_cast<size_t>(model.graph.num_ops()), -1);
  model.replica_of_op.assign(static_cast<size_t>(model.graph.num_ops()), -1);
  model.forward_ops = model.graph.OpsInPhase(graph::Phase::kForward);
  for (graph::OpId id : model.forward_ops) {
    model.group_of_op[static_cast<size_t>(id)] = mapped.device_of_op[static_cast<size_t>(id)];
    model.replica_of_op[static_cast<size_t>(id)] = 0;
  }
  model.num_groups = grouping.num_groups();
  return model;
}

ActionSpace SpaceOf(int devices, const std::vector<const ReplicatedModel*>& models) {
  std::vector<int> replica_counts, micro_batch_counts;
  std::vector<ReplicatedPipeline> pipelines;
  std::vector<TensorParallelShape> tensor_parallel;
  for (const auto& m : models) {
    if (m->tensor_ways > 1) {
      tensor_parallel.push_back({m->replicas, m->tensor_ways});
    } else if (m->micro_batches == 1) {
      replica_counts.push_back(m->replicas);
    } else if (m->replicas == 1) {
      micro_batch_counts.push_back(m->micro_batches);
    } else {
      pipelines.push_back({m->replicas, m->micro_batches});
    }
  }
  return ActionSpace(devices, replica_counts, micro_batch_counts, pipelines, tensor_parallel);
}

CandidateEvaluator::CandidateEvaluator(const ActionSpace& space,
                                       std::vector<const ReplicatedModel*> models,
                                       std::vector<graph::Evaluator*> evaluators,
                                       std::vector<std::string> device_names)
    : space_(space),
      models_(std::move(models)),
      evaluators_(std::move(evaluators)),
      device_names_(std::move(device_names)) {
  if (models_.empty() || models_.size() != evaluators_.size()) {
    throw std::invalid_argument(fmt::format("{} models need as many evaluators (got {})",
                                            models_.size(), evaluators_.size()));
  }
  if (static_cast<int>(device_names_.size()) != space_.num_devices()) {
    throw std::invalid_argument("the action space and the device names disagree");
  }
  for (size_t i = 0; i < models_.size(); ++i) {
    if (models_[i] == nullptr || evaluators_[i] == nullptr ||
        models_[i]->num_groups != models_.front()->num_groups) {
      throw std::invalid_argument(fmt::format("model {} is missing or has other groups", i));
    }
  }
  for (const StepShape& shape : space_.shapes()) {
    Index(shape.replicas, shape.micro_batches, shape.tensor_ways);
  }
}

size_t CandidateEvaluator::Index(int replicas, int micro_batches, int tensor_ways) const {
  for (size_t i = 0; i < models_.size(); ++i) {
    if (models_[i]->replicas == replicas && models_[i]->micro_batches == micro_batches &&
        models_[i]->tensor_ways == tensor_ways) {
      return i;
    }
  }
  throw std::invalid_argument(
      tensor_ways > 1
          ? fmt::format("no model of {} copies in {} tensor-parallel shards", replicas, tensor_ways)
      : micro_batches == 1
          ? fmt::format("no model with {} replicas", replicas)
          : fmt::format("no model with {} replicas and {} micro-batches", replicas, micro_batches));
}

graph::Placement CandidateEvaluator::PlacementOf(const Candidate& candidate) const {
  const ReplicatedModel& m = model(candidate);
  graph::Placement placement{
      .devices = device_names_,
      .device_of_op = std::vector<int>(static_cast<size_t>(m.graph.num_ops()), -1),
      .micro_batches = candidate.micro_batches,
      .schedule = candidate.schedule};
  for (graph::OpId id : m.forward_ops) {
    const auto op = static_cast<size_t>(id);
    const int option = candidate.options.at(static_cast<size_t>(m.group_of_op[op]));
    placement.device_of_op[op] = space_.DeviceOf(option, m.replica_of_op[op], candidate.replicas);
  }
  return placement;
}

std::vector<graph::EvaluationResult> CandidateEvaluator::Evaluate(
    std::span<const Candidate> candidates) const {
  std::vector<graph::EvaluationResult> results(candidates.size());
  const int groups = num_groups();
  for (size_t i = 0; i < models_.size(); ++i) {
    const ReplicatedModel& m = *models_[i];
    std::vector<size_t> mine;
    std::vector<graph::Placement> placements;
    for (size_t k = 0; k < candidates.size(); ++k) {
      if (candidates[k].replicas != m.replicas || candidates[k].micro_batches != m.micro_batches ||
          candidates[k].tensor_ways != m.tensor_ways) {
        continue;
      }
      try {
        space_.Check(candidates[k], groups);
        placements.push_back(PlacementOf(candidates[k]));
        mine.push_back(k);
      } catch (const std::exception& error) {
        results[k].invalid_reason = error.what();
      }
    }
    if (mine.empty()) continue;
    std::vector<graph::EvaluationResult> judged;
    try {
      judged = evaluators_[i]->EvaluateBatch(placements);
    } catch (const graph::EvaluatorUnavailable&) {
      throw;                                 // no verdict at all: the caller stops
    } catch (const std::exception& error) {  // an evaluator should not throw; if it does, go on
      judged.assign(mine.size(), {});
      for (auto& r : judged) r.invalid_reason = error.what();
    }
    for (size_t j = 0; j < mine.size(); ++j) results[mine[j]] = std::move(judged[j]);
  }
  for (size_t k = 0; k < candidates.size(); ++k) {
    if (!results[k].valid && results[k].invalid_reason.empty()) {
      results[k].invalid_reason = fmt::format(
          "{} replicas with {} micro-batches{}: not a shape of the search", candidates[k].replicas,
          candidates[k].micro_batches,
          candidates[k].tensor_ways == 1
              ? ""
              : fmt::format(" in {} tensor-parallel shards", candidates[k].tensor_ways));
    }
  }
  return results;
}

}  // namespace placer::search
