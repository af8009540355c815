#include "placer/setup/worker_evaluators.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "placer/setup/devices.h"
#include "placer/setup/input_error.h"
#include "placer/setup/model_factory.h"

namespace placer::setup {

WorkerEvaluators::WorkerEvaluators(config::Config config)
    : config_(std::move(config)),
      devices_(ResolveDevices(config_)),
      names_(graph::DeviceNames(devices_)),
      steps_(config_) {}

graph::EvaluationResult WorkerEvaluators::Evaluate(const proto::EvaluationTask& task) {
  if (task.placement.devices != names_) {
    throw InputError(fmt::format("the placement's devices differ from this worker's ({})",
                                 fmt::join(names_, ", ")));
  }
  const StepShape shape{task.replicas, task.placement.micro_batches};
  const graph::Graph& graph = steps_.Get(shape).graph;
  if (task.placement.device_of_op.size() != static_cast<size_t>(graph.num_ops())) {
    throw InputError(fmt::format(
        "the placement has {} ops, this worker's model with {} replicas and {} micro-batches "
        "{}: do the search and the worker run the same placer?",
        task.placement.device_of_op.size(), shape.replicas, shape.micro_batches, graph.num_ops()));
  }
  return EvaluatorFor(task.kind, shape).Evaluate(task.placement);
}

graph::Evaluator& WorkerEvaluators::EvaluatorFor(graph::EvaluatorKind kind, StepShape shape) {
  const auto key = std::make_pair(kind, shape);
  auto it = evaluators_.find(key);
  if (it != evaluators_.end()) return *it->second;
  auto costs = [this]() -> const sim::CostModel& {
    if (!costs_) costs_ = CostModelFor(config_);
    return *costs_;
  };
  return *evaluators_
              .emplace(key, MakeEvaluator(kind, steps_.Get(shape).graph, devices_, config_, costs))
              .first->second;
}

}  // namespace placer::setup
