#include "runtime/sim/simulated_evaluator.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <thread>
#include <utility>

namespace placer::sim {

SimulatedEvaluator::SimulatedEvaluator(const graph::Graph& graph, graph::DeviceSet devices,
                                       const CostModel& cost_model,
                                       SimulatedEvaluatorOptions options)
    : simulator_(graph, std::move(devices), cost_model),
      options_(options),
      lower_bound_(simulator_.LowerBound()) {}

graph::EvaluationResult SimulatedEvaluator::Evaluate(const graph::Placement& placement) {
  try {
    return simulator_.ToEvaluationResult(simulator_.Simulate(placement, options_.record_trace));
  } catch (const std::exception& error) {
    graph::EvaluationResult result;
    result.valid = false;
    result.invalid_reason = error.what();
    return result;
  }
}

std::vector<graph::EvaluationResult> SimulatedEvaluator::EvaluateBatch(
    std::span<const graph::Placement> placements) {
  std::vector<graph::EvaluationResult> results(placements.size());
  const size_t cores = std::max(1u, std::thread::hardware_concurrency());
  const size_t threads = std::min(
      placements.size(), options_.threads > 0 ? static_cast<size_t>(options_.threads) : cores);
  // Work stealing by index: simulations of one batch differ in length (a placement that runs out
  // of memory stops early), so a static split would leave threads idle.
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < placements.size(); i = next++) results[i] = Evaluate(placements[i]);
  };
  {
    std::vector<std::jthread> helpers;  // joined at the end of this scope, before the return
    for (size_t t = 1; t < threads; ++t) helpers.emplace_back(work);
    work();
  }
  return results;
}

}  // namespace placer::sim
