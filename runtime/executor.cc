// The executor's public face and a step from the caller's side: wake the workers, wait for them
// within the time limit, collect the result. The plan is executor_plan.cc's, the workers'
// dataflow executor_engine.cc's, how an op runs executor_ops.cc's.
#include "runtime/executor.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "graph/ops.h"
#include "runtime/executor_engine.h"

namespace placer::runtime {

using graph::Op;
using graph::OpId;
using graph::TensorId;
using graph::TensorKind;

at::Device TorchDevice(const graph::Device& device) {
  return device.type == graph::DeviceType::kCuda
             ? at::Device(at::kCUDA, static_cast<int8_t>(device.index))
             : at::Device(at::kCPU);
}

TensorMap InitializeParameters(const graph::Graph& graph, uint64_t seed) {
  at::Generator generator = at::detail::createCPUGenerator(seed);
  TensorMap parameters;
  for (TensorId id : graph.Parameters()) {
    const graph::Tensor& t = graph.tensor(id);
    at::Tensor value = at::zeros(t.shape, at::kFloat);
    switch (t.init.kind) {
      case graph::Initializer::Kind::kZeros:
        break;
      case graph::Initializer::Kind::kOnes:
        value.fill_(1.0);
        break;
      case graph::Initializer::Kind::kNormal:
        value.normal_(0.0, t.init.stddev, generator);
        break;
      case graph::Initializer::Kind::kValues:
        if (!t.init.values || static_cast<int64_t>(t.init.values->size()) != value.numel()) {
          throw graph::GraphError(fmt::format("parameter '{}': its initial values do not fill {}",
                                              t.name, graph::ToString(t.shape)));
        }
        std::copy(t.init.values->begin(), t.init.values->end(), value.data_ptr<float>());
        break;
    }
    parameters.emplace(t.name, value);
  }
  return parameters;
}

namespace {

// Token ids must index every embedding table they feed: the smallest table bounds them.
int64_t IndexRange(const graph::Graph& graph, TensorId indices) {
  int64_t range = std::numeric_limits<int64_t>::max();
  for (OpId consumer : graph.tensor(indices).consumers) {
    const Op& op = graph.op(consumer);
    if (op.type == graph::op_types::kGather && op.inputs.size() == 2 && op.inputs[1] == indices) {
      range = std::min(range, graph.tensor(op.inputs[0]).shape.at(0));
    }
  }
  return range == std::numeric_limits<int64_t>::max() ? 1 : range;
}

}  // namespace

TensorMap SyntheticBatch(const graph::Graph& graph, uint64_t seed) {
  at::Generator generator = at::detail::createCPUGenerator(seed);
  int64_t classes = 2;
  for (const Op& op : graph.ops()) {
    if (op.type == graph::op_types::kSoftmaxCrossEntropy) {
      classes = graph.tensor(op.inputs[0]).shape.at(1);
    }
  }
  TensorMap batch;
  for (TensorId id = 0; id < graph.num_tensors(); ++id) {
    const graph::Tensor& t = graph.tensor(id);
    if (t.kind == TensorKind::kInput && t.dtype == graph::DType::kInt64) {
      batch.emplace(t.name, at::randint(IndexRange(graph, id), t.shape, generator, at::kLong));
    } else if (t.kind == TensorKind::kInput) {
      batch.emplace(t.name, at::randn(t.shape, generator, at::kFloat));
    } else if (t.kind == TensorKind::kLabel) {
      batch.emplace(t.name, at::randint(classes, t.shape, generator, at::kLong));
    }
  }
  return batch;
}

StepResult Executor::Impl::RunStep(const TensorMap& step_batch, double time_limit_seconds) {
  if (abandoned) {
    throw StepFailure("this executor abandoned a hung op in an earlier step and cannot run");
  }
  for (TensorId t : plan.step->minibatch()) {
    const graph::Tensor& tensor = graph.tensor(t);
    auto it = step_batch.find(tensor.name);
    if (it == step_batch.end())
      throw StepFailure(fmt::format("the batch has no '{}'", tensor.name));
    if (it->second.sizes().vec() != tensor.shape) {
      throw StepFailure(fmt::format("batch tensor '{}' has shape {}, the graph expects {}",
                                    tensor.name, graph::ToString(it->second.sizes().vec()),
                                    graph::ToString(tensor.shape)));
    }
  }
  for (OpId id = 0; id < graph.num_ops(); ++id) {
    pending[static_cast<size_t>(id)] = plan.initial_pending[static_cast<size_t>(id)];
  }
  completed = 0;
  abort = false;
  error.clear();
  losses.assign(static_cast<size_t>(graph.num_ops()), at::Tensor());
  accounting.BeginStep(plan.placed->parameter_bytes());
  batch = &step_batch;

  step_start = Clock::now();
  if (all_reduce) {
    all_reduce->BeginStep([this](int b) { BucketReady(b); },
                          [this](const std::string& message) { Fail(message); });
  }
  for (const auto& transport : transports->all()) {
    transport->BeginStep(
        [this](TensorId t, int device, at::Tensor value) { Publish(t, device, std::move(value)); },
        [this](const std::string& message) { Fail(message); });
  }
  {
    std::lock_guard lock(step_mutex);
    workers_done = 0;
    ++generation;
  }
  step_cv.notify_all();
  bool timed_out = false;
  {
    std::unique_lock lock(step_mutex);
    auto deadline = std::isinf(time_limit_seconds)
                        ? Clock::time_point::max()
                        : step_start + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(time_limit_seconds));
    while (workers_done < plan.num_local) {
      if (deadline == Clock::time_point::max()) {
        step_cv.wait(lock);
      } else if (step_cv.wait_until(lock, deadline) == std::cv_status::timeout &&
                 workers_done < plan.num_local) {
        if (!timed_out) {
          timed_out = true;
          lock.unlock();
          Fail(fmt::format("time limit of {} s exceeded", time_limit_seconds));
          lock.lock();
          // Ops already running finish unless they hang: give them a grace period.
          deadline = Clock::now() +
                     std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
                         std::max(0.0, options.abandon_grace_seconds)));
        } else {
          abandoned = true;
          break;
        }
      }
    }
  }
  if (abandoned) {
    batch = nullptr;
    std::vector<std::string> stuck;
    for (int d = 0; d < num_devices; ++d) {
      OpId op = running[static_cast<size_t>(d)];
      if (op != graph::kNoOp) {
        stuck.push_back(
            fmt::format("'{}' on {}", graph.op(op).name, devices[static_cast<size_t>(d)].name));
      }
    }
    throw StepFailure(fmt::format(
        "time limit of {} s exceeded and op {} still running {} s later: abandoned",
        time_limit_seconds,
        stuck.empty() ? std::string("(between ops)") : fmt::format("{}", fmt::join(stuck, ", ")),
        options.abandon_grace_seconds));
  }
  auto end = Clock::now();
  batch = nullptr;
  for (const auto& transport : transports->all()) {
    if (!transport->EndStep()) {
      // Receives from another process still wait and would write into this state.
      abandoned = true;
      throw StepFailure(
          fmt::format("{} (tensors from other processes are still awaited: this "
                      "executor cannot run again)",
                      error));
    }
  }
  if (all_reduce && !all_reduce->EndStep(options.abandon_grace_seconds)) {
    // An allreduce still waits for its peers and would write into this state.
    abandoned = true;
    throw StepFailure(fmt::format(
        "{} (a gradient bucket's allreduce across processes still waits: this executor cannot "
        "run again)",
        error));
  }
  if (abort) {
    ResetAfterFailure();
    throw StepFailure(error);
  }
  StepResult result;
  result.seconds = Seconds(step_start, end);
  for (const at::Tensor& value : losses) {
    if (value.defined()) result.loss += value.item<double>();
  }
  accounting.Report(plan.local, result);
  return result;
}

