// The simulated Evaluator: a placement's step time from the cost model and the event-driven
// simulator instead of a real run. Microseconds per placement instead of seconds, so a search can
// afford millions of them; how close it comes to the measured time is the cost model's business.
#pragma once

#include <string>

#include "graph/device.h"
#include "graph/evaluator.h"
#include "graph/ir.h"
#include "graph/placement.h"
#include "runtime/sim/cost_model.h"
#include "runtime/sim/simulator.h"

namespace placer::sim {

struct SimulatedEvaluatorOptions {
  bool record_trace = false;  // fill EvaluationResult::trace (slower: names every event)
  // Threads of EvaluateBatch; 0: one per core (std::thread::hardware_concurrency).
  int threads = 0;
};

class SimulatedEvaluator : public graph::Evaluator {
 public:
  // `graph` must outlive the evaluator; the cost model is read once, here.
  SimulatedEvaluator(const graph::Graph& graph, graph::DeviceSet devices,
                     const CostModel& cost_model, SimulatedEvaluatorOptions options = {});

  // One simulated step: step_seconds, min, max and the single sample are the simulated time.
  // final_loss stays 0: nothing is computed. Never throws for a bad placement: running out of
  // memory, devices that differ from the evaluator's or an unplaced op make the result invalid.
  graph::EvaluationResult Evaluate(const graph::Placement& placement) override;
  // Simulations of a batch run on `threads` threads at once (the simulator is read-only).
  std::vector<graph::EvaluationResult> EvaluateBatch(
      std::span<const graph::Placement> placements) override;
  std::string name() const override {
    return std::string(graph::ToString(graph::EvaluatorKind::kSimulated));
  }
  bool deterministic() const override {
    return graph::Describe(graph::EvaluatorKind::kSimulated).deterministic;
  }

  // No placement on these devices can take less (see LowerBoundResult).
  const LowerBoundResult& lower_bound() const { return lower_bound_; }
  const Simulator& simulator() const { return simulator_; }

 private:
  Simulator simulator_;
  SimulatedEvaluatorOptions options_;
  LowerBoundResult lower_bound_;
};

}  // namespace placer::sim
