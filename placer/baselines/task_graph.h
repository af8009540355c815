// The graph every baseline works on: one task per group (several groups become one task when they
// depend on each other in a cycle), with per-device compute times, memory, and the bytes that
// cross between tasks.
//
// The model, and why:
// - A task's time on a device is the sum of its forward ops and of the backward and update ops
//   that belong with them (they run on the forward op's device), plus loading the minibatch
//   tensors it reads from host memory. Baechi places forward ops the same way.
// - An edge u -> v carries the tensors u's ops produce (or the parameters u owns) that v's ops
//   read, and the gradients of those tensors flowing back from v to u. Its time between devices
//   a and b is every forward tensor's transfer a -> b plus every gradient's b -> a, each by the
//   cost model (so each pays the link's latency). The list schedulers treat it as the delay between
//   u's end and v's start: the classic macro-dataflow model of ETF and HEFT, without channel
//   contention or caching of a tensor that two tasks on one device read.
// - Gradients between tasks with no forward edge (data-parallel replicas adding each other's
//   gradients) are side traffic: the partitioners weigh them, the schedulers ignore them, since
//   they do not order the forward pass.
// - Memory of a task, by the problem's MemoryModel (problem.h): the parameters its ops own plus the
//   values they write (forward values only, or gradients too), plus a copy of each such value it
//   reads from another device or from host memory. The MemoryLedger charges a copy once per device,
//   when both ends are placed, and never frees anything.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/device.h"
#include "graph/ir.h"
#include "graph/placement.h"
#include "placer/baselines/problem.h"

namespace placer::baselines {

// Stands for host memory as the source of a value (the minibatch).
inline constexpr int kHostSource = -1;

// A task, device or tensor number (int, as the graph numbers them) as a vector index.
inline size_t Index(int i) { return static_cast<size_t>(i); }

struct TaskEdge {
  int from = 0;
  int to = 0;
  std::vector<int64_t> forward_tensor_bytes;   // each tensor crossing from -> to
  std::vector<int64_t> gradient_tensor_bytes;  // each gradient crossing back, to -> from
  int64_t Bytes() const;
};

// Bytes between two tasks that no forward edge joins (see the file comment).
struct SideTraffic {
  int task_a = 0;
  int task_b = 0;
  int64_t bytes = 0;
};

// A value a task reads that lives elsewhere (produced by another task, or in host memory) and that
// the memory model counts.
struct ForeignRead {
  graph::TensorId tensor = 0;
  int64_t bytes = 0;
  int source_task = kHostSource;
};

// A value of this task that another task reads, and that the memory model counts.
struct RemoteReader {
  graph::TensorId tensor = 0;
  int64_t bytes = 0;
  int reader_task = 0;
};

class TaskGraph {
 public:
  // Checks the problem (every pointer set, a grouping of this graph, at least one device, distinct
  // device names, finite non-negative costs) and throws std::invalid_argument naming what is wrong.
  explicit TaskGraph(const PlacementProblem& problem);

  int num_tasks() const { return static_cast<int>(groups_of_task_.size()); }
  int num_devices() const { return static_cast<int>(devices_.size()); }
  int num_groups() const { return static_cast<int>(task_of_group_.size()); }
  const graph::DeviceSet& devices() const { return devices_; }
  const std::vector<std::string>& device_names() const { return device_names_; }

  // Tasks are numbered in a topological order of the forward pass: every edge goes from a lower
  // number to a higher one, so a task's number is its topological index.
  const std::vector<int>& groups_of_task(int task) const {
    return groups_of_task_[static_cast<size_t>(task)];
  }
  int task_of_group(int group) const { return task_of_group_[static_cast<size_t>(group)]; }

  double ComputeSeconds(int task, int device) const {
    return compute_seconds_[static_cast<size_t>(task) * devices_.size() +
                            static_cast<size_t>(device)];
  }
  double MeanComputeSeconds(int task) const;
  // Parameters and values of the task itself, without copies of what it reads, by the memory model.
  int64_t memory_bytes(int task) const { return memory_bytes_[static_cast<size_t>(task)]; }
  MemoryModel memory_model() const { return memory_model_; }

