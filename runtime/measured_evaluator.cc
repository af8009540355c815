#include "runtime/measured_evaluator.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "runtime/executor.h"
#include "runtime/statistics.h"

namespace placer::runtime {

void SummariseSamples(const std::vector<double>& samples, graph::EvaluationResult& result) {
  result.step_samples = samples;
  if (samples.empty()) return;
  result.step_seconds = Median(samples);
  const auto [min, max] = std::minmax_element(samples.begin(), samples.end());
  result.min_seconds = *min;
  result.max_seconds = *max;
}

struct MeasuredEvaluator::State {
  const graph::Graph& graph;
  graph::DeviceSet devices;
  MeasurementOptions options;
  TensorMap initial_parameters;
  TensorMap batch;
};

MeasuredEvaluator::MeasuredEvaluator(const graph::Graph& graph, graph::DeviceSet devices,
                                     MeasurementOptions options)
    : state_(std::make_unique<State>(State{graph, std::move(devices), options,
                                           InitializeParameters(graph, options.seed),
                                           SyntheticBatch(graph, options.seed + 1)})) {
  bool any_gpu =
      std::any_of(state_->devices.begin(), state_->devices.end(),
                  [](const graph::Device& d) { return d.type == graph::DeviceType::kCuda; });
  if (any_gpu) {
    // Pinned host memory, so that the minibatch's copies to GPUs are asynchronous.
    for (auto& [name, tensor] : state_->batch) tensor = tensor.pin_memory();
  }
}

MeasuredEvaluator::~MeasuredEvaluator() = default;

graph::EvaluationResult MeasuredEvaluator::Evaluate(const graph::Placement& placement) {
  using Clock = std::chrono::steady_clock;
  const MeasurementOptions& o = state_->options;
  graph::EvaluationResult result;
  auto start = Clock::now();
  try {
    ExecutorOptions executor_options;
    executor_options.record_trace = o.record_trace;
    executor_options.processes = o.processes;
    Executor executor(state_->graph, state_->devices, placement, state_->initial_parameters,
                      executor_options);
    std::vector<double> samples;
    std::vector<StepResult> steps;
    for (int step = 0; step < o.warmup_steps + o.timed_steps; ++step) {
      double left =
          o.time_limit_seconds - std::chrono::duration<double>(Clock::now() - start).count();
      if (left <= 0) {
        throw StepFailure(
            fmt::format("time limit of {} s exceeded after {} steps", o.time_limit_seconds, step));
      }
      StepResult r = executor.RunStep(state_->batch, left);
      if (step >= o.warmup_steps) {
        samples.push_back(r.seconds);
        steps.push_back(std::move(r));
      }
    }
    SummariseSamples(samples, result);
    // Per-device and transfer figures of the step closest to the median.
    size_t closest = 0;
    for (size_t i = 0; i < steps.size(); ++i) {
      if (std::abs(steps[i].seconds - result.step_seconds) <
          std::abs(steps[closest].seconds - result.step_seconds)) {
        closest = i;
      }
    }
    result.devices = steps[closest].devices;
    result.transfers = steps[closest].transfers;
    result.trace = std::move(steps.back().trace);
    result.final_loss = steps.back().loss;
    result.valid = true;
  } catch (const std::exception& error) {
    result.valid = false;
    result.invalid_reason = error.what();
  }
  return result;
}

}  // namespace placer::runtime
