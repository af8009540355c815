// An event-driven simulator of one training step under a placement, by the executor's rules
// (runtime/executor_engine.cc) and from the same plan of the placed step (graph/step_plan.h), so
// that simulated and measured step times can be compared:
//
// - Every op of the step runs where ExpandPlacement puts it. Every tensor has a home: its
//   producer's device; a parameter's is its owner's (graph::OwnerOf); the minibatch (inputs and
//   labels) lives in host memory.
// - Each device is one worker (a CPU worker's thread, a GPU's stream) that runs one thing at a
//   time. Among ready ops it runs the one earliest in graph.TopologicalOrder(). An op is ready when
//   each of its distinct inputs is available on its device.
// - When an op's output is consumed on other devices, it is copied to each of them, in device
//   order, as soon as the op finishes. Between CPU workers the sender clones it: its worker is
//   busy for the copy, before it runs anything else. A copy to a GPU runs on the destination's
//   stream, one from a GPU to a CPU worker on the source's stream. Every ordered device pair is
//   one channel; each channel has exactly one issuing worker or stream (the sender between CPU
//   workers, otherwise the stream named above), so its copies are serialised by construction.
// - At the step's start each device's worker loads the minibatch tensors it reads (CPU workers
//   read host memory in place; a GPU copies them in, channel "host->cuda:N") and then pushes each
//   parameter it owns to the other devices that read it.
// - Memory per device: the parameters it owns, all the time; every other value from the moment it
//   is produced on (or copied to) the device until the last op reading it there has finished.
//   Values nobody reads on a device (a loss, a gradient only read remotely) stay to the step's
//   end. Exceeding Device::memory_capacity (when > 0) makes the placement invalid at that moment,
//   as the executor's allocation check does.
//
// Where the simulator departs from the executor, and why:
// - Time is the cost model's, and the scheduler is work-conserving: a worker or stream picks work
//   only when its inputs are there. The executor's GPU worker threads run ahead of their streams
//   (launches are asynchronous), so a stream executes in launch order and stalls on an event wait;
//   a CPU worker may pop an op whose input is still being copied from a GPU and block on it.
//   Both depend on host-side timing the simulator does not model.
// - On a stream, work runs in the order it was enqueued: a copy when its value came to exist, an op
//   when it became ready (the worker launches it then, ahead of the stream). So a waiting copy goes
//   before the ops that became ready at or after it was enqueued, not before those ready earlier;
//   among copies, first come first served.
// - A copy's destination memory is counted when the copy ends (the executor counts a CPU clone
//   then, a GPU copy when it is issued).
// - busy_seconds and a device lane's op events cover what the executor's RunOp covers on a CPU
//   worker: the op plus the copies its worker then issues itself (clones, GPU-to-CPU copies); the
//   step-start loads and parameter pushes are not counted, as in the executor. On a GPU both
//   count the stream's time (the executor reads it from events around each op); copies into a
//   GPU, which run on its stream, are not in its op events in either.
// - Simultaneous events resolve in a fixed order (all that end at one instant, in the order they
//   were scheduled; then idle devices pick, by index), where the executor's threads race; so the
//   simulation is deterministic.
// - An op without inputs (a Constant) is ready at the start, as in the executor.
// - A pipelined placement (micro_batches > 1) orders and holds back ready ops by the schedule's
//   rules (graph/pipeline.h), as the executor's workers do.
// - Devices of one kind slow each other down (CostModel::ContentionFactor): whatever a device
//   does progresses at 1 / factor(k) of its speed alone while k devices of its kind, itself
//   included, are busy, so a task's time depends on what overlaps it, moment by moment. Whenever
//   a device of the kind starts or stops, the tasks still running are re-timed from the work they
//   have left.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/device.h"
#include "graph/evaluator.h"
#include "graph/ir.h"
#include "graph/placement.h"
#include "graph/step_plan.h"
#include "runtime/sim/cost_model.h"

namespace placer::sim {

// A device index, or kHost (-1) for host memory.
inline constexpr int kHost = graph::kHostDevice;

struct ChannelStats {
  int from = kHost;  // device index, or kHost for the minibatch
  int to = 0;
  int count = 0;
  int64_t bytes = 0;
  double seconds = 0;
};

// The outcome of one simulated step. Per-device vectors follow the simulator's device order.
struct SimulationResult {
  bool valid = false;
  std::string invalid_reason;  // set when !valid: "out of memory on cpu:1: ..."
  double step_seconds = 0;     // from the step's start until every worker and stream is idle
  std::vector<double> busy_seconds;
  std::vector<int64_t> peak_memory_bytes;
  std::vector<ChannelStats> transfers;   // used channels: host first, then by (from, to)
  std::vector<graph::TraceEvent> trace;  // when asked for: device lanes and "from->to" lanes
};

// A lower bound on the step time of every placement, and its parts (REFERENCES.md 2.3):
// LB = max(critical_path, work_per_device, longest_op), every op at its fastest device's time.
// work_per_device is the sum of those fastest times over the number of devices: each op occupies
// some device at least that long, and the devices work in parallel at best. ("Total work / total
// speed" needs one speed per device, which a general cost model, where each op has its own
// device ranking, does not define.) Communication and memory are ignored, so the bound is loose
// for communication-bound placements.
struct LowerBoundResult {
  double critical_path_seconds = 0;    // longest dependency chain, communication free
  double work_per_device_seconds = 0;  // total fastest op time / number of devices
  double longest_op_seconds = 0;       // the slowest op at its fastest
  double seconds = 0;                  // the largest of the three
};

class Simulator {
 public:
  // Precomputes everything that does not depend on the placement: the graph's half of the step's
  // plan (graph::StepGraph: topological ranks, consumers, tensor sizes), every op's time on every
  // device and every transfer's time on every channel (the cost model is not used afterwards).
  // `graph` must outlive the simulator; it need not be a training step, but backward and update ops
  // must name their forward op. Throws GraphError for a cycle, a dangling input or a parameter no
  // forward op reads, std::invalid_argument for no devices or a negative or non-finite cost.
  Simulator(const graph::Graph& graph, graph::DeviceSet devices, const CostModel& cost_model);

