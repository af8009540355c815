#include "placer/setup/simulated_problem.h"

#include <algorithm>

#include "graph/training_step.h"
#include "placer/setup/tensor_parallel_models.h"

namespace placer::setup {

double SimulatedProblem::LowerBound() const {
  double bound = simulators.front()->lower_bound().seconds;
  for (const auto& s : simulators) bound = std::min(bound, s->lower_bound().seconds);
  return bound;
}

SimulatedProblem MakeSimulatedProblem(const graph::ForwardBuilder& build_forward, int64_t batch,
                                      double learning_rate,
                                      const graph::GroupingOptions& grouping_options,
                                      graph::DeviceSet devices, const sim::CostModel& cost_model,
                                      const std::vector<int>& replica_counts,
                                      const std::vector<int>& micro_batch_counts,
                                      const std::vector<search::ReplicatedPipeline>& pipelines,
                                      const std::vector<search::TensorParallelShape>& split) {
  SimulatedProblem p;
  graph::Graph base = build_forward(batch, 0);
  graph::AppendBackwardAndUpdate(base, learning_rate);
  base.Validate();
  p.grouping = graph::MakeGrouping(base, grouping_options);
  p.features = graph::ComputeGroupFeatures(base, p.grouping);
  p.models = search::BuildReplicatedModels(std::move(base), p.grouping, build_forward, batch,
                                           learning_rate, replica_counts, &p.notes);
  search::AddMicroBatchedModels(p.models, p.grouping, build_forward, batch, learning_rate,
                                micro_batch_counts, &p.notes);
  search::AddReplicatedPipelineModels(p.models, p.grouping, build_forward, batch, learning_rate,
                                      pipelines, &p.notes);
  AddTensorParallelModels(p.models, p.grouping, build_forward, batch, learning_rate, split,
                          kMaxTensorParallelOps, &p.notes);
  std::vector<const search::ReplicatedModel*> models;
  std::vector<graph::Evaluator*> evaluators;
  for (const auto& m : p.models) {
    p.simulators.push_back(
        std::make_unique<sim::SimulatedEvaluator>(m->graph, devices, cost_model));
    models.push_back(m.get());
    evaluators.push_back(p.simulators.back().get());
  }
  p.evaluator = std::make_unique<search::CandidateEvaluator>(
      search::SpaceOf(static_cast<int>(devices.size()), p.models), models, evaluators,
      graph::DeviceNames(devices));
  return p;
}

search::ScheduleCosts ScheduleCostsOf(const sim::CostModel& cost_model, const graph::Graph& base,
                                      const graph::Grouping& grouping,
                                      const graph::DeviceSet& devices) {
  sim::GroupPhaseSeconds times = sim::PhaseSecondsPerGroup(cost_model, base, grouping.group_of_op,
                                                           grouping.num_groups(), devices);
  return {sim::TypicalSecondsPerCopy(cost_model, devices),
          sim::TypicalSecondsPerOp(cost_model, base, devices), std::move(times.forward),
          std::move(times.backward)};
}

}  // namespace placer::setup
