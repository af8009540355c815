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

double OutputNumelOf(const Graph& g, const Op& op) { return Numel(g.tensor(op.outputs[0]).shape); }

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
  const int64_t groups = op.attrs.Has("groups") ? op.attrs.GetInt("groups") : 1;
  if (groups <= 0 || w[0] % groups != 0) {
    throw GraphError(
        fmt::format("groups {} must be positive and divide the {} output channels", groups, w[0]));
  }
  if (w[1] * groups != x[1]) {
    throw GraphError(fmt::format("weight '{}' expects {} input channels, input has {}",
                                 g.tensor(op.inputs[1]).name, w[1] * groups, x[1]));
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
  auto [p_h, p_w] = op.attrs.Has("padding") ? Pair(op, "padding") : std::pair<int64_t, int64_t>{};
  if (k_h == 0 || k_w == 0) throw GraphError("kernel must be positive");
  // PyTorch refuses padding beyond half the window (the window would hold only padding).
  if (2 * p_h > k_h || 2 * p_w > k_w) {
    throw GraphError(
        fmt::format("padding [{}, {}] exceeds half the kernel [{}, {}]", p_h, p_w, k_h, k_w));
  }
  return {{x[0], x[1], WindowExtent(x[2], k_h, s_h, p_h), WindowExtent(x[3], k_w, s_w, p_w)}};
}

std::vector<Shape> GlobalPoolShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 1, 1);
  ExpectRank(g, op, 0, 4);
  const Shape& x = InputShape(g, op, 0);
  return {{x[0], x[1], 1, 1}};
}

std::vector<Shape> FlattenShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 1, 1);
  const Shape& x = InputShape(g, op, 0);
  if (x.empty()) throw GraphError("cannot flatten a scalar");
  return {{x[0], NumElements(Shape(x.begin() + 1, x.end()))}};
}

std::vector<Shape> LinearShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 2, 3);
  ExpectRank(g, op, 1, 2);
  const Shape& x = InputShape(g, op, 0);
  const Shape& w = InputShape(g, op, 1);
  if (x.size() < 2) {
    throw GraphError(fmt::format("input '{}' must have rank 2 or more, has shape {}",
                                 g.tensor(op.inputs[0]).name, ToString(x)));
  }
  if (w[1] != x.back()) {
    throw GraphError(fmt::format("weight '{}' {} expects {} input features, input '{}' has {}",
                                 g.tensor(op.inputs[1]).name, ToString(w), w[1],
                                 g.tensor(op.inputs[0]).name, x.back()));
  }
  ExpectBias(g, op, w[0]);
  Shape out = x;
  out.back() = w[0];
  return {out};
}

double LinearFlops(const Graph& g, const Op& op) {
  const Shape& x = InputShape(g, op, 0);
  const Shape& w = InputShape(g, op, 1);
  double rows = Numel(x) / static_cast<double>(x.back());
  return 2 * rows * static_cast<double>(w[0] * w[1]) +
         (op.inputs.size() == 3 ? rows * static_cast<double>(w[0]) : 0);
}

