// The op types of the training step: the loss that starts the backward pass, gradient sums,
// backward ops and SGD updates.
#include <fmt/format.h>

#include "graph/op_rules.h"
#include "graph/ops.h"

namespace placer::graph {
namespace {

std::vector<Shape> LossShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 2, 2);
  ExpectFloat(g, op, 0);
  ExpectRank(g, op, 0, 2);
  ExpectRank(g, op, 1, 1);
  const Tensor& labels = g.tensor(op.inputs[1]);
  if (labels.dtype != DType::kInt64) {
    throw GraphError(fmt::format("labels '{}' must be int64", labels.name));
  }
  if (labels.shape[0] != InputShape(g, op, 0)[0]) {
    throw GraphError(fmt::format("labels '{}' {} do not match the batch of logits {}", labels.name,
                                 ToString(labels.shape), ToString(InputShape(g, op, 0))));
  }
  if (op.attrs.GetInt("normalizer") <= 0) throw GraphError("normalizer must be positive");
  return {Shape{}};
}

std::vector<Shape> AddNShapes(const Graph& g, const Op& op) {
  if (op.inputs.empty()) throw GraphError("expects at least one input");
  for (size_t i = 0; i < op.inputs.size(); ++i) {
    ExpectFloat(g, op, i);
    if (InputShape(g, op, i) != InputShape(g, op, 0)) {
      throw GraphError(fmt::format("input '{}' {} differs in shape from '{}' {}",
                                   g.tensor(op.inputs[i]).name, ToString(InputShape(g, op, i)),
                                   g.tensor(op.inputs[0]).name, ToString(InputShape(g, op, 0))));
    }
  }
  return {InputShape(g, op, 0)};
}

const Op& ForwardOf(const Graph& g, const Op& op) {
  if (op.forward_op == kNoOp || op.forward_op >= g.num_ops()) {
    throw GraphError("does not name its forward op");
  }
  return g.op(op.forward_op);
}

// Backward op layout: the first `grad_input_output.size()` inputs are gradient contributions to
// the forward op's outputs (one per differentiable consumer); the remaining inputs are the tensors
// the forward op saved for backward. Output i is the gradient of forward input grad_of[i].
std::vector<Shape> BackwardShapes(const Graph& g, const Op& op) {
  const Op& forward = ForwardOf(g, op);
  const auto& grad_for = op.attrs.GetInts("grad_input_output");
  const auto& grad_of = op.attrs.GetInts("grad_of");
  if (grad_for.size() > op.inputs.size()) throw GraphError("fewer inputs than gradient inputs");
  for (size_t i = 0; i < grad_for.size(); ++i) {
    if (grad_for[i] < 0 || static_cast<size_t>(grad_for[i]) >= forward.outputs.size()) {
      throw GraphError("grad_input_output names a missing forward output");
    }
    const Tensor& fwd_out = g.tensor(forward.outputs[static_cast<size_t>(grad_for[i])]);
    const Tensor& grad = g.tensor(op.inputs[i]);
    if (grad.shape != fwd_out.shape) {
      throw GraphError(fmt::format("gradient '{}' {} does not match forward output '{}' {}",
                                   grad.name, ToString(grad.shape), fwd_out.name,
                                   ToString(fwd_out.shape)));
    }
  }
  std::vector<Shape> shapes;
  for (int64_t index : grad_of) {
    if (index < 0 || static_cast<size_t>(index) >= forward.inputs.size()) {
      throw GraphError("grad_of names a missing forward input");
    }
    const Tensor& input = g.tensor(forward.inputs[static_cast<size_t>(index)]);
    if (input.dtype != DType::kFloat32) {
      throw GraphError(fmt::format("grad_of names '{}', a {} input without gradients", input.name,
                                   ToString(input.dtype)));
    }
    shapes.push_back(input.shape);
  }
  return shapes;
}

// Update layout: the parameter, then one gradient contribution per op that reads it.
std::vector<Shape> UpdateShapes(const Graph& g, const Op& op) {
  if (op.inputs.size() < 2) throw GraphError("expects a parameter and at least one gradient");
  const Tensor& param = g.tensor(op.inputs[0]);
  if (param.kind != TensorKind::kParameter) {
    throw GraphError(fmt::format("'{}' is not a parameter", param.name));
  }
  for (size_t i = 1; i < op.inputs.size(); ++i) {
    const Tensor& grad = g.tensor(op.inputs[i]);
    if (param.shape != grad.shape) {
      throw GraphError(fmt::format("gradient '{}' {} does not match parameter '{}' {}", grad.name,
                                   ToString(grad.shape), param.name, ToString(param.shape)));
    }
  }
  if (op.attrs.GetFloat("lr") <= 0) throw GraphError("learning rate must be positive");
  return {};
}

}  // namespace

void AddTrainingTypes(OpTable& table) {
  namespace t = op_types;
  // log-softmax (max, subtract, exp, sum, log) and the gather: about 5 per logit.
  table[t::kSoftmaxCrossEntropy] = {
      LossShapes, [](const Graph& g, const Op& op) { return 5 * Numel(InputShape(g, op, 0)); }};
  table[t::kAddN] = {AddNShapes, [](const Graph& g, const Op& op) {
                       return static_cast<double>(op.inputs.size() - 1) * OutputNumelOf(g, op);
                     }};
  table[t::kBackward] = {BackwardShapes, [](const Graph& g, const Op& op) {
                           return 2 * OpFlops(g, ForwardOf(g, op));
                         }};
  table[t::kSgdUpdate] = {
      UpdateShapes, [](const Graph& g, const Op& op) { return 2 * Numel(InputShape(g, op, 0)); }};
}

}  // namespace placer::graph