  const std::vector<TaskEdge>& edges() const { return edges_; }
  const std::vector<int>& in_edges(int task) const { return in_edges_[static_cast<size_t>(task)]; }
  const std::vector<int>& out_edges(int task) const {
    return out_edges_[static_cast<size_t>(task)];
  }
  // Seconds edge `edge` costs when its source runs on `from_device` and its target on `to_device`;
  // 0 on one device.
  double CommunicationSeconds(int edge, int from_device, int to_device) const {
    return communication_seconds_[(static_cast<size_t>(edge) * devices_.size() +
                                   static_cast<size_t>(from_device)) *
                                      devices_.size() +
                                  static_cast<size_t>(to_device)];
  }
  // The mean over ordered pairs of distinct devices; 0 with one device.
  double MeanCommunicationSeconds(int edge) const;
  const std::vector<SideTraffic>& side_traffic() const { return side_traffic_; }

  const std::vector<ForeignRead>& foreign_reads(int task) const {
    return foreign_reads_[static_cast<size_t>(task)];
  }
  const std::vector<RemoteReader>& remote_readers(int task) const {
    return remote_readers_[static_cast<size_t>(task)];
  }

  // "group 3 (conv1)", "groups 3, 4 (conv1, relu1, +2 more)": for error messages.
  std::string Describe(int task) const;

  // The per-group devices and the per-op placement of one device per task.
  std::vector<int> GroupDevices(const std::vector<int>& task_devices) const;
  graph::Placement ToPlacement(const std::vector<int>& task_devices) const;

 private:
  const graph::Graph& graph_;
  const graph::Grouping& grouping_;
  graph::DeviceSet devices_;
  std::vector<std::string> device_names_;
  MemoryModel memory_model_;

  std::vector<std::vector<int>> groups_of_task_;
  std::vector<int> task_of_group_;
  std::vector<double> compute_seconds_;  // [task * devices + device]
  std::vector<int64_t> memory_bytes_;
  std::vector<TaskEdge> edges_;
  std::vector<std::vector<int>> in_edges_, out_edges_;
  std::vector<double> communication_seconds_;  // [(edge * devices + from) * devices + to]
  std::vector<SideTraffic> side_traffic_;
  std::vector<std::vector<ForeignRead>> foreign_reads_;
  std::vector<std::vector<RemoteReader>> remote_readers_;
};

// Memory use per device as tasks are placed, by the model in the file comment.
class MemoryLedger {
 public:
  explicit MemoryLedger(const TaskGraph& tasks);

  // Bytes that placing `task` on `device` adds on each device: the task's own memory and the copies
  // it reads on `device`, and the copies of its values that tasks already placed elsewhere read.
  std::vector<int64_t> AddedBytes(int task, int device) const;
  bool Fits(int task, int device) const;
  // Empty when it fits; otherwise which device it overflows and by how much.
  std::string WhyItDoesNotFit(int task, int device) const;
  void Place(int task, int device);

  int64_t used_bytes(int device) const { return used_bytes_[static_cast<size_t>(device)]; }
  // 0: unlimited.
  int64_t capacity(int device) const;
  int device_of(int task) const { return device_of_[static_cast<size_t>(task)]; }

 private:
  const TaskGraph& tasks_;
  std::vector<int> device_of_;
  std::vector<int64_t> used_bytes_;
  std::vector<std::vector<bool>> resident_;  // [device][tensor]: counted there already
};

// Throws BaselineError when no placement can hold the problem's memory: a task larger than every
// device, or more memory in all than all devices hold (when every device has a capacity).
void CheckMemoryCanFit(const TaskGraph& tasks);

// Empty when the placement fits the ledger's model; otherwise names each device over capacity.
std::string MemoryWarning(const TaskGraph& tasks, const std::vector<int>& task_devices);

// The result of `algorithm` placing each task on `task_devices`.
BaselineResult MakeResult(std::string algorithm, const TaskGraph& tasks,
                          const std::vector<int>& task_devices, const Stopwatch& stopwatch);

}  // namespace placer::baselines