// Numpy broadcasting of two shapes, or a GraphError naming both inputs.
Shape Broadcast(const Graph& g, const Op& op, size_t left, size_t right) {
  const Shape& a = InputShape(g, op, left);
  const Shape& b = InputShape(g, op, right);
  Shape out(std::max(a.size(), b.size()));
  for (size_t i = 0; i < out.size(); ++i) {
    int64_t da = i < out.size() - a.size() ? 1 : a[i - (out.size() - a.size())];
    int64_t db = i < out.size() - b.size() ? 1 : b[i - (out.size() - b.size())];
    if (da != db && da != 1 && db != 1) {
      throw GraphError(fmt::format("inputs '{}' {} and '{}' {} do not broadcast",
                                   g.tensor(op.inputs[left]).name, ToString(a),
                                   g.tensor(op.inputs[right]).name, ToString(b)));
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

std::vector<Shape> BinaryShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 2, 2);
  ExpectFloat(g, op, 0);
  ExpectFloat(g, op, 1);
  return {Broadcast(g, op, 0, 1)};
}

// An axis in [-rank, rank) made non-negative.
size_t Axis(int64_t axis, size_t rank) {
  const auto r = static_cast<int64_t>(rank);
  if (axis < -r || axis >= r) {
    throw GraphError(fmt::format("axis {} is out of range for rank {}", axis, rank));
  }
  return static_cast<size_t>(axis < 0 ? axis + r : axis);
}

std::vector<Shape> MatMulShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 2, 2);
  ExpectFloat(g, op, 0);
  ExpectFloat(g, op, 1);
  Shape a = InputShape(g, op, 0);
  Shape b = InputShape(g, op, 1);
  if (a.empty() || b.empty()) throw GraphError("matmul of a scalar");
  const bool vector_a = a.size() == 1, vector_b = b.size() == 1;
  if (vector_a) a.insert(a.begin(), 1);
  if (vector_b) b.push_back(1);
  const int64_t k = a.back();
  if (b[b.size() - 2] != k) {
    throw GraphError(fmt::format("inputs '{}' {} and '{}' {} do not multiply",
                                 g.tensor(op.inputs[0]).name, ToString(InputShape(g, op, 0)),
                                 g.tensor(op.inputs[1]).name, ToString(InputShape(g, op, 1))));
  }
  Shape batch_a(a.begin(), a.end() - 2), batch_b(b.begin(), b.end() - 2);
  Shape out(std::max(batch_a.size(), batch_b.size()));
  for (size_t i = 0; i < out.size(); ++i) {
    size_t pad_a = out.size() - batch_a.size(), pad_b = out.size() - batch_b.size();
    int64_t da = i < pad_a ? 1 : batch_a[i - pad_a];
    int64_t db = i < pad_b ? 1 : batch_b[i - pad_b];
    if (da != db && da != 1 && db != 1) {
      throw GraphError(fmt::format("batch dimensions {} and {} do not broadcast", ToString(batch_a),
                                   ToString(batch_b)));
    }
    out[i] = da == 1 ? db : da;
  }
  if (!vector_a) out.push_back(a[a.size() - 2]);
  if (!vector_b) out.push_back(b.back());
  return {out};
}

double MatMulFlops(const Graph& g, const Op& op) {
  const Shape& a = InputShape(g, op, 0);
  return 2 * OutputNumelOf(g, op) * static_cast<double>(a.back());
}

std::vector<Shape> ConstantShapes(const Graph&, const Op& op) {
  ExpectInputs(op, 0, 0);
  Shape shape = op.attrs.GetInts("shape");
  const std::string& values = op.attrs.GetString("values");
  const int64_t elements = NumElements(shape);
  if (static_cast<int64_t>(values.size()) != elements * 4) {
    throw GraphError(fmt::format("values hold {} bytes, shape {} needs {}", values.size(),
                                 ToString(shape), elements * 4));
  }
  return {shape};
}

std::vector<Shape> ReshapeShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 1, 1);
  Shape shape = op.attrs.GetInts("shape");
  for (int64_t d : shape) {
    if (d <= 0)
      throw GraphError(fmt::format("shape {} has a non-positive extent", ToString(shape)));
  }
  if (NumElements(shape) != NumElements(InputShape(g, op, 0))) {
    throw GraphError(
        fmt::format("cannot reshape {} to {}", ToString(InputShape(g, op, 0)), ToString(shape)));
  }
  return {shape};
}

std::vector<Shape> TransposeShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 1, 1);
  const Shape& x = InputShape(g, op, 0);
  const auto& perm = op.attrs.GetInts("perm");
  std::vector<bool> seen(x.size(), false);
  if (perm.size() != x.size()) {
    throw GraphError(fmt::format("perm has {} entries, input has rank {}", perm.size(), x.size()));
  }
  Shape out;
  for (int64_t p : perm) {
    size_t axis = Axis(p, x.size());
    if (seen[axis]) throw GraphError("perm repeats an axis");
    seen[axis] = true;
    out.push_back(x[axis]);
  }
  return {out};
}

std::vector<Shape> ConcatShapes(const Graph& g, const Op& op) {
  if (op.inputs.empty()) throw GraphError("expects at least one input");
  Shape out = InputShape(g, op, 0);
  const size_t axis = Axis(op.attrs.GetInt("axis"), out.size());
  for (size_t i = 1; i < op.inputs.size(); ++i) {
    const Shape& x = InputShape(g, op, i);
    bool fits = x.size() == out.size();
    for (size_t d = 0; fits && d < x.size(); ++d) fits = d == axis || x[d] == out[d];
    if (!fits) {
      throw GraphError(fmt::format("input '{}' {} does not concatenate with {} along axis {}",
                                   g.tensor(op.inputs[i]).name, ToString(x),
                                   ToString(InputShape(g, op, 0)), axis));
    }
    out[axis] += x[axis];
  }
  return {out};
}

