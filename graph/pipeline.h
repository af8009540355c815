// The order a pipelined step runs in: which ready op a device runs first and which it must hold
// back, for a micro-batched graph (graph/micro_batches.h) under a placement with M > 1. The
// executor's workers and the simulator's devices follow these same rules, so that the simulator
// predicts the schedule (and its stashed activations) the executor runs.
//
// Stages: the devices that run forward ops, ordered by the earliest of their ops in topological
// order (a contiguous split gives the usual stage numbers; a non-contiguous one, the order in which
// micro-batch 0 first reaches each device).
// - GPipe: a device runs forwards before backwards (earlier micro-batch first), and no backward
//   before all its forwards of every micro-batch are done: all M micro-batches' activations are
//   stashed at the turn.
// - 1F1B (PipeDream-flush): a device runs backwards before forwards (earlier micro-batch first)
//   and admits micro-batches in order, at most (stages - stage) of them at once: a micro-batch is
//   admitted when its first forward op starts on the device and leaves when its last backward op
//   there ends. So after the warm-up, forward and backward alternate and at most (stages - stage)
//   micro-batches' activations are stashed.
// A backward op never starts before its own forward op has run (the loss's backward reads only
// the loss's inputs, so a backward-first order could otherwise pick it first). Update ops run last.
// Replicated pipelines (ops "r<r>/m<k>/..."): each replica's devices are its own stages, and its
// micro-batch k is micro-batch k of every replica; a device shared by several replicas admits a
// micro-batch under the tightest of its stages' limits. A replica's summed gradient and its
// all-reduce belong to no micro-batch: they never hold a micro-batch in flight.
// Deadlock-free: under both rules the oldest unfinished micro-batch can always be admitted
// everywhere (1F1B) or all forwards finish first (GPipe).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "graph/ir.h"
#include "graph/placement.h"

namespace placer::graph {

// What a pipeline's order takes from the graph alone: per op its micro-batch, phase, forward op
// and replica, and each schedule's priorities. It does not depend on the placement, so it is found
// once per graph (StepGraph::pipeline_graph) rather than once per placement: the simulator orders
// many placements of one micro-batched graph.
class PipelineGraph {
 public:
  // Throws GraphError (MicroBatchOfOps') when the graph is not micro-batched.
  explicit PipelineGraph(const Graph& graph);

  int num_ops() const { return static_cast<int>(phase_.size()); }
  // The most micro-batches of any op, plus one.
  int micro_batches() const { return micro_batches_; }
  // Per op: lower runs first among the ready ops of a device under `schedule`.
  const std::vector<int>& priority(PipelineSchedule schedule) const {
    return schedule == PipelineSchedule::kGPipe ? gpipe_priority_ : one_f_one_b_priority_;
  }
  // priority -> op, under `schedule`.
  const std::vector<OpId>& ops_by_priority(PipelineSchedule schedule) const {
    return schedule == PipelineSchedule::kGPipe ? gpipe_order_ : one_f_one_b_order_;
  }
  const std::vector<int>& micro_batch_of_op() const { return micro_batch_; }
  Phase phase(OpId op) const { return phase_[static_cast<size_t>(op)]; }
  OpId forward_op(OpId op) const { return forward_op_[static_cast<size_t>(op)]; }
  int replica(OpId op) const { return replica_[static_cast<size_t>(op)]; }  // 0 but forward
  int replicas() const { return replicas_; }
  int rank(OpId op) const { return rank_[static_cast<size_t>(op)]; }  // topological

 private:
  std::vector<int> micro_batch_;
  std::vector<Phase> phase_;
  std::vector<OpId> forward_op_;  // per op: the forward op a backward op belongs with
  std::vector<int> replica_;
  std::vector<int> rank_;
  std::vector<int> gpipe_priority_, one_f_one_b_priority_;
  std::vector<OpId> gpipe_order_, one_f_one_b_order_;
  int micro_batches_ = 0;
  int replicas_ = 1;
};

class PipelineOrder {
 public:
  // `device_of_op` from ExpandPlacement; `placement.micro_batches` must be above 1 and the graph
  // micro-batched (MicroBatchOfOps throws otherwise).
  PipelineOrder(const Graph& graph, const Placement& placement,
                const std::vector<int>& device_of_op);
  // The same from the graph's half, found once; `graph` must outlive the order.
  PipelineOrder(const PipelineGraph& graph, const Placement& placement,
                const std::vector<int>& device_of_op);

  // Per op: lower runs first among the ready ops of a device.
  const std::vector<int>& priority() const { return graph_->priority(schedule_); }
  // priority -> op.
  const std::vector<OpId>& ops_by_priority() const { return graph_->ops_by_priority(schedule_); }
  // The most stages of any replica.
  int stages() const { return stages_; }
  // Per device: its stage (0 first) in the first replica that uses it, or -1 for a device without
  // forward ops.
  const std::vector<int>& stage_of_device() const { return stage_of_device_; }
  const std::vector<int>& micro_batch_of_op() const { return graph_->micro_batch_of_op(); }

  // What one device has done so far in a step; touched only by that device's worker.
  struct DeviceState {
    int next_to_admit = 0;              // 1F1B: micro-batches admitted so far
    std::vector<int> backward_left;     // per micro-batch: its backward ops still to run here
    int forwards_left = 0;              // forward ops still to run here
    std::vector<uint8_t> forward_done;  // per op: a forward op of this device that has run
  };
  DeviceState Start(int device) const;
  // Why a ready op of `device` may not start now, and what can change that.
  enum class Hold : uint8_t {
    kNone,     // it may start
    kForward,  // a backward op whose own forward op (forward_op) has not run on the device yet
    kState,    // the schedule's turn or admission: until Started or Finished returns true
  };
  Hold HoldOf(const DeviceState& state, int device, OpId op) const;
  // Whether `op` (ready, on `device`) may start now.
  bool MayStart(const DeviceState& state, int device, OpId op) const {
    return HoldOf(state, device, op) == Hold::kNone;
  }
  // Each returns whether an op held by Hold::kState may start now (a micro-batch admitted or
  // gone, the turn from forwards to backwards), so that a scheduler need not ask again before.
  bool Started(DeviceState& state, OpId op) const;
  bool Finished(DeviceState& state, OpId op) const;
  OpId forward_op(OpId op) const { return graph_->forward_op(op); }
  bool IsForward(OpId op) const { return graph_->phase(op) == Phase::kForward; }

 private:
  PipelineOrder(std::unique_ptr<const PipelineGraph> owned, const Placement& placement,
                const std::vector<int>& device_of_op, const PipelineGraph* shared = nullptr);

  std::unique_ptr<const PipelineGraph> owned_;  // when built from a Graph
  const PipelineGraph* graph_;
  PipelineSchedule schedule_;
  int micro_batches_;
  int stages_ = 0;
  std::vector<int> stage_of_device_;
  std::vector<int> in_flight_limit_;            // per device (1F1B)
  std::vector<std::vector<int>> backward_ops_;  // [device][micro-batch]
  std::vector<int> forward_ops_;                // per device
};

}  // namespace placer::graph