  // Simulates one step. Throws std::invalid_argument when the placement's devices differ from the
  // simulator's, GraphError when an op is not placed; running out of memory is an invalid result.
  // Thread-safe: concurrent calls share only read-only state (each thread keeps the scratch
  // space of its simulations, sized by the largest step it has simulated).
  SimulationResult Simulate(const graph::Placement& placement, bool record_trace = false) const;

  // The result in the Evaluator's terms, with device and channel names.
  graph::EvaluationResult ToEvaluationResult(SimulationResult result) const;

  LowerBoundResult LowerBound() const;

  const graph::Graph& graph() const { return graph_; }
  const graph::DeviceSet& devices() const { return devices_; }
  const std::vector<std::string>& device_names() const { return device_names_; }
  // Cached costs.
  double OpSeconds(graph::OpId op, int device) const {
    return op_seconds_[static_cast<size_t>(op) * static_cast<size_t>(num_devices_) +
                       static_cast<size_t>(device)];
  }
  double TransferSeconds(graph::TensorId tensor, int from, int to) const {
    return transfer_seconds_[static_cast<size_t>(size_class_[static_cast<size_t>(tensor)]) *
                                 static_cast<size_t>(num_channels_) +
                             static_cast<size_t>(Channel(from, to))];
  }

 private:
  struct Workspace;
  struct CopyTask;
  // The constructor's last step (simulator_costs.cc): op_seconds_, transfer_seconds_,
  // receive_seconds_per_byte_ and contention_ from `cost_model`. Throws std::invalid_argument for
  // a negative or non-finite cost.
  void TabulateCosts(const CostModel& cost_model);
  int Channel(int from, int to) const { return (from + 1) * num_devices_ + to; }
  // The worker or stream that performs a copy from device `from` to `to` (see the file comment);
  // the minibatch's copies from host memory are issued by their GPU.
  int Issuer(int from, int to) const { return is_cuda_[static_cast<size_t>(to)] ? to : from; }

  void Publish(Workspace& w, graph::TensorId t, int device) const;
  void FreeInputsOf(Workspace& w, graph::OpId op, int device) const;
  void QueueCopiesOf(Workspace& w, graph::TensorId t, int from, graph::OpId job_op) const;
  void Allocate(Workspace& w, int device, int64_t bytes) const;
  double ReceiveSeconds(const Workspace& w, graph::OpId op, int device) const;
  void StartNext(Workspace& w, int device, double now) const;
  // The ready op `device` runs next (removed from its queue), or kNoOp.
  graph::OpId PopReady(Workspace& w, int device) const;
  // The op PopReady would return, left in its queue; kNoOp when none.
  graph::OpId PeekReady(Workspace& w, int device) const;
  template <typename Release>
  void Unhold(Workspace& w, int device, std::vector<int>& keys, Release release) const;
  void Finish(Workspace& w, int device, double now) const;
  void ScheduleEnd(Workspace& w, int device, double time) const;
  void Retime(Workspace& w, double now) const;

  const graph::Graph& graph_;
  graph::DeviceSet devices_;
  std::vector<std::string> device_names_;
  std::vector<std::string> channel_lanes_;  // "from->to" per channel, for traces
  int num_devices_ = 0;
  int num_channels_ = 0;
  int num_ops_ = 0;
  int num_tensors_ = 0;
  std::vector<uint8_t> is_cuda_;
  std::vector<int64_t> capacity_;

  // The placement-independent half of the plan the executor runs too (graph/step_plan.h); each
  // simulation adds its placement's half (graph::PlacedStep).
  graph::StepGraph step_;

  std::vector<double> op_seconds_;  // [op * devices + device]
  // tensor -> the bytes it takes and moves: its own, or under automatic mixed precision the
  // 16-bit size of what autocast keeps in 16 bits (CostModel::ActivationByteScale)
  std::vector<int64_t> stored_bytes_;
  // tensor -> index of its (size, collective hop or not) among the distinct pairs
  std::vector<int> size_class_;
  std::vector<double> transfer_seconds_;          // [size class * channels + channel]
  std::vector<double> receive_seconds_per_byte_;  // [channel]; 0 for host memory
  bool any_receive_cost_ = false;
  std::vector<int> kind_of_;        // device -> its kind (0: CPU workers, 1: GPUs)
  std::vector<double> contention_;  // [device * (devices + 1) + busy devices of its kind]
  bool any_contention_ = false;
};

// The lower bound for `graph` on `devices` under `cost_model` (see LowerBoundResult).
LowerBoundResult LowerBound(const graph::Graph& graph, const graph::DeviceSet& devices,
                            const CostModel& cost_model);

}  // namespace placer::sim
