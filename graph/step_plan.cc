#include "graph/step_plan.h"

#include <fmt/format.h>

#include <algorithm>

#include "graph/training_step.h"

namespace placer::graph {

StepGraph::StepGraph(const Graph& graph) : graph_(graph) {
  const size_t num_ops = static_cast<size_t>(graph.num_ops());
  const size_t num_tensors = static_cast<size_t>(graph.num_tensors());
  order_ = graph.TopologicalOrder();  // throws on a cycle
  rank_.assign(num_ops, 0);
  for (size_t i = 0; i < order_.size(); ++i)
    rank_[static_cast<size_t>(order_[i])] = static_cast<int>(i);

  anchor_.resize(num_ops);
  input_begin_.push_back(0);
  output_begin_.push_back(0);
  for (OpId id = 0; id < graph.num_ops(); ++id) {
    const Op& op = graph.op(id);
    if (op.phase == Phase::kForward) {
      anchor_[static_cast<size_t>(id)] = id;
    } else if (op.forward_op >= 0 && op.forward_op < graph.num_ops() &&
               graph.op(op.forward_op).phase == Phase::kForward) {
      anchor_[static_cast<size_t>(id)] = op.forward_op;
    } else {
      throw GraphError(fmt::format("{} op '{}' does not name the forward op it belongs with",
                                   ToString(op.phase), op.name));
    }
    std::vector<TensorId> distinct = op.inputs;
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    inputs_.insert(inputs_.end(), distinct.begin(), distinct.end());
    input_begin_.push_back(static_cast<int>(inputs_.size()));
    num_inputs_.push_back(static_cast<int>(distinct.size()));
    outputs_.insert(outputs_.end(), op.outputs.begin(), op.outputs.end());
    output_begin_.push_back(static_cast<int>(outputs_.size()));
  }

  consumer_begin_.push_back(0);
  bytes_.resize(num_tensors);
  origin_.resize(num_tensors);
  home_op_.assign(num_tensors, kNoOp);
  for (TensorId t = 0; t < graph.num_tensors(); ++t) {
    const Tensor& tensor = graph.tensor(t);
    for (OpId consumer : tensor.consumers) {
      auto begin = consumers_.begin() + consumer_begin_.back();
      if (std::find(begin, consumers_.end(), consumer) == consumers_.end()) {
        consumers_.push_back(consumer);
      }
    }
    consumer_begin_.push_back(static_cast<int>(consumers_.size()));
    bytes_[static_cast<size_t>(t)] = tensor.bytes();
    TensorOrigin& origin = origin_[static_cast<size_t>(t)];
    if (tensor.producer != kNoOp) {
      origin = TensorOrigin::kProduced;
      home_op_[static_cast<size_t>(t)] = tensor.producer;
    } else if (tensor.kind == TensorKind::kParameter) {
      origin = TensorOrigin::kParameter;
      // Throws when no forward op reads it: it would have no home.
      home_op_[static_cast<size_t>(t)] = OwnerOf(graph, t);
      parameters_.push_back(t);
    } else if (tensor.kind == TensorKind::kInput || tensor.kind == TensorKind::kLabel) {
      origin = TensorOrigin::kMinibatch;
      minibatch_.push_back(t);
    } else if (!tensor.consumers.empty()) {
      throw GraphError(fmt::format("op '{}': input '{}' is dangling: no op produces it",
                                   graph.op(tensor.consumers.front()).name, tensor.name));
    } else {
      origin = TensorOrigin::kNone;
    }
  }
}

const PipelineGraph& StepGraph::pipeline_graph() const {
  std::call_once(pipeline_once_,
                 [this] { pipeline_graph_ = std::make_unique<const PipelineGraph>(graph_); });
  return *pipeline_graph_;
}

namespace {

// Throws the error ExpandPlacement gives for a placement that does not cover every op.
[[noreturn]] void ThrowUnplaced(const Graph& graph, const Placement& placement) {
  ExpandPlacement(graph, placement);
  throw GraphError("the placement does not place every op");
}

}  // namespace

PlacedStep::PlacedStep(const StepGraph& step, const Placement& placement)
    : step_(step), num_devices_(static_cast<int>(placement.devices.size())) {
  const Graph& graph = step.graph();
  // ExpandPlacement's devices, from the anchors found once per graph: the simulator builds one
  // PlacedStep per placement it judges.
  if (placement.device_of_op.size() != static_cast<size_t>(graph.num_ops())) {
    ThrowUnplaced(graph, placement);
  }
  op_device_.resize(static_cast<size_t>(graph.num_ops()));
  for (OpId id = 0; id < graph.num_ops(); ++id) {
    const int device = placement.device_of_op[static_cast<size_t>(step.anchor(id))];
    if (device < 0 || device >= num_devices_) ThrowUnplaced(graph, placement);
    op_device_[static_cast<size_t>(id)] = device;
  }
  priority_ = &step.ranks();
  op_of_priority_ = &step.order();
  if (placement.micro_batches > 1) {
    pipeline_.emplace(step.pipeline_graph(), placement, op_device_);
    priority_ = &pipeline_->priority();
    op_of_priority_ = &pipeline_->ops_by_priority();
  }
  // HomeDevices', from the homes' ops found once per graph.
  home_.assign(static_cast<size_t>(graph.num_tensors()), kHostDevice);
  for (TensorId t = 0; t < graph.num_tensors(); ++t) {
    const OpId op = step.home_op(t);
    if (op != kNoOp) home_[static_cast<size_t>(t)] = op_device_[static_cast<size_t>(op)];
  }
  parameter_bytes_.assign(static_cast<size_t>(num_devices_), 0);
  for (TensorId t : step.parameters()) {
    parameter_bytes_[static_cast<size_t>(home(t))] += step.bytes(t);
  }
}

}  // namespace placer::graph