std::vector<Shape> SplitShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 1, 1);
  const Shape& x = InputShape(g, op, 0);
  const size_t axis = Axis(op.attrs.GetInt("axis"), x.size());
  std::vector<Shape> out;
  int64_t total = 0;
  for (int64_t size : op.attrs.GetInts("sizes")) {
    if (size <= 0) throw GraphError("split sizes must be positive");
    Shape piece = x;
    piece[axis] = size;
    out.push_back(piece);
    total += size;
  }
  if (total != x[axis]) {
    throw GraphError(fmt::format("split sizes add up to {}, axis {} has {}", total, axis, x[axis]));
  }
  return out;
}

std::vector<Shape> SliceShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 1, 1);
  Shape out = InputShape(g, op, 0);
  const size_t axis = Axis(op.attrs.GetInt("axis"), out.size());
  const int64_t step = op.attrs.Has("step") ? op.attrs.GetInt("step") : 1;
  if (step <= 0) throw GraphError("slice step must be positive");
  const int64_t extent = out[axis];
  auto clamp = [extent](int64_t i) {
    return std::clamp(i < 0 ? i + extent : i, int64_t{0}, extent);
  };
  const int64_t start = clamp(op.attrs.GetInt("start")), end = clamp(op.attrs.GetInt("end"));
  if (end <= start) throw GraphError(fmt::format("slice [{}, {}) is empty", start, end));
  out[axis] = (end - start + step - 1) / step;
  return {out};
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

std::vector<Shape> SoftmaxShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 1, 1);
  ExpectFloat(g, op, 0);
  Axis(op.attrs.GetInt("axis"), InputShape(g, op, 0).size());
  return {InputShape(g, op, 0)};
}

std::vector<Shape> ReduceMeanShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 1, 1);
  const Shape& x = InputShape(g, op, 0);
  std::vector<bool> reduced(x.size(), false);
  for (int64_t a : op.attrs.GetInts("axes")) reduced[Axis(a, x.size())] = true;
  const bool keep = !op.attrs.Has("keepdims") || op.attrs.GetInt("keepdims") != 0;
  Shape out;
  for (size_t d = 0; d < x.size(); ++d) {
    if (!reduced[d]) {
      out.push_back(x[d]);
    } else if (keep) {
      out.push_back(1);
    }
  }
  return {out};
}

void ExpectPositiveEpsilon(const Op& op) {
  if (op.attrs.Has("epsilon") && op.attrs.GetFloat("epsilon") <= 0) {
    throw GraphError("epsilon must be positive");
  }
}

std::vector<Shape> LayerNormShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 2, 3);
  ExpectFloat(g, op, 0);
  const Shape& x = InputShape(g, op, 0);
  const size_t axis = Axis(op.attrs.Has("axis") ? op.attrs.GetInt("axis") : -1, x.size());
  const Shape normalized(x.begin() + static_cast<std::ptrdiff_t>(axis), x.end());
  for (size_t i = 1; i < op.inputs.size(); ++i) {
    if (InputShape(g, op, i) != normalized) {
      throw GraphError(fmt::format("'{}' {} must have the normalised shape {}",
                                   g.tensor(op.inputs[i]).name, ToString(InputShape(g, op, i)),
                                   ToString(normalized)));
    }
  }
  ExpectPositiveEpsilon(op);
  return {x};
}

std::vector<Shape> BatchNormShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 3, 3);
  ExpectFloat(g, op, 0);
  const Shape& x = InputShape(g, op, 0);
  if (x.size() < 2) throw GraphError("batch norm needs an input of rank 2 or more");
  for (size_t i = 1; i < 3; ++i) {
    if (InputShape(g, op, i) != Shape{x[1]}) {
      throw GraphError(fmt::format("'{}' must have shape [{}]", g.tensor(op.inputs[i]).name, x[1]));
    }
  }
  ExpectPositiveEpsilon(op);
  return {x};
}

std::vector<Shape> GatherShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 2, 2);
  ExpectFloat(g, op, 0);
  const Tensor& indices = g.tensor(op.inputs[1]);
  if (indices.dtype != DType::kInt64) {
    throw GraphError(fmt::format("indices '{}' must be int64", indices.name));
  }
  const Shape& table = InputShape(g, op, 0);
  if (table.empty()) throw GraphError("cannot gather from a scalar");
  Shape out = indices.shape;
  out.insert(out.end(), table.begin() + 1, table.end());
  return {out};
}

std::vector<Shape> LstmCellShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 5, 6);
  for (size_t i = 0; i < 5; ++i) ExpectRank(g, op, i, 2);
  const Shape& x = InputShape(g, op, 0);
  const Shape& h = InputShape(g, op, 1);
  const int64_t batch = x[0], hidden = h[1];
  auto expect = [&](size_t index, const Shape& shape) {
    if (InputShape(g, op, index) != shape) {
      throw GraphError(fmt::format("'{}' {} must have shape {}", g.tensor(op.inputs[index]).name,
                                   ToString(InputShape(g, op, index)), ToString(shape)));
    }
  };
  expect(1, {batch, hidden});
  expect(2, {batch, hidden});
  expect(3, {4 * hidden, x[1]});
  expect(4, {4 * hidden, hidden});
  if (op.inputs.size() == 6) expect(5, {4 * hidden});
  return {{batch, hidden}, {batch, hidden}};
}

