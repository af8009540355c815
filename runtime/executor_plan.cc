#include "runtime/executor_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "graph/ops.h"
#include "graph/training_step.h"
#include "runtime/processes.h"

namespace placer::runtime {

using graph::Op;
using graph::OpId;
using graph::Phase;
using graph::TensorId;

ExecutorPlan::ExecutorPlan(const graph::Graph& g, graph::DeviceSet d, graph::Placement p,
                           ExecutorOptions o)
    : graph(g),
      devices(std::move(d)),
      placement(std::move(p)),
      options(std::move(o)),
      num_devices(static_cast<int>(devices.size())) {
  if (placement.devices != graph::DeviceNames(devices)) {
    throw StepFailure("the placement's devices differ from the executor's");
  }
  CheckProcesses();
  step = std::make_unique<const graph::StepGraph>(graph);
  placed = std::make_unique<const graph::PlacedStep>(*step, placement);
  runs.assign(static_cast<size_t>(graph.num_ops()), true);
  if (options.forward_only) {
    for (OpId id = 0; id < graph.num_ops(); ++id) {
      runs[static_cast<size_t>(id)] = graph.op(id).phase == Phase::kForward;
    }
  }
  PlanCollectiveBuckets();
  PlanDataflow();
  PlanKernels();
  for (const graph::Device& device : devices) torch_device.push_back(TorchDevice(device));
  if (options.processes) PlanIncoming();
}

void ExecutorPlan::CheckProcesses() {
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
}

// Finds the all-reduce rings (graph::kAllReduceBucket) whose members are on devices of more than
// one process and gives their ops roles; the others run as graph ops. Every process finds the
// same buckets in the same order (same graph and placement), as the collectives' order needs.
void ExecutorPlan::PlanCollectiveBuckets() {
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
  for (const auto& [ring, ops] : rings) {
    std::set<int> processes;
    OpId first_split = graph::kNoOp;
    for (OpId id : ops) {
      processes.insert(device_process[static_cast<size_t>(DeviceOf(id))]);
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
      const int d = DeviceOf(id);
      member_processes.insert(device_process[static_cast<size_t>(d)]);
      all_gpus = all_gpus && IsCuda(d);
      if (all_gpus && IsLocal(d) && bucket.device.is_cpu()) {
        bucket.device = TorchDevice(devices[static_cast<size_t>(d)]);
      }
    }
    bucket.on_gpus = all_gpus && static_cast<int>(member_processes.size()) ==
                                     options.processes->group->getSize();
    if (!bucket.on_gpus) bucket.device = at::kCPU;
    collect_ops.emplace_back();
    for (OpId id : ops) {
      const bool here = IsLocal(DeviceOf(id));
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
}

// Who waits for what: every tensor's readers per device (those that run), the copies its home
// pushes, each op's pending count, and what a device starts a step with.
void ExecutorPlan::PlanDataflow() {
  ops_to_run = 0;
  for (OpId id = 0; id < graph.num_ops(); ++id) {
    ops_to_run += runs[static_cast<size_t>(id)] && IsLocal(DeviceOf(id));
  }
  const size_t n = static_cast<size_t>(graph.num_tensors());
  remote.assign(n, {});
  users.assign(n, std::vector<std::vector<OpId>>(static_cast<size_t>(num_devices)));
  for (TensorId t = 0; t < graph.num_tensors(); ++t) {
    for (OpId consumer : step->consumers(t)) {
      // A collect op reads the allreduce's result, not the ring's chunks.
      if (!runs[static_cast<size_t>(consumer)] ||
          bucket_role[static_cast<size_t>(consumer)] == BucketRole::kCollect) {
        continue;
      }
      users[static_cast<size_t>(t)][static_cast<size_t>(DeviceOf(consumer))].push_back(consumer);
    }
    for (int d = 0; d < num_devices; ++d) {
      if (d != Home(t) && !Users(t, d).empty()) remote[static_cast<size_t>(t)].push_back(d);
    }
  }
  initial_pending = step->num_inputs();
  for (OpId id = 0; id < graph.num_ops(); ++id) {
    // Released by the allreduce's communication thread (the engine's BucketReady).
    if (bucket_role[static_cast<size_t>(id)] == BucketRole::kCollect) {
      initial_pending[static_cast<size_t>(id)] = 1;
    }
  }
  loads.assign(static_cast<size_t>(num_devices), {});
  for (TensorId t : step->minibatch()) {
    for (int d = 0; d < num_devices; ++d) {
      if (IsLocal(d) && !Users(t, d).empty()) loads[static_cast<size_t>(d)].push_back(t);
    }
  }
  sources.assign(static_cast<size_t>(num_devices), {});
  for (OpId id = 0; id < graph.num_ops(); ++id) {
    if (runs[static_cast<size_t>(id)] && initial_pending[static_cast<size_t>(id)] == 0) {
      sources[static_cast<size_t>(DeviceOf(id))].push_back(id);
    }
  }
}

// Kernels, found once rather than by name on every op of every step, and what autograd needs:
// each forward op's backward op and which of its inputs get a gradient.
void ExecutorPlan::PlanKernels() {
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
  kernel_of.assign(static_cast<size_t>(graph.num_ops()), nullptr);
  for (OpId id = 0; id < graph.num_ops(); ++id) {
    const Op& op = graph.op(id);
    const bool has_kernel = op.phase == Phase::kForward ||
                            (op.phase == Phase::kBackward && op.type != graph::op_types::kBackward);
    if (!runs[static_cast<size_t>(id)] || !has_kernel) continue;
    try {
      kernel_of[static_cast<size_t>(id)] = &FindKernel(op);
    } catch (const graph::GraphError& e) {
      throw StepFailure(e.what());
    }
  }
}

// Across processes: the tensors another process's device sends to a device of this one, for the
// transport to receive.
void ExecutorPlan::PlanIncoming() {
  cross = CrossProcess{options.processes, device_process, {}};
  for (TensorId t = 0; t < graph.num_tensors(); ++t) {
    const int from = Home(t);
    if (from < 0 || IsLocal(from)) continue;
    for (int to : remote[static_cast<size_t>(t)]) {
      if (!IsLocal(to)) continue;
      cross->incoming.push_back({t, to, device_process[static_cast<size_t>(from)],
                                 graph.tensor(t).shape, graph.tensor(t).dtype,
                                 IsCuda(to) ? devices[static_cast<size_t>(to)].index : -1});
    }
  }
}

}  // namespace placer::runtime
