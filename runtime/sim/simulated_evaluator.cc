#include "runtime/sim/simulated_evaluator.h"

#include <exception>
#include <utility>

namespace placer::sim {

SimulatedEvaluator::SimulatedEvaluator(const graph::Graph& graph, runtime::DeviceSet devices,
                                       const CostModel& cost_model,
                                       SimulatedEvaluatorOptions options)
    : simulator_(graph, std::move(devices), cost_model),
      options_(options),
      lower_bound_(simulator_.LowerBound()) {}

runtime::EvaluationResult SimulatedEvaluator::Evaluate(const graph::Placement& placement) {
  try {
    return simulator_.ToEvaluationResult(simulator_.Simulate(placement, options_.record_trace));
  } catch (const std::exception& error) {
    runtime::EvaluationResult result;
    result.valid = false;
    result.invalid_reason = error.what();
    return result;
  }
}

}  // namespace placer::sim
