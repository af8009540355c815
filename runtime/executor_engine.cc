#include "runtime/executor_engine.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <fmt/format.h>

#include "runtime/processes.h"

namespace placer::runtime {

using graph::OpId;
using graph::TensorId;

Executor::Impl::Impl(const graph::Graph& g, graph::DeviceSet d, graph::Placement p,
                     ExecutorOptions o)
    : plan(g, std::move(d), std::move(p), std::move(o)), accounting(plan.devices) {
  const size_t n = static_cast<size_t>(graph.num_tensors());
  values.assign(n, std::vector<at::Tensor>(static_cast<size_t>(num_devices)));
  uses_left.assign(n, std::vector<int>(static_cast<size_t>(num_devices), 0));
  saved.assign(static_cast<size_t>(graph.num_ops()), {});
  pending = std::make_unique<std::atomic<int>[]>(static_cast<size_t>(graph.num_ops()));
  for (int device = 0; device < num_devices; ++device) {
    queues.push_back(std::make_unique<DeviceQueue>());
  }
  if (!plan.buckets.empty()) {
    all_reduce = std::make_unique<BucketAllReduce>(options.processes, plan.buckets);
  }
  transports = std::make_unique<Transports>(devices, graph.num_tensors(),
                                            plan.cross ? &*plan.cross : nullptr);
}

void Executor::Impl::LoadParameters(const TensorMap& initial) {
  for (TensorId t : plan.step->parameters()) {
    const graph::Tensor& tensor = graph.tensor(t);
    auto it = initial.find(tensor.name);
    if (it == initial.end()) {
      throw StepFailure(fmt::format("no value for parameter '{}'", tensor.name));
    }
    if (it->second.sizes().vec() != tensor.shape) {
      throw StepFailure(fmt::format("parameter '{}' has shape {}, the graph says {}", tensor.name,
                                    graph::ToString(it->second.sizes().vec()),
                                    graph::ToString(tensor.shape)));
    }
    const int d = plan.Home(t);
    if (!plan.IsLocal(d)) continue;  // another process's
    try {
      values[static_cast<size_t>(t)][static_cast<size_t>(d)] =
          it->second.to(plan.torch_device[static_cast<size_t>(d)], at::kFloat, false, true);
    } catch (const c10::OutOfMemoryError& e) {
      throw StepFailure(fmt::format("out of memory on {} loading parameter '{}': {}",
                                    devices[static_cast<size_t>(d)].name, tensor.name,
                                    e.what_without_backtrace()));
    }
  }
}

void Executor::Impl::StartWorkers() {
  running = std::make_unique<std::atomic<OpId>[]>(static_cast<size_t>(num_devices));
  for (int d = 0; d < num_devices; ++d) running[static_cast<size_t>(d)] = graph::kNoOp;
  for (int d = 0; d < num_devices; ++d) {
    if (plan.IsLocal(d)) workers.emplace_back([this, d] { WorkerMain(d); });
  }
}

void Executor::Impl::StopWorkers() {
  {
    std::lock_guard lock(step_mutex);
    shutting_down = true;
  }
  step_cv.notify_all();
  for (auto& worker : workers) worker.join();
}

// Called by the worker of `device` (or of the sending device for copies): marks `t` available
// on `device` and wakes the ops there that were waiting only for it.
void Executor::Impl::Publish(TensorId t, int device, at::Tensor value) {
  values[static_cast<size_t>(t)][static_cast<size_t>(device)] = std::move(value);
  const auto& consumers = plan.Users(t, device);
  uses_left[static_cast<size_t>(t)][static_cast<size_t>(device)] =
      static_cast<int>(consumers.size());
  if (!plan.IsResident(t, device)) accounting.Allocate(device, graph.tensor(t).bytes());
  for (OpId consumer : consumers) Arrived(consumer, device);
}

// One of `op`'s inputs is available on its `device`: queues the op once all are.
void Executor::Impl::Arrived(OpId op, int device) {
  if (pending[static_cast<size_t>(op)].fetch_sub(1) == 1) {
    DeviceQueue& q = *queues[static_cast<size_t>(device)];
    {
      std::lock_guard lock(q.mutex);
      q.ready.emplace(plan.Priority(op), op);
    }
    q.wake.notify_one();
  }
}

// The communication thread's: bucket b's sum is ready for its collect ops.
void Executor::Impl::BucketReady(int b) {
  for (OpId op : plan.collect_ops[static_cast<size_t>(b)]) Arrived(op, plan.DeviceOf(op));
}

void Executor::Impl::Consumed(TensorId t, int device) {
  if (options.forward_only) return;  // predictions read values after the step
  if (plan.IsResident(t, device)) return;
  if (--uses_left[static_cast<size_t>(t)][static_cast<size_t>(device)] == 0) {
    values[static_cast<size_t>(t)][static_cast<size_t>(device)] = at::Tensor();
    for (const auto& transport : transports->all()) transport->Forget(t, device);
    accounting.Release(device, graph.tensor(t).bytes());
  }
}

// An op's output (or a parameter at the step's start), produced by `device`'s worker: copied to
// every other device that reads it, then made available on `device` itself.
void Executor::Impl::PublishOutput(TensorId t, int device, at::Tensor value) {
  PushCopies(t, device, value, plan.remote[static_cast<size_t>(t)]);
  Publish(t, device, std::move(value));
}

// Copies `value` (on `from`, or host memory) to each device in `to` and publishes it there.
void Executor::Impl::PushCopies(TensorId t, int from, const at::Tensor& value,
                                const std::vector<int>& to) {
  for (int d : to) {
    auto begin = Clock::now();
    at::Tensor copy = transports->Between(from, d).Copy(value, from, d, t);
    auto end = Clock::now();
    accounting.RecordCopy(from, d, graph.tensor(t).bytes(), Seconds(begin, end));
    if (options.record_trace) {
      std::string from_name = from == kHost ? "host" : devices[static_cast<size_t>(from)].name;
      accounting.Trace(from >= 0 ? from : d)
          .push_back({fmt::format("{}->{}", from_name, devices[static_cast<size_t>(d)].name),
                      graph.tensor(t).name, Seconds(step_start, begin) * 1e6,
                      Seconds(begin, end) * 1e6});
    }
    // A copy to another process's device lives there: its receiver publishes it.
    if (plan.IsLocal(d)) Publish(t, d, std::move(copy));
  }
}

// Makes the value of `t` on `device` safe to read on that device's worker.
void Executor::Impl::WaitFor(TensorId t, int device) {
  for (const auto& transport : transports->all()) transport->WaitFor(t, device);
}

void Executor::Impl::Fail(const std::string& message) {
  {
    std::lock_guard lock(error_mutex);
    if (error.empty()) error = message;
  }
  abort = true;
  if (all_reduce) all_reduce->Abort();
  for (auto& q : queues) {
    { std::lock_guard lock(q->mutex); }
    q->wake.notify_all();
  }
}

void Executor::Impl::WorkerMain(int device) {
  const graph::Device& dev = devices[static_cast<size_t>(device)];
  if (dev.type == graph::DeviceType::kCpu) {
    at::init_num_threads();
    at::set_num_threads(dev.threads);
  }
  uint64_t seen = 0;
  while (true) {
    {
      std::unique_lock lock(step_mutex);
      step_cv.wait(lock, [&] { return shutting_down || generation != seen; });
      if (shutting_down) return;
      seen = generation;
    }
    RunDeviceStep(device);
    {
      std::lock_guard lock(step_mutex);
      ++workers_done;
    }
    step_cv.notify_all();
  }
}

// The first ready op of `device` the schedule lets start (under q.mutex), or kNoOp.
OpId Executor::Impl::NextToRun(int device, const DeviceQueue& q) const {
  const graph::PipelineOrder* pipeline = plan.pipeline();
  for (const auto& [rank, id] : q.ready) {
    if (!pipeline || pipeline->MayStart(q.pipeline_state, device, id)) return id;
  }
  return graph::kNoOp;
}

void Executor::Impl::RunDeviceStep(int device) {
  // Every transport's scope: the CUDA transport makes the worker issue on the GPU's stream.
  std::vector<std::shared_ptr<void>> scopes;
  for (const auto& transport : transports->all()) scopes.push_back(transport->EnterStep(device));
  DeviceQueue& q = *queues[static_cast<size_t>(device)];
  const graph::PipelineOrder* pipeline = plan.pipeline();
  if (pipeline) q.pipeline_state = pipeline->Start(device);
  double busy_seconds = 0;
  // A GPU's ops are timed on its stream rather than by the host's clock.
  std::vector<std::unique_ptr<OpTimer>> timers;
  for (const auto& transport : transports->all()) {
    auto timer = transport->TimeOps(device, Seconds(step_start, Clock::now()) * 1e6);
    if (timer) timers.push_back(std::move(timer));
  }
  std::vector<graph::TraceEvent>& trace = accounting.Trace(device);
  try {
    // The minibatch comes from host memory: CPU workers read it in place, GPUs copy it.
    for (TensorId t : plan.loads[static_cast<size_t>(device)]) {
      const at::Tensor& host = batch->at(graph.tensor(t).name);
      if (plan.IsCuda(device)) {
        PushCopies(t, kHost, host, {device});
      } else {
        Publish(t, device, host);
      }
    }
    for (TensorId t : plan.step->parameters()) {
      if (plan.Home(t) != device) continue;
      const at::Tensor& value = values[static_cast<size_t>(t)][static_cast<size_t>(device)];
      uses_left[static_cast<size_t>(t)][static_cast<size_t>(device)] = 0;
      PublishOutput(t, device, value);
    }
    {
      std::lock_guard lock(q.mutex);
      for (OpId id : plan.sources[static_cast<size_t>(device)]) {
        q.ready.emplace(plan.Priority(id), id);
      }
    }
    while (true) {
      OpId id = graph::kNoOp;
      {
        std::unique_lock lock(q.mutex);
        q.wake.wait(lock, [&] {
          if (abort) return true;
          id = NextToRun(device, q);
          return id != graph::kNoOp || (q.ready.empty() && completed == plan.ops_to_run);
        });
        if (abort || id == graph::kNoOp) break;
        q.ready.erase({plan.Priority(id), id});
      }
      if (pipeline) pipeline->Started(q.pipeline_state, id);
      auto begin = Clock::now();
      for (auto& timer : timers) timer->Begin();
      running[static_cast<size_t>(device)] = id;
      RunOp(id, device);
      running[static_cast<size_t>(device)] = graph::kNoOp;
      if (pipeline) pipeline->Finished(q.pipeline_state, id);
      auto end = Clock::now();
      busy_seconds += Seconds(begin, end);
      if (options.record_trace) {
        trace.push_back({devices[static_cast<size_t>(device)].name, graph.op(id).name,
                         Seconds(step_start, begin) * 1e6, Seconds(begin, end) * 1e6});
      }
      for (auto& timer : timers) {
        timer->End(options.record_trace ? trace.size() - 1 : OpTimer::kUntraced);
      }
      if (completed.fetch_add(1) + 1 == plan.ops_to_run) {
        for (auto& other : queues) {
          { std::lock_guard lock(other->mutex); }
          other->wake.notify_all();
        }
      }
    }
    for (const auto& transport : transports->all()) transport->Synchronize(device);
    if (!timers.empty()) {
      busy_seconds = 0;
      for (auto& timer : timers) busy_seconds += timer->Finish(trace);
    }
  } catch (const c10::OutOfMemoryError& e) {
    Fail(fmt::format("out of memory on {}: {}", devices[static_cast<size_t>(device)].name,
                     e.what_without_backtrace()));
  } catch (const c10::Error& e) {
    Fail(fmt::format("op failed on {}: {}", devices[static_cast<size_t>(device)].name,
                     e.what_without_backtrace()));
  } catch (const std::exception& e) {
    Fail(e.what());
  }
  accounting.SetBusy(device, busy_seconds);
}

}  // namespace placer::runtime
