// The executor's plan of a placed step: the plan it shares with the simulator (graph/step_plan.h:
// op devices, homes, priorities, the pipeline schedule) and what only a real run adds: which ops
// run in this process, who waits for what, the kernels, autograd's flags and the collective
// roles of gradient buckets that span processes. Built once per executor, before its workers
// start; read-only afterwards, so every worker reads it without a lock.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "graph/device.h"
#include "graph/ir.h"
#include "graph/placement.h"
#include "graph/step_plan.h"
#include "runtime/bucket_allreduce.h"
#include "runtime/executor.h"
#include "runtime/kernel_table.h"
#include "runtime/transport.h"

namespace placer::runtime {

// How an op of a gradient bucket whose replicas span processes takes part in its one c10d
// allreduce (bucket_allreduce.h): a member's split op contributes its flat gradient, its concat op
// collects the sum, and the ring's hops between them do not run.
enum class BucketRole : uint8_t { kNone, kContribute, kCollect, kSkipped };

struct ExecutorPlan {
  // Throws StepFailure for devices that differ from the placement's, a device of no process (or
  // of an unknown one) across processes, or an op without a kernel; GraphError as graph::StepGraph
  // and graph::PlacedStep do.
  ExecutorPlan(const graph::Graph& graph, graph::DeviceSet devices, graph::Placement placement,
               ExecutorOptions options);
  ExecutorPlan(const ExecutorPlan&) = delete;
  ExecutorPlan& operator=(const ExecutorPlan&) = delete;

  bool IsCuda(int device) const {
    return device >= 0 && devices[static_cast<size_t>(device)].type == graph::DeviceType::kCuda;
  }
  bool IsLocal(int device) const { return local[static_cast<size_t>(device)]; }
  int DeviceOf(graph::OpId op) const { return placed->device_of(op); }
  int Home(graph::TensorId t) const { return placed->home(t); }
  int Priority(graph::OpId op) const { return placed->priorities()[static_cast<size_t>(op)]; }
  const graph::PipelineOrder* pipeline() const { return placed->pipeline(); }
  bool IsResident(graph::TensorId t, int device) const { return placed->IsResident(t, device); }
  // Distinct consumers of `t` on `device` that run, which its value there waits for.
  const std::vector<graph::OpId>& Users(graph::TensorId t, int device) const {
    return users[static_cast<size_t>(t)][static_cast<size_t>(device)];
  }

  // A copy, not a reference: a worker abandoned inside a hung op outlives the caller's graph
  // (ASan caught the returning op reading a graph its test had freed).
  const graph::Graph graph;
  const graph::DeviceSet devices;
  const graph::Placement placement;
  const ExecutorOptions options;
  const int num_devices;
  std::vector<int> device_process;  // per device: its process's rank, or -1 when not named
  // Whether each device is this process's (all are, unless the placement spans processes).
  std::vector<bool> local;
  int num_local = 0;

  // Shared with the simulator.
  std::unique_ptr<const graph::StepGraph> step;
  std::unique_ptr<const graph::PlacedStep> placed;

  std::vector<bool> runs;  // per op: it runs in a step (forward ops only when forward_only)
  int ops_to_run = 0;      // of this process's devices
  std::vector<std::vector<std::vector<graph::OpId>>> users;  // [tensor][device], see Users
  std::vector<std::vector<int>> remote;  // per tensor: devices other than its home that read it
  std::vector<int> initial_pending;      // per op: what it waits for (distinct inputs)
  std::vector<std::vector<graph::TensorId>> loads;  // per local device: minibatch tensors it reads
  std::vector<std::vector<graph::OpId>> sources;    // per device: ops ready at the step's start
  std::vector<graph::OpId> backward_of;             // forward op -> its backward op
  std::vector<std::vector<bool>> needs_grad;        // forward op -> per input
  std::vector<const Kernel*> kernel_of;             // per op that runs a kernel, else null
  std::vector<at::Device> torch_device;             // per device

  // Gradient buckets whose replicas span processes (empty within one process).
  std::vector<BucketRole> bucket_role;                // per op
  std::vector<int> bucket_of;                         // per op with a role: its bucket
  std::vector<std::vector<graph::OpId>> collect_ops;  // per bucket: this process's
  std::vector<BucketAllReduce::Bucket> buckets;       // for BucketAllReduce
  std::optional<CrossProcess> cross;                  // across processes: what arrives here

 private:
  void CheckProcesses();
  void PlanCollectiveBuckets();
  void PlanDataflow();
  void PlanKernels();
  void PlanIncoming();
};

}  // namespace placer::runtime
