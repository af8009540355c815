// ONNX reductions (ReduceMean, ReduceSum, ReduceMax, ReduceMin, ReduceProd, ReduceL1, ReduceL2,
// ReduceLogSum, ReduceLogSumExp, ReduceSumSquare) and the ops that pick along an axis: ArgMax,
// ArgMin, TopK, Softmax, LogSoftmax, Hardmax.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "graph/onnx/loader.h"
#include "graph/ops.h"

namespace placer::graph::onnx {
namespace {

namespace t = op_types;

// The reduced axes, or nullopt for "none: the input passes through" (noop_with_empty_axes).
// Axes are an attribute until opset 18 (ReduceSum: 13), an input from then on.
std::optional<std::vector<int64_t>> ReduceAxes(Loader& l, size_t rank) {
  const int64_t axes_input_from = l.type() == "ReduceSum" ? 13 : 18;
  std::optional<std::vector<int64_t>> axes;
  if (l.opset() >= axes_input_from) {
    if (l.HasInput(1)) axes = l.KnownInts(1, "axes");
  } else {
    axes = l.AttrInts("axes");
  }
  if (!axes || axes->empty()) {
    if (l.AttrInt("noop_with_empty_axes", 0) != 0) return std::nullopt;
    axes = std::vector<int64_t>();
    for (size_t d = 0; d < rank; ++d) axes->push_back(static_cast<int64_t>(d));
  }
  for (int64_t& a : *axes) a = NormalizeAxis(a, rank);
  return axes;
}

// How a reduction accumulates its elements at load time: start, add one element, finish with
// the element count.
struct Accumulator {
  double start;
  double (*add)(double, double);
  double (*finish)(double, double);
};

Accumulator AccumulatorOf(const std::string& type) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  auto keep = [](double acc, double) { return acc; };
  if (type == "ReduceSum") return {0, [](double a, double v) { return a + v; }, keep};
  if (type == "ReduceMean") {
    return {0, [](double a, double v) { return a + v; }, [](double a, double n) { return a / n; }};
  }
  if (type == "ReduceMax") return {-inf, [](double a, double v) { return std::max(a, v); }, keep};
  if (type == "ReduceMin") return {inf, [](double a, double v) { return std::min(a, v); }, keep};
  if (type == "ReduceProd") return {1, [](double a, double v) { return a * v; }, keep};
  if (type == "ReduceL1") return {0, [](double a, double v) { return a + std::abs(v); }, keep};
  if (type == "ReduceL2") {
    return {0, [](double a, double v) { return a + v * v; },
            [](double a, double) { return std::sqrt(a); }};
  }
  if (type == "ReduceSumSquare") return {0, [](double a, double v) { return a + v * v; }, keep};
  if (type == "ReduceLogSum") {
    return {0, [](double a, double v) { return a + v; },
            [](double a, double) { return std::log(a); }};
  }
  return {0, [](double a, double v) { return a + std::exp(v); },  // ReduceLogSumExp
          [](double a, double) { return std::log(a); }};
}

std::vector<Known> FoldReduce(Loader& l, const std::vector<KnownPtr>& in) {
  const Known& x = *in.at(0);
  const std::optional<std::vector<int64_t>> axes = ReduceAxes(l, x.shape.size());
  if (!axes) return {x};
  const bool keep = l.AttrInt("keepdims", 1) != 0;
  std::vector<bool> reduced(x.shape.size(), false);
  for (int64_t a : *axes) reduced[static_cast<size_t>(a)] = true;
  Shape kept_shape;  // with extent 1 on reduced axes
  Shape out;
  for (size_t d = 0; d < x.shape.size(); ++d) {
    kept_shape.push_back(reduced[d] ? 1 : x.shape[d]);
    if (!reduced[d] || keep) out.push_back(reduced[d] ? 1 : x.shape[d]);
  }
  const Accumulator acc = AccumulatorOf(l.type());
  std::vector<double> sums(static_cast<size_t>(NumElements(kept_shape)), acc.start);
  const auto strides = Strides(kept_shape);
  ForEachIndex(x.shape, [&](int64_t flat, const std::vector<int64_t>& index) {
    int64_t at = 0;
    for (size_t d = 0; d < index.size(); ++d) at += reduced[d] ? 0 : index[d] * strides[d];
    sums[static_cast<size_t>(at)] = acc.add(sums[static_cast<size_t>(at)], x.F(flat));
  });
  const double count =
      static_cast<double>(x.size()) / static_cast<double>(std::max<int64_t>(1, sums.size()));
  Known r = Empty(x.type, out);
  for (size_t e = 0; e < sums.size(); ++e) {
    Store(r, static_cast<int64_t>(e), acc.finish(sums[e], count));
  }
  return {r};
}

void ConvertReduce(Loader& l, const char* ir) {
  const Shape x = l.InShape(0);
  const std::optional<std::vector<int64_t>> axes = ReduceAxes(l, x.size());
  if (!axes || axes->empty()) {  // nothing to reduce (a scalar, or noop_with_empty_axes)
    l.EmitOutput(t::kIdentity, {l.Tensor(0)});
    return;
  }
  Attributes attrs;
  attrs.Set("axes", *axes);
  attrs.Set("keepdims", l.AttrInt("keepdims", 1));
  l.EmitOutput(ir, {l.Tensor(0)}, std::move(attrs));
}

void ConvertArg(Loader& l, const char* ir) {
  Attributes attrs;
  attrs.Set("axis", l.AttrInt("axis", 0));
  attrs.Set("keepdims", l.AttrInt("keepdims", 1));
  attrs.Set("select_last_index", l.AttrInt("select_last_index", 0));
  l.EmitOutput(ir, {l.Tensor(0)}, std::move(attrs));
}

void ConvertTopK(Loader& l) {
  Attributes attrs;
  attrs.Set("k", l.opset() >= 10 ? l.KnownInts(1, "k").at(0) : l.AttrInt("k", 0));
  attrs.Set("axis", l.AttrInt("axis", -1));
  attrs.Set("largest", l.AttrInt("largest", 1));
  // sorted = 0 leaves the order to the implementation: sorted is one of them.
  std::vector<std::string> names = {l.OutputName(0), l.NumOutputs() > 1 ? l.OutputName(1) : ""};
  for (size_t k = 0; k < 2; ++k) {
    if (names[k].empty()) names[k] = fmt::format("{}/unused{}", l.NodeBase(), k);
  }
  std::vector<TensorId> out =
      l.Emit(l.NodeBase(), t::kTopK, {l.Tensor(0)}, std::move(attrs), names);
  for (size_t k = 0; k < std::min<size_t>(2, l.NumOutputs()); ++k) {
    if (!l.OutputName(k).empty()) l.Define(k, out[k]);
  }
}

// Before opset 13, Softmax, LogSoftmax and Hardmax treat the input as a matrix
// [prod(dims before axis), rest].
void ConvertSoftmax(Loader& l, const char* ir) {
  const Shape x = l.InShape(0);
  const int64_t axis = NormalizeAxis(l.AttrInt("axis", l.opset() >= 13 ? -1 : 1), x.size());
  Attributes attrs;
  if (l.opset() >= 13 || axis == static_cast<int64_t>(x.size()) - 1) {
    attrs.Set("axis", axis);
    l.EmitOutput(ir, {l.Tensor(0)}, std::move(attrs));
    return;
  }
  const auto a = static_cast<size_t>(axis);
  TensorId flat =
      l.ReshapeTo("as_matrix", l.Tensor(0), {Product(x, 0, a), Product(x, a, x.size())});
  attrs.Set("axis", int64_t{1});
  TensorId y = l.Sub("softmax", ir, {flat}, std::move(attrs));
  l.Define(0, l.ReshapeTo("reshape", y, x, l.OutputName(0)));
}

}  // namespace

