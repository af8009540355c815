// The plan of a training step under a placement: what the executor runs and the simulator
// predicts, built by one piece of code so that both schedule the same dataflow by construction
// (ARCHITECTURE.md: same semantics in the runtime and the simulator). As TensorFlow builds an
// ImmutableExecutorState once and keeps each step's state apart, the plan is read-only once built;
// what a step changes (readiness, values, memory in use) is the executor's and the simulator's own.
//
// Two halves, because the simulator judges many placements of one graph:
// - StepGraph: what does not depend on the placement (topological order, distinct inputs and
//   consumers, sizes, where each tensor comes from), built once per graph.
// - PlacedStep: what a placement adds (every op's device, every tensor's home, the order a device
//   picks its ready ops in, the parameters each device holds), built once per placement.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "graph/ir.h"
#include "graph/pipeline.h"
#include "graph/placement.h"

namespace placer::graph {

// Where a tensor's value comes from at a step's start.
enum class TensorOrigin : uint8_t {
  kProduced,   // an op's output
  kMinibatch,  // an input or a label, read from host memory
  kParameter,  // lives on its owner's device across steps (OwnerOf)
  kNone,       // nothing produces it and nothing reads it
};

class StepGraph {
 public:
  // `graph` must outlive the StepGraph. Throws GraphError for a cycle, a backward or update op
  // that does not name its forward op, a parameter no forward op reads (it would have no home) or
  // a dangling input (nothing produces it: nothing could run).
  explicit StepGraph(const Graph& graph);
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  const Graph& graph() const { return graph_; }
  int num_ops() const { return graph_.num_ops(); }
  int num_tensors() const { return graph_.num_tensors(); }

  const std::vector<OpId>& order() const { return order_; }  // topological; rank -> op
  const std::vector<int>& ranks() const { return rank_; }    // op -> position in order()
  // The forward op whose placement `op` follows (itself for a forward op).
  OpId anchor(OpId op) const { return anchor_[static_cast<size_t>(op)]; }

  // Distinct inputs in ascending id order: an op reads each once, whatever its input list repeats.
  std::span<const TensorId> inputs(OpId op) const {
    return Row(inputs_, input_begin_, static_cast<size_t>(op));
  }
  // Per op: how many distinct inputs it waits for.
  const std::vector<int>& num_inputs() const { return num_inputs_; }
  std::span<const TensorId> outputs(OpId op) const {
    return Row(outputs_, output_begin_, static_cast<size_t>(op));
  }
  // Distinct consumers, in the order of the tensor's consumer list.
  std::span<const OpId> consumers(TensorId t) const {
    return Row(consumers_, consumer_begin_, static_cast<size_t>(t));
  }
  int64_t bytes(TensorId t) const { return bytes_[static_cast<size_t>(t)]; }
  TensorOrigin origin(TensorId t) const { return origin_[static_cast<size_t>(t)]; }
  // The minibatch tensors and the parameters, in id order (the order a step loads and pushes
  // them in).
  const std::vector<TensorId>& minibatch() const { return minibatch_; }
  const std::vector<TensorId>& parameters() const { return parameters_; }
  // The op whose device is `t`'s home: its producer, a parameter's owner (OwnerOf); kNoOp for the
  // minibatch (host memory) and for what nothing produces or reads.
  OpId home_op(TensorId t) const { return home_op_[static_cast<size_t>(t)]; }
  // The placement-independent half of a pipeline's order, built on first use (thread-safe) and
  // kept: the simulator orders every placement of a micro-batched graph by it. Throws GraphError
  // (and builds nothing) when the graph is not micro-batched.
  const PipelineGraph& pipeline_graph() const;

 private:
  template <typename T>
  static std::span<const T> Row(const std::vector<T>& items, const std::vector<int>& begin,
                                size_t row) {
    return std::span<const T>(items).subspan(static_cast<size_t>(begin[row]),
                                             static_cast<size_t>(begin[row + 1] - begin[row]));
  }

  const Graph& graph_;
  std::vector<OpId> order_;
  std::vector<int> rank_;
  std::vector<OpId> anchor_;
  // Compressed rows: distinct inputs and outputs per op, distinct consumers per tensor.
  std::vector<int> input_begin_, output_begin_, consumer_begin_;
  std::vector<TensorId> inputs_, outputs_;
  std::vector<OpId> consumers_;
  std::vector<int> num_inputs_;
  std::vector<int64_t> bytes_;
  std::vector<TensorOrigin> origin_;
  std::vector<TensorId> minibatch_;
  std::vector<TensorId> parameters_;
  std::vector<OpId> home_op_;
  mutable std::once_flag pipeline_once_;
  mutable std::unique_ptr<const PipelineGraph> pipeline_graph_;
};

class PlacedStep {
 public:
  // `step` must outlive the PlacedStep. Throws GraphError, as ExpandPlacement does, for an op not
  // placed on one of `placement.devices`, and as PipelineOrder does for a pipelined placement
  // (micro_batches > 1) of a graph that is not micro-batched.
  PlacedStep(const StepGraph& step, const Placement& placement);
  // Not copied or moved: priorities() may point into the pipeline order it holds.
  PlacedStep(const PlacedStep&) = delete;
  PlacedStep& operator=(const PlacedStep&) = delete;

  const StepGraph& step() const { return step_; }
  int num_devices() const { return num_devices_; }
  // Per op: its device (ExpandPlacement's).
  const std::vector<int>& op_devices() const { return op_device_; }
  int device_of(OpId op) const { return op_device_[static_cast<size_t>(op)]; }
  // Per tensor: its home device, or kHostDevice for the minibatch (HomeDevices').
  const std::vector<int>& homes() const { return home_; }
  int home(TensorId t) const { return home_[static_cast<size_t>(t)]; }
  // Whether `t` stays on `device` across steps: a parameter at home. Its memory is counted once,
  // from the start, and a step never frees it.
  bool IsResident(TensorId t, int device) const {
    return step_.origin(t) == TensorOrigin::kParameter && home(t) == device;
  }

  // Which of a device's ready ops runs first: the lowest priority. The topological rank, or for a
  // pipelined placement the schedule's (graph/pipeline.h), which may also hold ops back.
  const std::vector<int>& priorities() const { return *priority_; }
  // priority -> op
  const std::vector<OpId>& ops_by_priority() const { return *op_of_priority_; }
  // The schedule of a pipelined placement, else null.
  const PipelineOrder* pipeline() const { return pipeline_ ? &*pipeline_ : nullptr; }

  // Per device: the bytes of the parameters it holds.
  const std::vector<int64_t>& parameter_bytes() const { return parameter_bytes_; }

 private:
  const StepGraph& step_;
  int num_devices_ = 0;
  std::vector<int> op_device_;
  std::vector<int> home_;
  std::optional<PipelineOrder> pipeline_;
  const std::vector<int>* priority_ = nullptr;
  const std::vector<OpId>* op_of_priority_ = nullptr;
  std::vector<int64_t> parameter_bytes_;
};

}  // namespace placer::graph
