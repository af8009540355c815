// The executor's engine: how a step of its plan (executor_plan.h) runs, and the state one step
// changes. Internal to the executor (executor.cc, executor_engine.cc, executor_ops.cc).
//
// Every tensor has a home device (its producer's, a parameter's owner's, or the host for the
// minibatch) and is made available on each other device that consumes it by an explicit copy,
// pushed by the home device's worker right after it exists. An op becomes ready on its device
// when all its inputs are available there; each device's worker runs its ready ops, earliest in
// topological order first, or, for a pipelined placement (micro_batches > 1), in its schedule's
// order, holding back what the schedule holds back (graph/pipeline.h). The same path serves every
// placement, one device included.
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "graph/pipeline.h"
#include "runtime/bucket_allreduce.h"
#include "runtime/executor.h"
#include "runtime/executor_accounting.h"
#include "runtime/executor_plan.h"
#include "runtime/transport.h"

namespace placer::runtime {

using Clock = std::chrono::steady_clock;

inline double Seconds(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

struct Executor::Impl {
  static constexpr int kHost = graph::kHostDevice;

  Impl(const graph::Graph& graph, graph::DeviceSet devices, graph::Placement placement,
       ExecutorOptions options);

  const ExecutorPlan plan;
  const graph::Graph& graph = plan.graph;
  const graph::DeviceSet& devices = plan.devices;
  const ExecutorOptions& options = plan.options;
  const int num_devices = plan.num_devices;

  // ---- per-step state ----
  // Values: [tensor][device]. Parameters stay at home across steps.
  std::vector<std::vector<at::Tensor>> values;
  std::vector<std::vector<int>> uses_left;
  struct SavedForBackward {
    std::vector<at::Tensor> leaves;   // differentiable inputs, in the backward op's grad_of order
    std::vector<at::Tensor> outputs;  // outputs with their autograd history
  };
  std::vector<SavedForBackward> saved;
  std::vector<at::Tensor> losses;  // per op: the value of each loss op, summed after the step

  struct DeviceQueue {
    std::mutex mutex;
    std::condition_variable wake;
    std::set<std::pair<int, graph::OpId>> ready;       // (priority, op)
    graph::PipelineOrder::DeviceState pipeline_state;  // this device's worker's only
  };
  std::vector<std::unique_ptr<DeviceQueue>> queues;
  std::unique_ptr<std::atomic<int>[]> pending;
  std::atomic<int> completed{0};
  std::atomic<bool> abort{false};
  std::mutex error_mutex;
  std::string error;
  std::vector<std::thread> workers;
  std::mutex step_mutex;
  std::condition_variable step_cv;
  uint64_t generation = 0;
  int workers_done = 0;
  bool shutting_down = false;
  bool abandoned = false;                               // an op outlived its step's time limit
  std::unique_ptr<std::atomic<graph::OpId>[]> running;  // per device: the op being run, or kNoOp
  const TensorMap* batch = nullptr;
  Clock::time_point step_start;

  StepAccounting accounting;
  std::unique_ptr<BucketAllReduce> all_reduce;
  std::unique_ptr<Transports> transports;

  // ---- setup (executor_engine.cc) ----
  void LoadParameters(const TensorMap& initial);
  void StartWorkers();
  void StopWorkers();

  // ---- dataflow (executor_engine.cc) ----
  void Publish(graph::TensorId t, int device, at::Tensor value);
  void Arrived(graph::OpId op, int device);
  void BucketReady(int b);
  void Consumed(graph::TensorId t, int device);
  void PublishOutput(graph::TensorId t, int device, at::Tensor value);
  void PushCopies(graph::TensorId t, int from, const at::Tensor& value, const std::vector<int>& to);
  void WaitFor(graph::TensorId t, int device);
  void Fail(const std::string& message);

  // ---- workers (executor_engine.cc) ----
  void WorkerMain(int device);
  graph::OpId NextToRun(int device, const DeviceQueue& q) const;
  void RunDeviceStep(int device);

  // ---- ops (executor_ops.cc) ----
  // The step being run, counted from 0 (random ops draw per step). Written before the workers
  // wake, read by them while it stays fixed.
  uint64_t Step() const { return generation - 1; }
  void RunOp(graph::OpId id, int device);
  std::vector<at::Tensor> RunKernel(graph::OpId id, int device,
                                    const std::vector<at::Tensor>& inputs);
  void RunForward(graph::OpId id, int device, std::vector<at::Tensor>& inputs);
  void RunBackward(graph::OpId id, int device, const std::vector<at::Tensor>& inputs);

  // ---- steps (executor.cc) ----
  StepResult RunStep(const TensorMap& step_batch, double time_limit_seconds);
  void ResetAfterFailure();
};

}  // namespace placer::runtime
