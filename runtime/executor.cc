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
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "graph/ops.h"
#include "graph/pipeline.h"
#include "graph/training_step.h"
#include "runtime/bucket_allreduce.h"
#include "runtime/kernel_table.h"
#include "runtime/processes.h"
#include "runtime/transport.h"

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
  graph::DeviceSet devices;
  graph::Placement placement;
  ExecutorOptions options;
  int num_devices;
  // Whether each device is this process's (all are, unless the placement spans processes).
  std::vector<bool> local;
  int num_local = 0;

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
  std::vector<const Kernel*> kernel_of;               // per op that runs a kernel, else null
  std::vector<at::Device> torch_device;               // per device
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
  std::vector<std::vector<graph::TraceEvent>> trace_per_device;

  std::unique_ptr<Transports> transports;

  // Gradient buckets whose replicas span processes run as one c10d allreduce each
  // (bucket_allreduce.h): a member's split op contributes its flat gradient, its concat op
  // collects the sum, and the ring's hops between them do not run.
  enum class BucketRole : uint8_t { kNone, kContribute, kCollect, kSkipped };
  std::vector<BucketRole> bucket_role;         // per op
  std::vector<int> bucket_of;                  // per op with a role: its collective bucket
  std::vector<std::vector<OpId>> collect_ops;  // per collective bucket: this process's
  std::unique_ptr<BucketAllReduce> all_reduce;

  Impl(const graph::Graph& g, graph::DeviceSet d, graph::Placement p, ExecutorOptions o)
      : graph(g),
        devices(std::move(d)),
        placement(std::move(p)),
        options(o),
        num_devices(static_cast<int>(devices.size())) {}

  bool IsCuda(int device) const {
    return device >= 0 && devices[static_cast<size_t>(device)].type == graph::DeviceType::kCuda;
  }

  void Plan() {
    if (placement.devices != graph::DeviceNames(devices)) {
      throw StepFailure("the placement's devices differ from the executor's");
    }
    std::vector<int> device_process;
    for (const graph::Device& d : devices) {
      const int process = graph::DeviceProcess(d.name);
      if (options.processes && process < 0) {
        throw StepFailure(fmt::format(
            "device '{}': a placement across processes names every device's process ('w0/{}')",
            d.name, d.name));
      }
      if (options.processes && process >= options.processes->group->getSize()) {
        throw StepFailure(
            fmt::format("device '{}': across processes, devices are of processes 0 to {}", d.name,
                        options.processes->group->getSize() - 1));
      }
      device_process.push_back(process);
      local.push_back(!options.processes || process == options.processes->rank());
    }
    num_local = static_cast<int>(std::count(local.begin(), local.end(), true));
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
    PlanCollectiveBuckets(device_process, runs);
    ops_to_run = 0;
    for (OpId id = 0; id < graph.num_ops(); ++id) {
      ops_to_run += runs[static_cast<size_t>(id)] &&
                    local[static_cast<size_t>(op_device[static_cast<size_t>(id)])];
    }

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
        // A collect op reads the allreduce's result, not the ring's chunks.
        if (!runs[static_cast<size_t>(consumer)] ||
            bucket_role[static_cast<size_t>(consumer)] == BucketRole::kCollect) {
          continue;
        }
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
      // Released by the allreduce's communication thread (BucketReady).
      if (bucket_role[static_cast<size_t>(id)] == BucketRole::kCollect) {
        initial_pending[static_cast<size_t>(id)] = 1;
      }
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
        if (local[static_cast<size_t>(d)] &&
            !users[static_cast<size_t>(t)][static_cast<size_t>(d)].empty()) {
          queues[static_cast<size_t>(d)]->loads.push_back(t);
        }
      }
    }
    for (OpId id = 0; id < graph.num_ops(); ++id) {
      if (runs[static_cast<size_t>(id)] && initial_pending[static_cast<size_t>(id)] == 0) {
        queues[static_cast<size_t>(op_device[static_cast<size_t>(id)])]->sources.push_back(id);
      }
    }
    kernel_of.assign(static_cast<size_t>(graph.num_ops()), nullptr);
    for (OpId id = 0; id < graph.num_ops(); ++id) {
      const Op& op = graph.op(id);
      const bool has_kernel =
          op.phase == Phase::kForward ||
          (op.phase == Phase::kBackward && op.type != graph::op_types::kBackward);
      if (!runs[static_cast<size_t>(id)] || !has_kernel) continue;
      try {
        kernel_of[static_cast<size_t>(id)] = &FindKernel(op);
      } catch (const graph::GraphError& e) {
        throw StepFailure(e.what());
      }
    }
    for (const graph::Device& d : devices) torch_device.push_back(TorchDevice(d));
    if (!options.processes) {
      transports = std::make_unique<Transports>(devices, graph.num_tensors());
      return;
    }
    CrossProcess cross{options.processes, device_process, {}};
    for (TensorId t = 0; t < graph.num_tensors(); ++t) {
      const int from = home[static_cast<size_t>(t)];
      if (from < 0 || local[static_cast<size_t>(from)]) continue;
      for (int to : remote[static_cast<size_t>(t)]) {
        if (!local[static_cast<size_t>(to)]) continue;
        cross.incoming.push_back({t, to, device_process[static_cast<size_t>(from)],
                                  graph.tensor(t).shape, graph.tensor(t).dtype,
                                  IsCuda(to) ? devices[static_cast<size_t>(to)].index : -1});
      }
    }
    transports = std::make_unique<Transports>(devices, graph.num_tensors(), &cross);
  }

  // Finds the all-reduce rings (graph::kAllReduceBucket) whose members are on devices of more than
  // one process and gives their ops roles; the others run as graph ops. Every process finds the
  // same buckets in the same order (same graph and placement), as the collectives' order needs.
  void PlanCollectiveBuckets(const std::vector<int>& device_process, std::vector<bool>& runs) {
    bucket_role.assign(static_cast<size_t>(graph.num_ops()), BucketRole::kNone);
    bucket_of.assign(static_cast<size_t>(graph.num_ops()), -1);
    if (!options.processes) return;
    const std::string tag(graph::kAllReduceBucket);
    std::map<int64_t, std::vector<OpId>> rings;
    for (OpId id = 0; id < graph.num_ops(); ++id) {
      if (runs[static_cast<size_t>(id)] && graph.op(id).attrs.Has(tag)) {
        rings[graph.op(id).attrs.GetInt(tag)].push_back(id);
      }
    }
    std::vector<BucketAllReduce::Bucket> buckets;
    for (const auto& [ring, ops] : rings) {
      std::set<int> processes;
      OpId first_split = graph::kNoOp;
      for (OpId id : ops) {
        processes.insert(device_process[static_cast<size_t>(op_device[static_cast<size_t>(id)])]);
        if (graph.op(id).type == graph::op_types::kSplit && first_split == graph::kNoOp) {
          first_split = id;
        }
      }
      // A one-element bucket's ring has no split to contribute from: it runs as graph ops.
      if (processes.size() < 2 || first_split == graph::kNoOp) continue;
      const int index = static_cast<int>(buckets.size());
      BucketAllReduce::Bucket bucket{
          .elements = graph::NumElements(graph.tensor(graph.op(first_split).inputs[0]).shape)};
      // NCCL where every member is a GPU and every process holds one (each rank's allreduce then
      // starts from a GPU); Gloo through host memory otherwise. The same choice on every process.
      std::set<int> member_processes;
      bool all_gpus = options.processes->gpu_group != nullptr;
      for (OpId id : ops) {
        if (graph.op(id).type != graph::op_types::kSplit) continue;
        const int d = op_device[static_cast<size_t>(id)];
        member_processes.insert(device_process[static_cast<size_t>(d)]);
        all_gpus = all_gpus && IsCuda(d);
        if (all_gpus && local[static_cast<size_t>(d)] && bucket.device.is_cpu()) {
          bucket.device = TorchDevice(devices[static_cast<size_t>(d)]);
        }
      }
      bucket.on_gpus = all_gpus && static_cast<int>(member_processes.size()) ==
                                       options.processes->group->getSize();
      if (!bucket.on_gpus) bucket.device = at::kCPU;
      collect_ops.emplace_back();
      for (OpId id : ops) {
        const bool here = local[static_cast<size_t>(op_device[static_cast<size_t>(id)])];
        bucket_of[static_cast<size_t>(id)] = index;
        BucketRole& role = bucket_role[static_cast<size_t>(id)];
        if (graph.op(id).type == graph::op_types::kSplit) {
          role = BucketRole::kContribute;
          bucket.local_members += here;
        } else if (graph.op(id).type == graph::op_types::kConcat) {
          role = BucketRole::kCollect;
          if (here) collect_ops.back().push_back(id);
        } else {
          role = BucketRole::kSkipped;
          runs[static_cast<size_t>(id)] = false;
        }
      }
      buckets.push_back(bucket);
    }
    if (!buckets.empty()) {
      all_reduce = std::make_unique<BucketAllReduce>(options.processes, std::move(buckets));
    }
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
      if (!local[static_cast<size_t>(d)]) continue;  // another process's
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
    for (int d = 0; d < num_devices; ++d) {
      if (local[static_cast<size_t>(d)]) workers.emplace_back([this, d] { WorkerMain(d); });
    }
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
    const graph::Device& dev = devices[static_cast<size_t>(device)];
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
    for (OpId consumer : consumers) Arrived(consumer, device);
  }

  // One of `op`'s inputs is available on its `device`: queues the op once all are.
  void Arrived(OpId op, int device) {
    if (pending[static_cast<size_t>(op)].fetch_sub(1) == 1) {
      DeviceQueue& q = *queues[static_cast<size_t>(device)];
      {
        std::lock_guard lock(q.mutex);
        q.ready.emplace(priority[static_cast<size_t>(op)], op);
      }
      q.wake.notify_one();
    }
  }

  // The communication thread's: bucket b's sum is ready for its collect ops.
  void BucketReady(int b) {
    for (OpId op : collect_ops[static_cast<size_t>(b)]) {
      Arrived(op, op_device[static_cast<size_t>(op)]);
    }
  }

  void Consumed(TensorId t, int device) {
    if (options.forward_only) return;  // predictions read values after the step
    const bool resident =
        graph.tensor(t).kind == TensorKind::kParameter && device == home[static_cast<size_t>(t)];
    if (resident) return;
    if (--uses_left[static_cast<size_t>(t)][static_cast<size_t>(device)] == 0) {
      values[static_cast<size_t>(t)][static_cast<size_t>(device)] = at::Tensor();
      for (const auto& transport : transports->all()) transport->Forget(t, device);
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
      at::Tensor copy = transports->Between(from, d).Copy(value, from, d, t);
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
      // A copy to another process's device lives there: its receiver publishes it.
      if (local[static_cast<size_t>(d)]) Publish(t, d, std::move(copy));
    }
  }

  // Makes the value of `t` on `device` safe to read on that device's worker.
  void WaitFor(TensorId t, int device) {
    for (const auto& transport : transports->all()) transport->WaitFor(t, device);
  }

  // ---- op execution ----
  // The step being run, counted from 0 (random ops draw per step). Written before the workers
  // wake, read by them while it stays fixed.
  uint64_t Step() const { return generation - 1; }

  void RunOp(OpId id, int device) {
    const Op& op = graph.op(id);
    switch (bucket_role[static_cast<size_t>(id)]) {
      case BucketRole::kContribute:
        WaitFor(op.inputs[0], device);
        // The communication thread reads it on another stream: the GPU's work must be done.
        if (IsCuda(device)) {
          for (const auto& transport : transports->all()) transport->Synchronize(device);
        }
        all_reduce->Contribute(
            bucket_of[static_cast<size_t>(id)],
            values[static_cast<size_t>(op.inputs[0])][static_cast<size_t>(device)]);
        Consumed(op.inputs[0], device);
        return;
      case BucketRole::kCollect:
        PublishOutput(op.outputs[0], device,
                      all_reduce->Result(bucket_of[static_cast<size_t>(id)])
                          .to(torch_device[static_cast<size_t>(device)]));
        return;
      case BucketRole::kNone:
      case BucketRole::kSkipped:
        break;
    }
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
      std::vector<at::Tensor> outputs = RunKernel(id, device, inputs);
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

  std::vector<at::Tensor> RunKernel(OpId id, int device, const std::vector<at::Tensor>& inputs) {
    return (*kernel_of[static_cast<size_t>(id)])(
        graph.op(id), inputs, KernelContext{torch_device[static_cast<size_t>(device)], Step()});
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
      outputs = RunKernel(id, device, inputs);
      state.outputs = outputs;
    } else {
      at::NoGradGuard no_grad;
      outputs = RunKernel(id, device, inputs);
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
    if (all_reduce) all_reduce->Abort();
    for (auto& q : queues) {
      { std::lock_guard lock(q->mutex); }
      q->wake.notify_all();
    }
  }

  // ---- workers ----
  void WorkerMain(int device) {
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
  OpId NextToRun(int device, const DeviceQueue& q) const {
    for (const auto& [rank, id] : q.ready) {
      if (!pipeline || pipeline->MayStart(q.pipeline_state, device, id)) return id;
    }
    return graph::kNoOp;
  }

  void RunDeviceStep(int device) {
    // Every transport's scope: the CUDA transport makes the worker issue on the GPU's stream.
    std::vector<std::shared_ptr<void>> scopes;
    for (const auto& transport : transports->all()) scopes.push_back(transport->EnterStep(device));
    DeviceQueue& q = *queues[static_cast<size_t>(device)];
    if (pipeline) q.pipeline_state = pipeline->Start(device);
    double busy_seconds = 0;
    // A GPU's ops are timed on its stream rather than by the host's clock.
    std::vector<std::unique_ptr<OpTimer>> timers;
    for (const auto& transport : transports->all()) {
      auto timer = transport->TimeOps(device, Seconds(step_start, Clock::now()) * 1e6);
      if (timer) timers.push_back(std::move(timer));
    }
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
        for (auto& timer : timers) timer->Begin();
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
        for (auto& timer : timers) {
          timer->End(options.record_trace ? trace_per_device[static_cast<size_t>(device)].size() - 1
                                          : OpTimer::kUntraced);
        }
        if (completed.fetch_add(1) + 1 == ops_to_run) {
          for (auto& other : queues) {
            { std::lock_guard lock(other->mutex); }
            other->wake.notify_all();
          }
        }
      }
      for (const auto& transport : transports->all()) transport->Synchronize(device);
      if (!timers.empty()) {
        busy_seconds = 0;
        for (auto& timer : timers) {
          busy_seconds += timer->Finish(trace_per_device[static_cast<size_t>(device)]);
        }
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
    if (all_reduce) {
      all_reduce->BeginStep([this](int b) { BucketReady(b); },
                            [this](const std::string& message) { Fail(message); });
    }
    for (const auto& transport : transports->all()) {
      transport->BeginStep([this](TensorId t, int device,
                                  at::Tensor value) { Publish(t, device, std::move(value)); },
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
      while (workers_done < num_local) {
        if (deadline == Clock::time_point::max()) {
          step_cv.wait(lock);
        } else if (step_cv.wait_until(lock, deadline) == std::cv_status::timeout &&
                   workers_done < num_local) {
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
    for (int d = 0; d < num_devices; ++d) {
      if (!local[static_cast<size_t>(d)]) continue;
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
    for (const auto& transport : transports->all()) transport->Reset();
  }
};

Executor::Executor(const graph::Graph& graph, graph::DeviceSet devices, graph::Placement placement,
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
    if (!impl_->local[static_cast<size_t>(impl_->home[static_cast<size_t>(t)])]) continue;
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