double LstmCellFlops(const Graph& g, const Op& op) {
  const Shape& x = InputShape(g, op, 0);
  const Shape& h = InputShape(g, op, 1);
  const double batch = static_cast<double>(x[0]), hidden = static_cast<double>(h[1]);
  // Two matmuls into 4H gates, then about 10 elementwise operations per hidden unit.
  return 2 * batch * 4 * hidden * static_cast<double>(x[1] + h[1]) + 10 * batch * hidden;
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

// FLOPs per output element (elementwise ops, where the transcendental ones cost a few).
FlopRule PerOutput(double flops) {
  return [flops](const Graph& g, const Op& op) { return flops * OutputNumelOf(g, op); };
}
FlopRule PerInput(double flops) {
  return [flops](const Graph& g, const Op& op) { return flops * Numel(InputShape(g, op, 0)); };
}
const FlopRule kFree = [](const Graph&, const Op&) { return 0.0; };

double PoolFlops(const Graph& g, const Op& op) {
  auto [k_h, k_w] = Pair(op, "kernel");
  return OutputNumelOf(g, op) * static_cast<double>(k_h * k_w);
}

const std::unordered_map<std::string, OpTypeInfo>& Registry() {
  static const auto* registry = new std::unordered_map<std::string, OpTypeInfo>{
      {op_types::kConv2d, {ConvShapes, ConvFlops}},
      {op_types::kRelu, {ElementwiseShapes, PerOutput(1)}},
      {op_types::kSigmoid, {ElementwiseShapes, PerOutput(4)}},
      {op_types::kTanh, {ElementwiseShapes, PerOutput(4)}},
      {op_types::kGelu, {ElementwiseShapes, PerOutput(8)}},
      {op_types::kErf, {ElementwiseShapes, PerOutput(4)}},
      {op_types::kSqrt, {ElementwiseShapes, PerOutput(1)}},
      {op_types::kExp, {ElementwiseShapes, PerOutput(1)}},
      {op_types::kNeg, {ElementwiseShapes, PerOutput(1)}},
      {op_types::kIdentity, {ElementwiseShapes, kFree}},
      {op_types::kAvgPool2d, {PoolShapes, PoolFlops}},
      {op_types::kMaxPool2d, {PoolShapes, PoolFlops}},
      {op_types::kGlobalAvgPool2d, {GlobalPoolShapes, PerInput(1)}},
      {op_types::kFlatten, {FlattenShapes, kFree}},
      {op_types::kLinear, {LinearShapes, LinearFlops}},
      {op_types::kMatMul, {MatMulShapes, MatMulFlops}},
      {op_types::kAdd, {BinaryShapes, PerOutput(1)}},
      {op_types::kSub, {BinaryShapes, PerOutput(1)}},
      {op_types::kMul, {BinaryShapes, PerOutput(1)}},
      {op_types::kDiv, {BinaryShapes, PerOutput(1)}},
      {op_types::kPow, {BinaryShapes, PerOutput(4)}},
      {op_types::kAddN,
       {AddNShapes,
        [](const Graph& g, const Op& op) {
          return static_cast<double>(op.inputs.size() - 1) * OutputNumelOf(g, op);
        }}},
      {op_types::kConstant, {ConstantShapes, kFree}},
      // Data movement: no arithmetic, their cost is the bytes they write.
      {op_types::kReshape, {ReshapeShapes, kFree}},
      {op_types::kTranspose, {TransposeShapes, kFree}},
      {op_types::kConcat, {ConcatShapes, kFree}},
      {op_types::kSplit, {SplitShapes, kFree}},
      {op_types::kSlice, {SliceShapes, kFree}},
      {op_types::kGather, {GatherShapes, kFree}},
      // max, subtract, exp, sum, divide.
      {op_types::kSoftmax, {SoftmaxShapes, PerOutput(5)}},
      {op_types::kReduceMean, {ReduceMeanShapes, PerInput(1)}},
      // mean, variance, normalise, scale and shift.
      {op_types::kLayerNorm, {LayerNormShapes, PerOutput(8)}},
      {op_types::kBatchNorm, {BatchNormShapes, PerOutput(8)}},
      {op_types::kLstmCell, {LstmCellShapes, LstmCellFlops}},
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