void AddReduceOps(OpTable& table) {
  const std::pair<const char*, const char*> reductions[] = {
      {"ReduceMean", t::kReduceMean},
      {"ReduceSum", t::kReduceSum},
      {"ReduceMax", t::kReduceMax},
      {"ReduceMin", t::kReduceMin},
      {"ReduceProd", t::kReduceProd},
      {"ReduceL1", t::kReduceL1},
      {"ReduceL2", t::kReduceL2},
      {"ReduceLogSum", t::kReduceLogSum},
      {"ReduceLogSumExp", t::kReduceLogSumExp},
      {"ReduceSumSquare", t::kReduceSumSquare},
  };
  for (const auto& [onnx, ir_type] : reductions) {
    const char* ir = ir_type;  // a structured binding cannot be captured before C++20 in clang 14
    table[onnx] = {FoldReduce, [ir](Loader& l) { ConvertReduce(l, ir); }};
  }
  table["ArgMax"] = {nullptr, [](Loader& l) { ConvertArg(l, t::kArgMax); }};
  table["ArgMin"] = {nullptr, [](Loader& l) { ConvertArg(l, t::kArgMin); }};
  table["TopK"] = {nullptr, ConvertTopK};
  table["Softmax"] = {nullptr, [](Loader& l) { ConvertSoftmax(l, t::kSoftmax); }};
  table["LogSoftmax"] = {nullptr, [](Loader& l) { ConvertSoftmax(l, t::kLogSoftmax); }};
  table["Hardmax"] = {nullptr, [](Loader& l) { ConvertSoftmax(l, t::kHardmax); }};
}

}  // namespace placer::graph::onnx
