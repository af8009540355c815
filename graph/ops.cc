#include "graph/ops.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <unordered_map>

namespace placer::graph {
namespace {

using ShapeRule = std::function<std::vector<Shape>(const Graph&, const Op&)>;
using FlopRule = std::function<double(const Graph&, const Op&)>;

struct OpTypeInfo {
  ShapeRule shapes;
  FlopRule flops;
};

const Shape& InputShape(const Graph& graph, const Op& op, size_t index) {
  return graph.tensor(op.inputs[index]).shape;
}

void ExpectInputs(const Op& op, size_t min_count, size_t max_count) {
  if (op.inputs.size() < min_count || op.inputs.size() > max_count) {
    throw GraphError(min_count == max_count
                         ? fmt::format("expects {} inputs, has {}", min_count, op.inputs.size())
                         : fmt::format("expects {} to {} inputs, has {}", min_count, max_count,
                                       op.inputs.size()));
  }
}

void ExpectRank(const Graph& graph, const Op& op, size_t index, size_t rank) {
  const Tensor& t = graph.tensor(op.inputs[index]);
  if (t.shape.size() != rank) {
    throw GraphError(
        fmt::format("input '{}' must have rank {}, has shape {}", t.name, rank, ToString(t.shape)));
  }
}

void ExpectFloat(const Graph& graph, const Op& op, size_t index) {
  const Tensor& t = graph.tensor(op.inputs[index]);
  if (t.dtype != DType::kFloat32) {
    throw GraphError(fmt::format("input '{}' must be float32, is {}", t.name, ToString(t.dtype)));
  }
}

std::pair<int64_t, int64_t> Pair(const Op& op, const std::string& name) {
  const auto& values = op.attrs.GetInts(name);
  if (values.size() != 2 || values[0] < 0 || values[1] < 0) {
    throw GraphError(fmt::format("attribute '{}' must be two non-negative integers", name));
  }
  return {values[0], values[1]};
}

// Output extent of a sliding window; throws when the window does not fit.
int64_t WindowExtent(int64_t size, int64_t kernel, int64_t stride, int64_t padding) {
  if (stride <= 0) throw GraphError("stride must be positive");
  int64_t span = size + 2 * padding - kernel;
  if (span < 0) {
    throw GraphError(
        fmt::format("window {} does not fit input extent {} (padding {})", kernel, size, padding));
  }
  return span / stride + 1;
}

double Numel(const Shape& shape) { return static_cast<double>(NumElements(shape)); }

// An optional third input is a bias with one entry per output channel or feature.
void ExpectBias(const Graph& g, const Op& op, int64_t outputs) {
  if (op.inputs.size() == 3 && InputShape(g, op, 2) != Shape{outputs}) {
    throw GraphError(
        fmt::format("bias '{}' must have shape [{}]", g.tensor(op.inputs[2]).name, outputs));
  }
}

std::vector<Shape> ConvShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 2, 3);
  ExpectRank(g, op, 0, 4);
  ExpectRank(g, op, 1, 4);
  const Shape& x = InputShape(g, op, 0);
  const Shape& w = InputShape(g, op, 1);
  if (w[1] != x[1]) {
    throw GraphError(fmt::format("weight '{}' expects {} input channels, input has {}",
                                 g.tensor(op.inputs[1]).name, w[1], x[1]));
  }
  ExpectBias(g, op, w[0]);
  auto [stride_h, stride_w] = Pair(op, "stride");
  auto [pad_h, pad_w] = Pair(op, "padding");
  return {{x[0], w[0], WindowExtent(x[2], w[2], stride_h, pad_h),
           WindowExtent(x[3], w[3], stride_w, pad_w)}};
}

double ConvFlops(const Graph& g, const Op& op) {
  const Shape& w = InputShape(g, op, 1);
  const Shape& out = g.tensor(op.outputs[0]).shape;
  double macs = Numel(out) * static_cast<double>(w[1] * w[2] * w[3]);
  return 2 * macs + (op.inputs.size() == 3 ? Numel(out) : 0);
}

std::vector<Shape> ElementwiseShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 1, 1);
  ExpectFloat(g, op, 0);
  return {InputShape(g, op, 0)};
}

std::vector<Shape> PoolShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 1, 1);
  ExpectRank(g, op, 0, 4);
  const Shape& x = InputShape(g, op, 0);
  auto [k_h, k_w] = Pair(op, "kernel");
  auto [s_h, s_w] = Pair(op, "stride");
  return {{x[0], x[1], WindowExtent(x[2], k_h, s_h, 0), WindowExtent(x[3], k_w, s_w, 0)}};
}

