// ONNX ops that turn indices into tensors and back: OneHot (folded when its indices are known at
// load time, otherwise comparisons against the class numbers, with no gradient to the indices) and
// NonZero (known inputs only: its output's extent is the count of non-zero elements, which the
// IR's static shapes cannot hold for a runtime tensor).
#include <fmt/format.h>

#include <cmath>

#include "graph/onnx/loader.h"
#include "graph/ops.h"

namespace placer::graph::onnx {
namespace {

namespace t = op_types;

// OneHot's depth: a scalar or one-element tensor, of any numeric type (floats truncated).
int64_t OneHotDepth(const Known& depth) {
  if (depth.size() != 1) throw GraphError("depth must hold one element");
  const double d = depth.F(0);
  if (!(d >= 1 && d <= static_cast<double>(kMaxLoadTimeElements))) {
    throw GraphError(fmt::format("depth {} must be positive", d));
  }
  return static_cast<int64_t>(d);
}

// The class an index selects (negative indices count from the end), or -1 when out of range:
// such an index gives a row of off values, as ONNX defines.
int64_t OneHotClass(double index, int64_t depth) {
  if (!std::isfinite(index)) return -1;
  const auto i = static_cast<int64_t>(index);
  if (i < -depth || i >= depth) return -1;
  return i < 0 ? i + depth : i;
}

std::vector<Known> FoldOneHot(Loader& l, const std::vector<KnownPtr>& in) {
  const Known& indices = Arg(in, 0);
  const int64_t depth = OneHotDepth(Arg(in, 1));
  const Known& values = Arg(in, 2);
  if (values.size() != 2) throw GraphError("values must hold [off, on]");
  const int64_t axis = NormalizeAxis(l.AttrInt("axis", -1), indices.shape.size() + 1);
  Shape shape = indices.shape;
  shape.insert(shape.begin() + axis, depth);
  const std::vector<int64_t> strides = Strides(indices.shape);
  Known r = Empty(values.type, shape);
  ForEachIndex(shape, [&](int64_t flat, const std::vector<int64_t>& index) {
    int64_t at = 0;
    for (size_t d = 0, k = 0; d < index.size(); ++d) {
      if (static_cast<int64_t>(d) != axis) at += index[d] * strides[k++];
    }
    const bool on = OneHotClass(indices.F(at), depth) == index[static_cast<size_t>(axis)];
    CopyElement(values, on ? 1 : 0, r, flat);
  });
  return One(std::move(r));
}

// Runtime indices: the output is `on` where the index (unsqueezed at `axis`) equals the class
// number c along `axis` or c - depth (its negative spelling), `off` elsewhere.
void ConvertOneHot(Loader& l) {
  const int64_t depth = OneHotDepth(l.KnownData(1, "OneHot's depth, the output's extent"));
  const Shape in = l.InShape(0);
  const int64_t axis = NormalizeAxis(l.AttrInt("axis", -1), in.size() + 1);
  if (l.InShape(2) != Shape{2}) throw GraphError("values must be [off, on]");
  TensorId indices = l.Tensor(0, Role::kConstant);
  if (l.InDType(0) != DType::kInt64) {
    Attributes cast;
    cast.Set("to", std::string("int64"));
    indices = l.Sub("indices", t::kCast, {indices}, std::move(cast));
  }
  Shape unsqueezed = in;
  unsqueezed.insert(unsqueezed.begin() + axis, 1);
  indices = l.ReshapeTo("unsqueeze", indices, unsqueezed);
  // The class numbers along `axis`, broadcast over the axes after it.
  Shape classes(in.size() + 1 - static_cast<size_t>(axis), 1);
  classes[0] = depth;
  std::vector<int64_t> positive, negative;
  for (int64_t c = 0; c < depth; ++c) {
    positive.push_back(c);
    negative.push_back(c - depth);
  }
  const std::string base = l.NodeBase();
  const TensorId is_class = l.Sub("is_class", t::kEqual,
                                  {indices, l.IntConstantOp(base + "/classes", classes, positive)});
  const TensorId is_negative_class =
      l.Sub("is_negative_class", t::kEqual,
            {indices, l.IntConstantOp(base + "/negative_classes", classes, negative)});
  const TensorId mask = l.Sub("mask", t::kOr, {is_class, is_negative_class});
  const TensorId values = l.Tensor(2, Role::kConstant);
  l.EmitOutput(t::kWhere,
               {mask, l.SliceAxis("on", values, 0, 1, 2), l.SliceAxis("off", values, 0, 0, 1)});
}

// NonZero of a known value: the indices of its non-zero elements, [rank, count], in row-major
// order.
void ConvertNonZero(Loader& l) {
  const Known& x = l.KnownData(
      0,
      "NonZero's input: how many elements are non-zero decides the output's shape, so it is "
      "data-dependent unless known when the model is loaded");
  std::vector<int64_t> found;
  ForEachIndex(x.shape, [&](int64_t flat, const std::vector<int64_t>& index) {
    if (x.F(flat) != 0) found.insert(found.end(), index.begin(), index.end());
  });
  const auto rank = static_cast<int64_t>(x.shape.size());
  const int64_t count =
      rank == 0 ? (x.F(0) != 0 ? 1 : 0) : static_cast<int64_t>(found.size()) / rank;
  // Row r of the output holds every found index's coordinate r.
  Known r = Empty(kInt64, {rank, count});
  for (int64_t e = 0; e < count; ++e) {
    for (int64_t d = 0; d < rank; ++d) {
      StoreInt(r, d * count + e, found[static_cast<size_t>(e * rank + d)]);
    }
  }
  l.DefineKnown(0, std::move(r));
}

}  // namespace

void AddIndexOps(OpTable& table) {
  table["OneHot"] = {FoldOneHot, ConvertOneHot};
  table["NonZero"] = {nullptr, ConvertNonZero};
}

}  // namespace placer::graph::onnx