// Drops everything the failed step left behind, keeping only resident parameters.
void Executor::Impl::ResetAfterFailure() {
  for (TensorId t = 0; t < graph.num_tensors(); ++t) {
    for (int d = 0; d < num_devices; ++d) {
      if (!plan.IsResident(t, d))
        values[static_cast<size_t>(t)][static_cast<size_t>(d)] = at::Tensor();
    }
  }
  for (auto& state : saved) state = {};
  for (auto& q : queues) {
    std::lock_guard lock(q->mutex);
    q->ready = {};
  }
  for (const auto& transport : transports->all()) transport->Reset();
}

Executor::Executor(const graph::Graph& graph, graph::DeviceSet devices, graph::Placement placement,
                   const TensorMap& parameters, ExecutorOptions options)
    : impl_(std::make_unique<Impl>(graph, std::move(devices), std::move(placement), options)) {
  impl_->LoadParameters(parameters);
  impl_->StartWorkers();
}

Executor::~Executor() {
  if (impl_->abandoned) {
    // A worker may still be inside the hung op and touch the state when it returns: leave the
    // threads running and the state allocated.
    for (auto& worker : impl_->workers) worker.detach();
    (void)impl_.release();
    return;
  }
  impl_->StopWorkers();
}

StepResult Executor::RunStep(const TensorMap& batch, double time_limit_seconds) {
  return impl_->RunStep(batch, time_limit_seconds);
}

TensorMap Executor::Parameters() const {
  TensorMap result;
  const ExecutorPlan& plan = impl_->plan;
  for (TensorId t : plan.step->parameters()) {
    const int home = plan.Home(t);
    if (!plan.IsLocal(home)) continue;
    const at::Tensor& value = impl_->values[static_cast<size_t>(t)][static_cast<size_t>(home)];
    result.emplace(impl_->graph.tensor(t).name, value.to(at::kCPU).clone());
  }
  return result;
}

at::Tensor Executor::LastValue(const std::string& tensor_name) const {
  TensorId t = impl_->graph.TensorByName(tensor_name);
  const int d = impl_->plan.Home(t);
  if (d < 0) throw StepFailure(fmt::format("'{}' is a minibatch tensor", tensor_name));
  return impl_->values[static_cast<size_t>(t)][static_cast<size_t>(d)];
}

}  // namespace placer::runtime