std::vector<Shape> FlattenShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 1, 1);
  const Shape& x = InputShape(g, op, 0);
  if (x.empty()) throw GraphError("cannot flatten a scalar");
  return {{x[0], NumElements(Shape(x.begin() + 1, x.end()))}};
}

std::vector<Shape> LinearShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 2, 3);
  ExpectRank(g, op, 0, 2);
  ExpectRank(g, op, 1, 2);
  const Shape& x = InputShape(g, op, 0);
  const Shape& w = InputShape(g, op, 1);
  if (w[1] != x[1]) {
    throw GraphError(fmt::format("weight '{}' {} expects {} input features, input '{}' has {}",
                                 g.tensor(op.inputs[1]).name, ToString(w), w[1],
                                 g.tensor(op.inputs[0]).name, x[1]));
  }
  ExpectBias(g, op, w[0]);
  return {{x[0], w[0]}};
}

double LinearFlops(const Graph& g, const Op& op) {
  const Shape& x = InputShape(g, op, 0);
  const Shape& w = InputShape(g, op, 1);
  double rows = static_cast<double>(x[0]);
  return 2 * rows * static_cast<double>(w[0] * w[1]) +
         (op.inputs.size() == 3 ? rows * static_cast<double>(w[0]) : 0);
}

std::vector<Shape> AddShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 2, 2);
  if (InputShape(g, op, 0) != InputShape(g, op, 1)) {
    throw GraphError(fmt::format("inputs '{}' {} and '{}' {} differ in shape",
                                 g.tensor(op.inputs[0]).name, ToString(InputShape(g, op, 0)),
                                 g.tensor(op.inputs[1]).name, ToString(InputShape(g, op, 1))));
  }
  return {InputShape(g, op, 0)};
}

std::vector<Shape> LossShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 2, 2);
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
    shapes.push_back(g.tensor(forward.inputs[static_cast<size_t>(index)]).shape);
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

double OutputNumel(const Graph& g, const Op& op) { return Numel(g.tensor(op.outputs[0]).shape); }

const std::unordered_map<std::string, OpTypeInfo>& Registry() {
  static const auto* registry = new std::unordered_map<std::string, OpTypeInfo>{
      {op_types::kConv2d, {ConvShapes, ConvFlops}},
      {op_types::kRelu, {ElementwiseShapes, OutputNumel}},
      {op_types::kAvgPool2d,
       {PoolShapes,
        [](const Graph& g, const Op& op) {
          auto [k_h, k_w] = Pair(op, "kernel");
          return OutputNumel(g, op) * static_cast<double>(k_h * k_w);
        }}},
      {op_types::kFlatten, {FlattenShapes, [](const Graph&, const Op&) { return 0.0; }}},
      {op_types::kLinear, {LinearShapes, LinearFlops}},
      {op_types::kAdd, {AddShapes, OutputNumel}},
      // log-softmax (max, subtract, exp, sum, log) and the gather: about 5 per logit.
      {op_types::kSoftmaxCrossEntropy,
       {LossShapes, [](const Graph& g, const Op& op) { return 5 * Numel(InputShape(g, op, 0)); }}},
      {op_types::kBackward,
       {BackwardShapes,
        [](const Graph& g, const Op& op) { return 2 * OpFlops(g, ForwardOf(g, op)); }}},
      {op_types::kSgdUpdate,
       {UpdateShapes,
        [](const Graph& g, const Op& op) { return 2 * Numel(InputShape(g, op, 0)); }}},
  };
  return *registry;
}

const OpTypeInfo& Lookup(const std::string& type) {
  auto it = Registry().find(type);
  if (it == Registry().end()) throw GraphError(fmt::format("unknown op type '{}'", type));
  return it->second;
}

}  // namespace

bool IsKnownOpType(const std::string& type) { return Registry().count(type) != 0; }

std::vector<std::string> KnownOpTypes() {
  std::vector<std::string> types;
  for (const auto& [name, info] : Registry()) types.push_back(name);
  std::sort(types.begin(), types.end());
  return types;
}

std::vector<Shape> InferOutputShapes(const Graph& graph, const Op& op) {
  return Lookup(op.type).shapes(graph, op);
}

double OpFlops(const Graph& graph, const Op& op) { return Lookup(op.type).flops(graph, op); }

int64_t OpOutputBytes(const Graph& graph, const Op& op) {
  if (op.type == op_types::kSgdUpdate) return graph.tensor(op.inputs[0]).bytes();
  int64_t bytes = 0;
  for (TensorId id : op.outputs) bytes += graph.tensor(id).bytes();
  return bytes;
}

}  // namespace placer::graph
