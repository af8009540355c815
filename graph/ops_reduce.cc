// Reductions and the ops that pick along an axis: Reduce*, ArgMax/ArgMin, TopK, Softmax,
// LogSoftmax and Hardmax.
#include <fmt/format.h>

#include "graph/op_rules.h"
#include "graph/ops.h"

namespace placer::graph {
namespace {

// The input's shape without (or with extent 1 at) the reduced axes.
Shape Reduced(const Shape& x, const std::vector<int64_t>& axes, bool keep) {
  std::vector<bool> reduced(x.size(), false);
  for (int64_t a : axes) {
    const size_t d = Axis(a, x.size());
    if (reduced[d]) throw GraphError(fmt::format("axis {} is reduced twice", d));
    reduced[d] = true;
  }
  Shape out;
  for (size_t d = 0; d < x.size(); ++d) {
    if (!reduced[d]) {
      out.push_back(x[d]);
    } else if (keep) {
      out.push_back(1);
    }
  }
  return out;
}

bool KeepDims(const Op& op) {
  return !op.attrs.Has("keepdims") || op.attrs.GetInt("keepdims") != 0;
}

std::vector<Shape> ReduceShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 1, 1);
  const auto& axes = op.attrs.GetInts("axes");
  if (axes.empty()) throw GraphError("axes must not be empty");
  return {Reduced(InputShape(g, op, 0), axes, KeepDims(op))};
}

std::vector<Shape> FloatReduceShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 1, 1);
  ExpectFloat(g, op, 0);
  return ReduceShapes(g, op);
}

std::vector<Shape> ArgShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 1, 1);
  const Shape& x = InputShape(g, op, 0);
  const size_t axis = Axis(op.attrs.GetInt("axis"), x.size());
  if (x[axis] == 0) throw GraphError("cannot pick from an empty axis");
  return {Reduced(x, {static_cast<int64_t>(axis)}, KeepDims(op))};
}

std::vector<Shape> TopKShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 1, 1);
  Shape out = InputShape(g, op, 0);
  const size_t axis = Axis(op.attrs.GetInt("axis"), out.size());
  const int64_t k = op.attrs.GetInt("k");
  if (k < 0 || k > out[axis]) {
    throw GraphError(fmt::format("k {} is not within the axis' extent {}", k, out[axis]));
  }
  out[axis] = k;
  return {out, out};
}

std::vector<Shape> SoftmaxShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 1, 1);
  ExpectFloat(g, op, 0);
  Axis(op.attrs.GetInt("axis"), InputShape(g, op, 0).size());
  return {InputShape(g, op, 0)};
}

}  // namespace

void AddReduceTypes(OpTable& table) {
  namespace t = op_types;
  for (const char* name : {t::kReduceSum, t::kReduceMax, t::kReduceMin, t::kReduceProd}) {
    table[name] = {ReduceShapes, PerInput(1), OutputDType::kLikeInput0};
  }
  table[t::kReduceMean] = {FloatReduceShapes, PerInput(1)};
  table[t::kReduceL1] = {FloatReduceShapes, PerInput(2)};
  table[t::kReduceL2] = {FloatReduceShapes, PerInput(2)};
  table[t::kReduceSumSquare] = {FloatReduceShapes, PerInput(2)};
  table[t::kReduceLogSum] = {FloatReduceShapes, PerInput(1)};
  table[t::kReduceLogSumExp] = {FloatReduceShapes, PerInput(3)};
  table[t::kArgMax] = {ArgShapes, PerInput(1), OutputDType::kInt64};
  table[t::kArgMin] = {ArgShapes, PerInput(1), OutputDType::kInt64};
  // A sort along the axis, about log2(extent) comparisons per element; 8 is typical.
  table[t::kTopK] = {TopKShapes, PerInput(8), OutputDType::kTopK};
  // max, subtract, exp, sum, divide (log-softmax: log instead of divide).
  table[t::kSoftmax] = {SoftmaxShapes, PerOutput(5)};
  table[t::kLogSoftmax] = {SoftmaxShapes, PerOutput(5)};
  table[t::kHardmax] = {SoftmaxShapes, PerOutput(2)};
}

}  // namespace placer::graph
