// A search problem judged by the simulator, built from a model builder: the model at every
// replica count, a simulator each, the candidate evaluator over them. What benchmarks and tests
// search on without a config; `placer search` builds the same from a config (search_setup.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "graph/data_parallel.h"
#include "graph/device.h"
#include "graph/group_features.h"
#include "graph/grouping.h"
#include "placer/candidate_evaluator.h"
#include "placer/search.h"
#include "placer/setup/step_cache.h"
#include "runtime/sim/cost_model.h"
#include "runtime/sim/simulated_evaluator.h"

namespace placer::setup {

struct SimulatedProblem {
  graph::Grouping grouping;
  graph::GroupFeatures features;
  std::unique_ptr<StepCache> steps;
  // In `steps`: [0] one replica, then per R, per M, per R x M, per split (SearchSteps).
  std::vector<const search::ReplicatedModel*> models;
  std::vector<std::unique_ptr<sim::SimulatedEvaluator>> simulators;
  std::unique_ptr<search::CandidateEvaluator> evaluator;
  std::vector<std::string> notes;  // step shapes left out, and why

  const graph::Graph& base() const { return models.front()->graph; }
  int num_groups() const { return grouping.num_groups(); }
  search::SearchProblem Problem(std::vector<search::NamedCandidate> warm_starts = {}) const {
    return {evaluator.get(), features, std::move(warm_starts)};
  }
  // The least lower bound over the models.
  double LowerBound() const;
};

// `build_forward(batch, normalizer)` gives the forward graph (forward ops and loss) of `batch`
// rows; the base model is it at `batch` with its training step. `cost_model` must outlive it.
// `micro_batch_counts` above 1 add one-replica pipelines to the action space (a count the model
// cannot be built with is left out, with the reason in `notes`); `replicated_pipelines` add
// R x M replicated pipelines (R among `replica_counts`); `tensor_parallel` the tensor-parallel
// shapes (R among `replica_counts`; a split step over kMaxTensorParallelOps is left out).
SimulatedProblem MakeSimulatedProblem(
    const graph::ForwardBuilder& build_forward, int64_t batch, double learning_rate,
    const graph::GroupingOptions& grouping, graph::DeviceSet devices,
    const sim::CostModel& cost_model, const std::vector<int>& replica_counts,
    const std::vector<int>& micro_batch_counts = {1},
    const std::vector<search::ReplicatedPipeline>& replicated_pipelines = {},
    const std::vector<search::TensorParallelShape>& tensor_parallel = {});

// What the group-level schedule prices with (placer/group_schedule.h), from `cost_model` on
// `devices`: a typical copy and op launch, and each group's times in `base` on the first device.
search::ScheduleCosts ScheduleCostsOf(const sim::CostModel& cost_model, const graph::Graph& base,
                                      const graph::Grouping& grouping,
                                      const graph::DeviceSet& devices);

}  // namespace placer::setup
