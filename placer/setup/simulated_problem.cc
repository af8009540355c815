#include "placer/setup/simulated_problem.h"

#include <algorithm>

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
  p.steps = std::make_unique<StepCache>(
      StepRecipe{.forward = build_forward, .batch = batch, .learning_rate = learning_rate});
  const graph::Graph& base = p.steps->base();
  p.grouping = graph::MakeGrouping(base, grouping_options);
  p.features = graph::ComputeGroupFeatures(base, p.grouping);
  p.steps->UseGrouping(p.grouping);
  p.models = SearchSteps(*p.steps,
                         {.replica_counts = replica_counts,
                          .micro_batch_counts = micro_batch_counts,
                          .pipelines = pipelines,
                          .tensor_parallel = split,
                          .max_tensor_parallel_ops = kMaxTensorParallelOps},
                         &p.notes);
  std::vector<graph::Evaluator*> evaluators;
  for (const search::ReplicatedModel* m : p.models) {
    p.simulators.push_back(
        std::make_unique<sim::SimulatedEvaluator>(m->graph, devices, cost_model));
    evaluators.push_back(p.simulators.back().get());
  }
  p.evaluator = std::make_unique<search::CandidateEvaluator>(
      search::SpaceOf(static_cast<int>(devices.size()), p.models), p.models, evaluators,
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
