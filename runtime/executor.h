// Executes the real training step (forward, loss, backward, SGD update) of a graph under a
// placement, one worker thread per device, ops running concurrently as their inputs arrive.
#pragma once

#include <ATen/core/Tensor.h>

#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "graph/device.h"
#include "graph/evaluator.h"
#include "graph/ir.h"
#include "graph/placement.h"

namespace placer::runtime {

// Parameter values by parameter name, and minibatch tensors by input tensor name.
using TensorMap = std::unordered_map<std::string, at::Tensor>;

// The LibTorch device of a placer device (every CPU worker is at::kCPU).
at::Device TorchDevice(const graph::Device& device);

// Host tensors for every parameter, drawn from each parameter's initializer with `seed`.
TensorMap InitializeParameters(const graph::Graph& graph, uint64_t seed);
// A random minibatch (inputs N(0,1), labels uniform over the logits' classes) in host memory.
TensorMap SyntheticBatch(const graph::Graph& graph, uint64_t seed);

// Why a step could not run: out of memory on a device, a failing op, a time limit. The message
// names the device, op or limit; the executor has freed what the step allocated.
class StepFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct StepResult {
  double seconds = 0;  // wall time from the minibatch in host memory to every device done
  double loss = 0;
  std::vector<graph::DeviceStats> devices;
  std::vector<graph::TransferStats> transfers;
  std::vector<graph::TraceEvent> trace;  // when ExecutorOptions::record_trace
};

struct Processes;  // runtime/processes.h

struct ExecutorOptions {
  bool record_trace = false;
  // Run only the forward ops (no loss gradient, no update): used to predict.
  bool forward_only = false;
  // After a step's time limit, how long to wait for ops that are still running before abandoning
  // them: an op that has not returned by then is left to its worker thread, the step fails and
  // the executor is unusable from then on (a hung kernel cannot be cancelled, only abandoned).
  double abandon_grace_seconds = 1.0;
  // A placement across processes: every device is named "w<rank>/...", and this executor runs
  // the ops of the devices of its own process (processes->rank()); tensors cross processes
  // through the group's send/recv, gradient buckets whose replicas span processes are summed by
  // the group's allreduce (bucket_allreduce.h), and each process must run the same graph,
  // placement and steps.
  // Parameters() and the loss are this process's. A step that fails leaves receives waiting: the
  // executor cannot run again. Null: every device is in this process.
  std::shared_ptr<const Processes> processes;
};

class Executor {
 public:
  // The executor keeps its own copy of `graph`. Parameters are copied from `parameters` (host or
  // any device) to the device of the op that owns each one.
  Executor(const graph::Graph& graph, graph::DeviceSet devices, graph::Placement placement,
           const TensorMap& parameters, ExecutorOptions options = {});
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // One training step on `batch` (host tensors, one per graph input). Throws StepFailure; after a
  // failure the executor is still usable, unless an op did not return within the time limit plus
  // ExecutorOptions::abandon_grace_seconds: then it is abandoned, and so is the executor (its
  // workers and state, a copy of the graph included, are leaked rather than freed under a thread
  // that may still use them). `time_limit_seconds` bounds the step.
  StepResult RunStep(const TensorMap& batch,
                     double time_limit_seconds = std::numeric_limits<double>::infinity());

  // Current parameter values, copied to host memory.
  TensorMap Parameters() const;
  // The value a forward op produced in the last step (on its device), e.g. the logits.
  at::Tensor LastValue(const std::string& tensor_name) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace placer::runtime
