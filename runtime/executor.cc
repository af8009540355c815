#include "runtime/executor.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <limits>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#ifdef PLACER_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "graph/ops.h"
#include "graph/pipeline.h"
#include "runtime/kernels.h"

namespace placer::runtime {

using graph::Op;
using graph::OpId;
using graph::Phase;
using graph::TensorId;
using graph::TensorKind;
using Clock = std::chrono::steady_clock;

namespace {

double Seconds(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

}  // namespace

at::Device TorchDevice(const Device& device) {
  return device.type == DeviceType::kCuda ? at::Device(at::kCUDA, static_cast<int8_t>(device.index))
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

// How a step runs: a static plan computed once per placement, and per-step state.
//
// Every tensor has a home device (its producer's, a parameter's owner's, or the host for the
// minibatch) and is made available on each other device that consumes it by an explicit copy,
// pushed by the home device's worker right after it exists. An op becomes ready on its device
// when all its inputs are available there; each device's worker runs its ready ops, earliest in
// topological order first, or, for a pipelined placement (micro_batches > 1), in its schedule's
// order, holding back what the schedule holds back (graph/pipeline.h). The same path serves every
// placement, one device included.
struct Executor::Impl {
  static constexpr int kHost = graph::kHostDevice;

  // A copy, not a reference: a worker abandoned inside a hung op outlives the caller's graph
  // (ASan caught the returning op reading a graph its test had freed).
  const graph::Graph graph;
  DeviceSet devices;
  graph::Placement placement;
  ExecutorOptions options;
  int num_devices;

  // Static plan.
  std::vector<int> op_device;
  std::vector<int> topo_rank;
  // Which ready op a device runs first: topological rank, or the pipeline schedule's priority
  // (graph/pipeline.h), which may also hold ops back.
  std::vector<int> priority;
  std::optional<graph::PipelineOrder> pipeline;
  std::vector<int> home;                              // per tensor: device, or kHost
  std::vector<std::vector<int>> remote;               // per tensor: other devices consuming it
  std::vector<std::vector<std::vector<OpId>>> users;  // [tensor][device]: distinct consumers
  std::vector<int> initial_pending;                   // per op: distinct inputs
  std::vector<OpId> backward_of;                      // forward op -> its backward op
  std::vector<std::vector<bool>> needs_grad;          // forward op -> per input
  std::vector<TensorId> feeds;                        // input and label tensors
  std::vector<TensorId> parameters;
  int ops_to_run = 0;

  // Values: [tensor][device]. Parameters stay at home across steps.
  std::vector<std::vector<at::Tensor>> values;
  std::vector<std::vector<int>> uses_left;
  struct SavedForBackward {
    std::vector<at::Tensor> leaves;   // differentiable inputs, in the backward op's grad_of order
    std::vector<at::Tensor> outputs;  // outputs with their autograd history
  };
  std::vector<SavedForBackward> saved;
  std::vector<at::Tensor> losses;  // per op: the value of each loss op, summed after the step

  // Per-step synchronisation.
  struct DeviceQueue {
    std::mutex mutex;
    std::condition_variable wake;
    std::set<std::pair<int, OpId>> ready;              // (priority, op)
    graph::PipelineOrder::DeviceState pipeline_state;  // this device's worker's only
    std::vector<TensorId> loads;  // feeds this device reads, fetched at step start
    std::vector<OpId> sources;    // ops without inputs (constants): ready at step start
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
  bool abandoned = false;                        // an op outlived its step's time limit
  std::unique_ptr<std::atomic<OpId>[]> running;  // per device: the op being run, or kNoOp
  const TensorMap* batch = nullptr;
  Clock::time_point step_start;

  // Per-step accounting, written by one worker per device (transfers: the sending device's).
  std::vector<double> busy;
  // Memory on a device grows from its own worker and from senders' copies: atomics.
  std::unique_ptr<std::atomic<int64_t>[]> memory_now, memory_peak;
  std::vector<int64_t> param_bytes;
  struct Channel {
    int64_t bytes = 0;
    int count = 0;
    double seconds = 0;
  };
  std::vector<Channel> channels;  // [(from + 1) * num_devices + to], from may be kHost
  std::vector<std::vector<TraceEvent>> trace_per_device;

#ifdef PLACER_WITH_CUDA
  std::vector<std::optional<c10::cuda::CUDAStream>> streams;
  // [tensor][device]: the copy that made the value available, for consumers to wait on.
  std::vector<std::vector<std::shared_ptr<at::cuda::CUDAEvent>>> ready_events;
#endif

  Impl(const graph::Graph& g, DeviceSet d, graph::Placement p, ExecutorOptions o)
      : graph(g),
        devices(std::move(d)),
        placement(std::move(p)),
        options(o),
        num_devices(static_cast<int>(devices.size())) {}

  bool IsCuda(int device) const {
    return device >= 0 && devices[static_cast<size_t>(device)].type == DeviceType::kCuda;
  }

  void Plan() {
    if (placement.devices != DeviceNames(devices)) {
      throw StepFailure("the placement's devices differ from the executor's");
    }
    op_device = graph::ExpandPlacement(graph, placement);
    std::vector<OpId> order = graph.TopologicalOrder();
    topo_rank.assign(order.size(), 0);
    for (size_t i = 0; i < order.size(); ++i)
      topo_rank[static_cast<size_t>(order[i])] = static_cast<int>(i);
    priority = topo_rank;
    if (placement.micro_batches > 1) {
      pipeline.emplace(graph, placement, op_device);
      priority = pipeline->priority();
    }

    std::vector<bool> runs(static_cast<size_t>(graph.num_ops()), true);
    if (options.forward_only) {
      for (OpId id = 0; id < graph.num_ops(); ++id) {
        runs[static_cast<size_t>(id)] = graph.op(id).phase == Phase::kForward;
      }
    }
    ops_to_run = static_cast<int>(std::count(runs.begin(), runs.end(), true));

    const size_t n = static_cast<size_t>(graph.num_tensors());
    home = graph::HomeDevices(graph, op_device);
    remote.assign(n, {});
    users.assign(n, std::vector<std::vector<OpId>>(static_cast<size_t>(num_devices)));
    for (TensorId t = 0; t < graph.num_tensors(); ++t) {
      const graph::Tensor& tensor = graph.tensor(t);
      if (tensor.producer == graph::kNoOp) {
        if (tensor.kind == TensorKind::kParameter) parameters.push_back(t);
        if (tensor.kind == TensorKind::kInput || tensor.kind == TensorKind::kLabel) {
          feeds.push_back(t);
        }
      }
      for (OpId consumer : tensor.consumers) {
        if (!runs[static_cast<size_t>(consumer)]) continue;
        auto& list = users[static_cast<size_t>(t)]
                          [static_cast<size_t>(op_device[static_cast<size_t>(consumer)])];
        if (std::find(list.begin(), list.end(), consumer) == list.end()) list.push_back(consumer);
      }
      for (int d = 0; d < num_devices; ++d) {
        if (d != home[static_cast<size_t>(t)] &&
            !users[static_cast<size_t>(t)][static_cast<size_t>(d)].empty()) {
          remote[static_cast<size_t>(t)].push_back(d);
        }
      }
    }
    initial_pending.assign(static_cast<size_t>(graph.num_ops()), 0);
    for (OpId id = 0; id < graph.num_ops(); ++id) {
      std::vector<TensorId> inputs = graph.op(id).inputs;
      std::sort(inputs.begin(), inputs.end());
      initial_pending[static_cast<size_t>(id)] =
          static_cast<int>(std::unique(inputs.begin(), inputs.end()) - inputs.begin());
    }
    backward_of.assign(static_cast<size_t>(graph.num_ops()), graph::kNoOp);
    needs_grad.assign(static_cast<size_t>(graph.num_ops()), {});
    for (OpId id = 0; id < graph.num_ops(); ++id) {
      const Op& op = graph.op(id);
      if (op.type != graph::op_types::kBackward) continue;
      backward_of[static_cast<size_t>(op.forward_op)] = id;
      auto& flags = needs_grad[static_cast<size_t>(op.forward_op)];
      flags.assign(graph.op(op.forward_op).inputs.size(), false);
      for (int64_t index : op.attrs.GetInts("grad_of")) flags[static_cast<size_t>(index)] = true;
    }
    values.assign(n, std::vector<at::Tensor>(static_cast<size_t>(num_devices)));
    uses_left.assign(n, std::vector<int>(static_cast<size_t>(num_devices), 0));
    saved.assign(static_cast<size_t>(graph.num_ops()), {});
    pending = std::make_unique<std::atomic<int>[]>(static_cast<size_t>(graph.num_ops()));
    busy.assign(static_cast<size_t>(num_devices), 0);
    memory_now = std::make_unique<std::atomic<int64_t>[]>(static_cast<size_t>(num_devices));
    memory_peak = std::make_unique<std::atomic<int64_t>[]>(static_cast<size_t>(num_devices));
    param_bytes.assign(static_cast<size_t>(num_devices), 0);
    channels.assign(static_cast<size_t>((num_devices + 1) * num_devices), {});
    trace_per_device.assign(static_cast<size_t>(num_devices), {});
    for (int d = 0; d < num_devices; ++d) queues.push_back(std::make_unique<DeviceQueue>());
    for (TensorId t : feeds) {
      for (int d = 0; d < num_devices; ++d) {
        if (!users[static_cast<size_t>(t)][static_cast<size_t>(d)].empty()) {
          queues[static_cast<size_t>(d)]->loads.push_back(t);
        }
      }
    }
    for (OpId id = 0; id < graph.num_ops(); ++id) {
      if (runs[static_cast<size_t>(id)] && initial_pending[static_cast<size_t>(id)] == 0) {
        queues[static_cast<size_t>(op_device[static_cast<size_t>(id)])]->sources.push_back(id);
      }
    }
#ifdef PLACER_WITH_CUDA
    streams.assign(static_cast<size_t>(num_devices), std::nullopt);
    for (int d = 0; d < num_devices; ++d) {
      if (IsCuda(d)) {
        streams[static_cast<size_t>(d)] = c10::cuda::getStreamFromPool(
            false, static_cast<c10::DeviceIndex>(devices[static_cast<size_t>(d)].index));
      }
    }
    ready_events.assign(
        n, std::vector<std::shared_ptr<at::cuda::CUDAEvent>>(static_cast<size_t>(num_devices)));
#endif
  }

  void LoadParameters(const TensorMap& initial) {
    for (TensorId t : parameters) {
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
      int d = home[static_cast<size_t>(t)];
      try {
        values[static_cast<size_t>(t)][static_cast<size_t>(d)] =
            it->second.to(TorchDevice(devices[static_cast<size_t>(d)]), at::kFloat, false, true);
      } catch (const c10::OutOfMemoryError& e) {
        throw StepFailure(fmt::format("out of memory on {} loading parameter '{}': {}",
                                      devices[static_cast<size_t>(d)].name, tensor.name,
                                      e.what_without_backtrace()));
      }
      param_bytes[static_cast<size_t>(d)] += tensor.bytes();
    }
  }

  void StartWorkers() {
    running = std::make_unique<std::atomic<OpId>[]>(static_cast<size_t>(num_devices));
    for (int d = 0; d < num_devices; ++d) running[static_cast<size_t>(d)] = graph::kNoOp;
    for (int d = 0; d < num_devices; ++d) workers.emplace_back([this, d] { WorkerMain(d); });
  }

  void StopWorkers() {
    {
      std::lock_guard lock(step_mutex);
      shutting_down = true;
    }
    step_cv.notify_all();
    for (auto& worker : workers) worker.join();
  }

  // ---- memory accounting ----
  void Allocate(int device, int64_t bytes) {
    if (device < 0) return;
    int64_t now = memory_now[static_cast<size_t>(device)] += bytes;
    std::atomic<int64_t>& peak = memory_peak[static_cast<size_t>(device)];
    int64_t seen = peak.load();
    while (seen < now && !peak.compare_exchange_weak(seen, now)) {
    }
    const Device& dev = devices[static_cast<size_t>(device)];
    if (dev.memory_capacity > 0 && now > dev.memory_capacity) {
      throw StepFailure(
          fmt::format("out of memory on {}: the step needs at least {} bytes, the "
                      "capacity is {} bytes",
                      dev.name, now, dev.memory_capacity));
    }
  }
  void Release(int device, int64_t bytes) {
    if (device >= 0) memory_now[static_cast<size_t>(device)] -= bytes;
  }

  // ---- availability ----
  // Called by the worker of `device` (or of the sending device for copies): marks `t` available
  // on `device` and wakes the ops there that were waiting only for it.
  void Publish(TensorId t, int device, at::Tensor value) {
    auto& slot = values[static_cast<size_t>(t)][static_cast<size_t>(device)];
    const bool resident =
        graph.tensor(t).kind == TensorKind::kParameter && device == home[static_cast<size_t>(t)];
    slot = std::move(value);
    const auto& consumers = users[static_cast<size_t>(t)][static_cast<size_t>(device)];
    uses_left[static_cast<size_t>(t)][static_cast<size_t>(device)] =
        static_cast<int>(consumers.size());
    if (!resident) Allocate(device, graph.tensor(t).bytes());
    for (OpId consumer : consumers) {
      if (pending[static_cast<size_t>(consumer)].fetch_sub(1) == 1) {
        DeviceQueue& q = *queues[static_cast<size_t>(device)];
        {
          std::lock_guard lock(q.mutex);
          q.ready.emplace(priority[static_cast<size_t>(consumer)], consumer);
        }
        q.wake.notify_one();
      }
    }
  }

  void Consumed(TensorId t, int device) {
    if (options.forward_only) return;  // predictions read values after the step
    const bool resident =
        graph.tensor(t).kind == TensorKind::kParameter && device == home[static_cast<size_t>(t)];
    if (resident) return;
    if (--uses_left[static_cast<size_t>(t)][static_cast<size_t>(device)] == 0) {
      values[static_cast<size_t>(t)][static_cast<size_t>(device)] = at::Tensor();
#ifdef PLACER_WITH_CUDA
      ready_events[static_cast<size_t>(t)][static_cast<size_t>(device)].reset();
#endif
      Release(device, graph.tensor(t).bytes());
    }
  }

  // An op's output (or a parameter at the step's start), produced by `device`'s worker: copied to
  // every other device that reads it, then made available on `device` itself.
  void PublishOutput(TensorId t, int device, at::Tensor value) {
    PushCopies(t, device, value, remote[static_cast<size_t>(t)]);
    Publish(t, device, std::move(value));
  }

  // Copies `value` (on `from`, or host memory) to each device in `to` and publishes it there.
  void PushCopies(TensorId t, int from, const at::Tensor& value, const std::vector<int>& to) {
    for (int d : to) {
      auto begin = Clock::now();
      at::Tensor copy = CopyTo(value, from, d, t);
      auto end = Clock::now();
      Channel& channel = channels[static_cast<size_t>((from + 1) * num_devices + d)];
      channel.bytes += graph.tensor(t).bytes();
      channel.count += 1;
      channel.seconds += Seconds(begin, end);
      if (options.record_trace) {
        std::string from_name = from == kHost ? "host" : devices[static_cast<size_t>(from)].name;
        trace_per_device[static_cast<size_t>(from >= 0 ? from : d)].push_back(
            {fmt::format("{}->{}", from_name, devices[static_cast<size_t>(d)].name),
             graph.tensor(t).name, Seconds(step_start, begin) * 1e6, Seconds(begin, end) * 1e6});
      }
      Publish(t, d, std::move(copy));
    }
  }

  at::Tensor CopyTo(const at::Tensor& value, int from, int to, [[maybe_unused]] TensorId t) {
    const Device& dst = devices[static_cast<size_t>(to)];
#ifdef PLACER_WITH_CUDA
    if (IsCuda(from) || IsCuda(to)) {
      // Issue the copy on the destination's stream (or the source's, for device-to-host) and let
      // the consumer wait on an event rather than blocking this worker.
      int stream_device = IsCuda(to) ? to : from;
      c10::cuda::CUDAStreamGuard guard(*streams[static_cast<size_t>(stream_device)]);
      if (IsCuda(from)) {
        auto producer_done = std::make_shared<at::cuda::CUDAEvent>();
        producer_done->record(*streams[static_cast<size_t>(from)]);
        producer_done->block(*streams[static_cast<size_t>(stream_device)]);
      }
      at::Tensor copy;
      try {
        if (IsCuda(to)) {
          copy = value.to(TorchDevice(dst), /*non_blocking=*/true, /*copy=*/true);
        } else {
          copy = at::empty(value.sizes(), value.options().device(at::kCPU).pinned_memory(true));
          copy.copy_(value, /*non_blocking=*/true);
        }
      } catch (const c10::OutOfMemoryError& e) {
        // The sender's worker issues the copy, but the memory that ran out is the destination's.
        throw StepFailure(
            fmt::format("out of memory on {}: {}", dst.name, e.what_without_backtrace()));
      }
      if (IsCuda(from)) {
        c10::cuda::CUDACachingAllocator::recordStream(value.storage().data_ptr(),
                                                      *streams[static_cast<size_t>(stream_device)]);
      }
      auto done = std::make_shared<at::cuda::CUDAEvent>();
      done->record(*streams[static_cast<size_t>(stream_device)]);
      ready_events[static_cast<size_t>(t)][static_cast<size_t>(to)] = std::move(done);
      return copy;
    }
#endif
    (void)from;
    (void)dst;
    // Between CPU workers: a real copy, so that each device owns its memory.
    return value.clone();
  }

  // Makes the value of `t` on `device` safe to read on that device's worker.
  void WaitFor([[maybe_unused]] TensorId t, [[maybe_unused]] int device) {
#ifdef PLACER_WITH_CUDA
    auto& event = ready_events[static_cast<size_t>(t)][static_cast<size_t>(device)];
    if (!event) return;
    if (IsCuda(device)) {
      event->block(*streams[static_cast<size_t>(device)]);
    } else {
      event->synchronize();
    }
#endif
  }

  // ---- op execution ----
  // The step being run, counted from 0 (random ops draw per step). Written before the workers
  // wake, read by them while it stays fixed.
  uint64_t Step() const { return generation - 1; }

  void RunOp(OpId id, int device) {
    const Op& op = graph.op(id);
    std::vector<at::Tensor> inputs;
    inputs.reserve(op.inputs.size());
    for (TensorId t : op.inputs) {
      WaitFor(t, device);
      inputs.push_back(values[static_cast<size_t>(t)][static_cast<size_t>(device)]);
    }
    if (op.phase == Phase::kForward) {
      RunForward(id, device, inputs);
    } else if (op.phase == Phase::kBackward && op.type != graph::op_types::kBackward) {
      // Gradient plumbing (sums, the ring all-reduce's chunks): kernels on gradients, no autograd.
      at::NoGradGuard no_grad;
      std::vector<at::Tensor> outputs =
          RunForwardKernel(op, inputs, TorchDevice(devices[static_cast<size_t>(device)]), Step());
      for (size_t k = 0; k < outputs.size(); ++k) PublishOutput(op.outputs[k], device, outputs[k]);
    } else if (op.phase == Phase::kBackward) {
      RunBackward(id, device, inputs);
    } else {
      at::NoGradGuard no_grad;
      at::Tensor grad = inputs[1];
      for (size_t i = 2; i < inputs.size(); ++i) grad = grad + inputs[i];
      inputs[0].sub_(grad, op.attrs.GetFloat("lr"));
    }
    std::vector<TensorId> distinct = op.inputs;
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    for (TensorId t : distinct) Consumed(t, device);
  }

  void RunForward(OpId id, int device, std::vector<at::Tensor>& inputs) {
    const Op& op = graph.op(id);
    const bool differentiate =
        !options.forward_only && backward_of[static_cast<size_t>(id)] != graph::kNoOp;
    std::vector<at::Tensor> outputs;
    if (differentiate) {
      at::AutoGradMode grad_mode(true);
      SavedForBackward& state = saved[static_cast<size_t>(id)];
      const auto& flags = needs_grad[static_cast<size_t>(id)];
      for (size_t i = 0; i < inputs.size(); ++i) {
        if (flags[i]) {
          inputs[i] = inputs[i].detach().requires_grad_(true);
          state.leaves.push_back(inputs[i]);
        }
      }
      outputs =
          RunForwardKernel(op, inputs, TorchDevice(devices[static_cast<size_t>(device)]), Step());
      state.outputs = outputs;
    } else {
      at::NoGradGuard no_grad;
      outputs =
          RunForwardKernel(op, inputs, TorchDevice(devices[static_cast<size_t>(device)]), Step());
    }
    for (size_t k = 0; k < outputs.size(); ++k) {
      TensorId t = op.outputs[k];
      at::Tensor value = outputs[k].detach();
      if (op.type == graph::op_types::kSoftmaxCrossEntropy) losses[static_cast<size_t>(id)] = value;
      PublishOutput(t, device, std::move(value));
    }
  }

  void RunBackward(OpId id, int device, const std::vector<at::Tensor>& inputs) {
    const Op& op = graph.op(id);
    const Op& forward = graph.op(op.forward_op);
    SavedForBackward state = std::move(saved[static_cast<size_t>(op.forward_op)]);
    saved[static_cast<size_t>(op.forward_op)] = {};
    const auto& grad_for = op.attrs.GetInts("grad_input_output");
    std::vector<at::Tensor> grad_outputs(forward.outputs.size());
    for (size_t j = 0; j < grad_for.size(); ++j) {
      at::Tensor& sum = grad_outputs[static_cast<size_t>(grad_for[j])];
      sum = sum.defined() ? sum + inputs[j] : inputs[j];
    }
    std::vector<at::Tensor> roots, root_grads;
    for (size_t k = 0; k < forward.outputs.size(); ++k) {
      if (forward.type == graph::op_types::kSoftmaxCrossEntropy) {
        grad_outputs[k] = at::ones_like(state.outputs[k]);
      }
      // An output that does not depend differentiably on the inputs (Hardmax, an integer
      // result) passes no gradient back.
      if (grad_outputs[k].defined() && state.outputs[k].requires_grad()) {
        roots.push_back(state.outputs[k]);
        root_grads.push_back(grad_outputs[k]);
      }
    }
    std::vector<at::Tensor> grads(state.leaves.size());
    if (!roots.empty()) {
      grads = torch::autograd::grad(roots, state.leaves, root_grads, /*retain_graph=*/false,
                                    /*create_graph=*/false, /*allow_unused=*/true);
    }
    for (size_t i = 0; i < op.outputs.size(); ++i) {
      PublishOutput(op.outputs[i], device,
                    grads[i].defined() ? grads[i] : at::zeros_like(state.leaves[i]));
    }
  }

  void Fail(const std::string& message) {
    {
      std::lock_guard lock(error_mutex);
      if (error.empty()) error = message;
    }
    abort = true;
    for (auto& q : queues) {
      { std::lock_guard lock(q->mutex); }
      q->wake.notify_all();
    }
  }

  // ---- workers ----
  void WorkerMain(int device) {
    const Device& dev = devices[static_cast<size_t>(device)];
    if (dev.type == DeviceType::kCpu) {
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
  OpId NextToRun(int device, const DeviceQueue& q) const {
    for (const auto& [rank, id] : q.ready) {
      if (!pipeline || pipeline->MayStart(q.pipeline_state, device, id)) return id;
    }
    return graph::kNoOp;
  }

  void RunDeviceStep(int device) {
#ifdef PLACER_WITH_CUDA
    std::optional<c10::cuda::CUDAStreamGuard> stream_guard;
    if (IsCuda(device)) stream_guard.emplace(*streams[static_cast<size_t>(device)]);
#endif
    DeviceQueue& q = *queues[static_cast<size_t>(device)];
    if (pipeline) q.pipeline_state = pipeline->Start(device);
    double busy_seconds = 0;
#ifdef PLACER_WITH_CUDA
    // A GPU's ops return once launched, so the host's clock times the launches only: its ops are
    // timed on the stream instead, by events around each one, read after the step's
    // synchronisation. `reference` marks the stream's start, for the trace's start times.
    struct StreamTimed {
      size_t trace_index;  // into trace_per_device[device], or kUntraced
      std::unique_ptr<at::cuda::CUDAEvent> start, end;
    };
    constexpr size_t kUntraced = std::numeric_limits<size_t>::max();
    std::vector<StreamTimed> stream_timed;
    std::unique_ptr<at::cuda::CUDAEvent> reference;
    double reference_us = 0;
    if (IsCuda(device)) {
      reference = std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault);
      reference->record(*streams[static_cast<size_t>(device)]);
      reference_us = Seconds(step_start, Clock::now()) * 1e6;
    }
#endif
    try {
      // The minibatch comes from host memory: CPU workers read it in place, GPUs copy it.
      for (TensorId t : q.loads) {
        const at::Tensor& host = batch->at(graph.tensor(t).name);
        if (IsCuda(device)) {
          PushCopies(t, kHost, host, {device});
        } else {
          Publish(t, device, host);
        }
      }
      for (TensorId t : parameters) {
        if (home[static_cast<size_t>(t)] != device) continue;
        const at::Tensor& value = values[static_cast<size_t>(t)][static_cast<size_t>(device)];
        uses_left[static_cast<size_t>(t)][static_cast<size_t>(device)] = 0;
        PublishOutput(t, device, value);
      }
      {
        std::lock_guard lock(q.mutex);
        for (OpId id : q.sources) q.ready.emplace(priority[static_cast<size_t>(id)], id);
      }
      while (true) {
        OpId id = graph::kNoOp;
        {
          std::unique_lock lock(q.mutex);
          q.wake.wait(lock, [&] {
            if (abort) return true;
            id = NextToRun(device, q);
            return id != graph::kNoOp || (q.ready.empty() && completed == ops_to_run);
          });
          if (abort || id == graph::kNoOp) break;
          q.ready.erase({priority[static_cast<size_t>(id)], id});
        }
        if (pipeline) pipeline->Started(q.pipeline_state, id);
        auto begin = Clock::now();
#ifdef PLACER_WITH_CUDA
        std::unique_ptr<at::cuda::CUDAEvent> op_start;
        if (IsCuda(device)) {
          op_start = std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault);
          op_start->record(*streams[static_cast<size_t>(device)]);
        }
#endif
        running[static_cast<size_t>(device)] = id;
        RunOp(id, device);
        running[static_cast<size_t>(device)] = graph::kNoOp;
        if (pipeline) pipeline->Finished(q.pipeline_state, id);
        auto end = Clock::now();
        busy_seconds += Seconds(begin, end);
        if (options.record_trace) {
          trace_per_device[static_cast<size_t>(device)].push_back(
              {devices[static_cast<size_t>(device)].name, graph.op(id).name,
               Seconds(step_start, begin) * 1e6, Seconds(begin, end) * 1e6});
        }
#ifdef PLACER_WITH_CUDA
        if (IsCuda(device)) {
          auto op_end = std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault);
          op_end->record(*streams[static_cast<size_t>(device)]);
          stream_timed.push_back({options.record_trace
                                      ? trace_per_device[static_cast<size_t>(device)].size() - 1
                                      : kUntraced,
                                  std::move(op_start), std::move(op_end)});
        }
#endif
        if (completed.fetch_add(1) + 1 == ops_to_run) {
          for (auto& other : queues) {
            { std::lock_guard lock(other->mutex); }
            other->wake.notify_all();
          }
        }
      }
#ifdef PLACER_WITH_CUDA
      if (IsCuda(device)) {
        streams[static_cast<size_t>(device)]->synchronize();
        busy_seconds = 0;
        for (const StreamTimed& timed : stream_timed) {
          const double ms = timed.start->elapsed_time(*timed.end);
          busy_seconds += ms * 1e-3;
          if (timed.trace_index == kUntraced) continue;
          TraceEvent& event = trace_per_device[static_cast<size_t>(device)][timed.trace_index];
          event.start_us = reference_us + reference->elapsed_time(*timed.start) * 1e3;
          event.duration_us = ms * 1e3;
        }
      }
#endif
    } catch (const c10::OutOfMemoryError& e) {
      Fail(fmt::format("out of memory on {}: {}", devices[static_cast<size_t>(device)].name,
                       e.what_without_backtrace()));
    } catch (const c10::Error& e) {
      Fail(fmt::format("op failed on {}: {}", devices[static_cast<size_t>(device)].name,
                       e.what_without_backtrace()));
    } catch (const std::exception& e) {
      Fail(e.what());
    }
    busy[static_cast<size_t>(device)] = busy_seconds;
  }

  StepResult RunStep(const TensorMap& step_batch, double time_limit_seconds) {
    if (abandoned) {
      throw StepFailure("this executor abandoned a hung op in an earlier step and cannot run");
    }
    for (TensorId t : feeds) {
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
      pending[static_cast<size_t>(id)] = initial_pending[static_cast<size_t>(id)];
    }
    completed = 0;
    abort = false;
    error.clear();
    losses.assign(static_cast<size_t>(graph.num_ops()), at::Tensor());
    for (int d = 0; d < num_devices; ++d) {
      memory_now[static_cast<size_t>(d)] = param_bytes[static_cast<size_t>(d)];
      memory_peak[static_cast<size_t>(d)] = param_bytes[static_cast<size_t>(d)];
    }
    std::fill(channels.begin(), channels.end(), Channel{});
    for (auto& events : trace_per_device) events.clear();
    batch = &step_batch;

    step_start = Clock::now();
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
      while (workers_done < num_devices) {
        if (deadline == Clock::time_point::max()) {
          step_cv.wait(lock);
        } else if (step_cv.wait_until(lock, deadline) == std::cv_status::timeout &&
                   workers_done < num_devices) {
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
    if (abort) {
      ResetAfterFailure();
      throw StepFailure(error);
    }
    StepResult result;
    result.seconds = Seconds(step_start, end);
    for (const at::Tensor& value : losses) {
      if (value.defined()) result.loss += value.item<double>();
    }
    for (int d = 0; d < num_devices; ++d) {
      result.devices.push_back({devices[static_cast<size_t>(d)].name, busy[static_cast<size_t>(d)],
                                memory_peak[static_cast<size_t>(d)].load()});
    }
    for (int from = kHost; from < num_devices; ++from) {
      for (int to = 0; to < num_devices; ++to) {
        const Channel& c = channels[static_cast<size_t>((from + 1) * num_devices + to)];
        if (c.count == 0) continue;
        result.transfers.push_back(
            {from == kHost ? "host" : devices[static_cast<size_t>(from)].name,
             devices[static_cast<size_t>(to)].name, c.bytes, c.count, c.seconds});
      }
    }
    for (auto& events : trace_per_device) {
      result.trace.insert(result.trace.end(), events.begin(), events.end());
    }
    return result;
  }

  // Drops everything the failed step left behind, keeping only resident parameters.
  void ResetAfterFailure() {
    for (TensorId t = 0; t < graph.num_tensors(); ++t) {
      for (int d = 0; d < num_devices; ++d) {
        bool resident =
            graph.tensor(t).kind == TensorKind::kParameter && d == home[static_cast<size_t>(t)];
        if (!resident) values[static_cast<size_t>(t)][static_cast<size_t>(d)] = at::Tensor();
      }
    }
    for (auto& state : saved) state = {};
    for (auto& q : queues) {
      std::lock_guard lock(q->mutex);
      q->ready = {};
    }
#ifdef PLACER_WITH_CUDA
    for (auto& per_device : ready_events) {
      for (auto& event : per_device) event.reset();
    }
    for (int d = 0; d < num_devices; ++d) {
      if (IsCuda(d)) {
        streams[static_cast<size_t>(d)]->synchronize();
      }
    }
    c10::cuda::CUDACachingAllocator::emptyCache();
#endif
  }
};

Executor::Executor(const graph::Graph& graph, DeviceSet devices, graph::Placement placement,
                   const TensorMap& parameters, ExecutorOptions options)
    : impl_(std::make_unique<Impl>(graph, std::move(devices), std::move(placement), options)) {
  impl_->Plan();
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
  for (TensorId t : impl_->parameters) {
    const at::Tensor& value =
        impl_->values[static_cast<size_t>(t)]
                     [static_cast<size_t>(impl_->home[static_cast<size_t>(t)])];
    result.emplace(impl_->graph.tensor(t).name, value.to(at::kCPU).clone());
  }
  return result;
}

at::Tensor Executor::LastValue(const std::string& tensor_name) const {
  TensorId t = impl_->graph.TensorByName(tensor_name);
  int d = impl_->home[static_cast<size_t>(t)];
  if (d < 0) throw StepFailure(fmt::format("'{}' is a minibatch tensor", tensor_name));
  return impl_->values[static_cast<size_t>(t)][static_cast<size_t>(d)];
}

}  // namespace placer::runtime
