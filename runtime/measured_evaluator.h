// The measured Evaluator: runs the real training step under a placement and times it.
#pragma once

#include <memory>

#include "graph/device.h"
#include "graph/evaluator.h"
#include "graph/ir.h"

namespace placer::runtime {

struct Processes;  // runtime/processes.h

struct MeasurementOptions {
  int warmup_steps = 5;            // discarded (allocator, caches, thread start-up)
  int timed_steps = 5;             // the median of these is the step time
  double time_limit_seconds = 60;  // per placement, warm-up included
  bool record_trace = false;       // keep the trace of the last timed step
  uint64_t seed = 0;               // initial parameters and the synthetic minibatch
  // A placement across processes (ExecutorOptions::processes): every process evaluates the same
  // placement, each running its own devices' ops. Null: one process.
  std::shared_ptr<const Processes> processes;
};

class MeasuredEvaluator : public graph::Evaluator {
 public:
  // `graph` must outlive the evaluator.
  MeasuredEvaluator(const graph::Graph& graph, graph::DeviceSet devices,
                    MeasurementOptions options);
  ~MeasuredEvaluator() override;
  // Never throws for a bad placement: out of memory, a failing op or the time limit make the
  // result invalid with the reason.
  graph::EvaluationResult Evaluate(const graph::Placement& placement) override;
  std::string name() const override {
    return std::string(graph::ToString(graph::EvaluatorKind::kMeasured));
  }

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Median, minimum and maximum of `samples` into `result`.
void SummariseSamples(const std::vector<double>& samples, graph::EvaluationResult& result);

}  // namespace placer::runtime
