// ONNX ops whose results are known at load time: Constant, ConstantOfShape, Range, Shape, Size,
// EyeLike and the window functions (HannWindow, HammingWindow, BlackmanWindow).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "graph/onnx/loader.h"

namespace placer::graph::onnx {
namespace {

void ConvertConstant(Loader& l) {
  Known k;
  if (std::optional<Known> value = l.AttrTensor("value")) {
    k = std::move(*value);
    if (!k.has_data) throw GraphError("the constant has no data");
  } else if (l.HasAttr("value_float")) {
    k.type = kFloat;
    k.f = {l.AttrFloat("value_float", 0)};
  } else if (l.HasAttr("value_floats")) {
    k.type = kFloat;
    k.f = *l.AttrFloats("value_floats");
    k.shape = {static_cast<int64_t>(k.f.size())};
  } else if (l.HasAttr("value_int")) {
    k = Ints({}, {l.AttrInt("value_int", 0)});
  } else if (l.HasAttr("value_ints")) {
    const std::vector<int64_t> values = *l.AttrInts("value_ints");
    k = Ints({static_cast<int64_t>(values.size())}, values);
  } else {
    l.Unsupported("a Constant without a numeric value");
  }
  l.DefineKnown(0, std::move(k));
}

void ConvertConstantOfShape(Loader& l) {
  const std::vector<int64_t> shape = l.KnownInts(0, "shape");
  Known fill = Empty(kFloat, {1});
  if (std::optional<Known> value = l.AttrTensor("value")) fill = std::move(*value);
  if (!fill.has_data || fill.size() != 1) throw GraphError("value must hold one element");
  Known r = Empty(fill.type, Shape(shape.begin(), shape.end()));
  for (int64_t e = 0; e < r.size(); ++e) CopyElement(fill, 0, r, e);
  l.DefineKnown(0, std::move(r));
}

void ConvertRange(Loader& l) {
  const char* names[3] = {"start", "limit", "delta"};
  for (size_t k = 0; k < 3; ++k) {
    if (l.KnownFloats(k, names[k]).size() != 1) throw GraphError("Range takes three scalars");
  }
  const Known& s = *l.In(0).known;
  const double step = l.In(2).known->F(0);
  if (step == 0) throw GraphError("Range delta is 0");
  const double count = std::max(0.0, std::ceil((l.In(1).known->F(0) - s.F(0)) / step));
  if (!(count <= static_cast<double>(kMaxLoadTimeElements))) {
    throw GraphError("Range is too long to compute at load time");
  }
  const auto n = static_cast<int64_t>(count);
  Known r = Empty(s.type, {n});
  for (int64_t e = 0; e < n; ++e) Store(r, e, s.F(0) + static_cast<double>(e) * step);
  l.DefineKnown(0, std::move(r));
}

void ConvertShape(Loader& l) {
  const Shape shape = l.InShape(0);
  if (l.type() == "Size") {
    l.DefineKnown(0, Ints({}, {NumElements(shape)}));
    return;
  }
  const auto rank = static_cast<int64_t>(shape.size());
  int64_t start = l.AttrInt("start", 0), end = l.AttrInt("end", rank);
  start = std::clamp<int64_t>(start < 0 ? start + rank : start, 0, rank);
  end = std::clamp<int64_t>(end < 0 ? end + rank : end, 0, rank);
  std::vector<int64_t> dims(shape.begin() + start, shape.begin() + std::max(start, end));
  l.DefineKnown(0, Ints({static_cast<int64_t>(dims.size())}, dims));
}

// Ones on the diagonal k of a matrix of the input's shape.
void ConvertEyeLike(Loader& l) {
  const Shape shape = l.InShape(0);
  if (shape.size() != 2) throw GraphError("EyeLike takes a matrix");
  const int type = l.HasAttr("dtype") ? static_cast<int>(l.AttrInt("dtype", kFloat))
                                      : (l.InDType(0) == DType::kFloat32 ? kFloat : kInt64);
  if (!IsFloatType(type) && !IsIntType(type)) l.Unsupported("EyeLike of " + TypeName(type));
  const int64_t k = l.AttrInt("k", 0);
  Known r = Empty(type, shape);
  for (int64_t row = 0; row < shape[0]; ++row) {
    const int64_t column = row + k;
    if (column >= 0 && column < shape[1]) StoreInt(r, row * shape[1] + column, 1);
  }
  l.DefineKnown(0, std::move(r));
}

// The window functions of ONNX's signal ops: a periodic window of `size` divides by size, a
// symmetric one by size - 1.
void ConvertWindow(Loader& l) {
  const int64_t size = l.KnownInts(0, "size").at(0);
  if (size < 0 || size > kMaxLoadTimeElements) throw GraphError("window size out of range");
  const double n = static_cast<double>(l.AttrInt("periodic", 1) != 0 ? size : size - 1);
  const int type = static_cast<int>(l.AttrInt("output_datatype", kFloat));
  if (!IsFloatType(type) && !IsIntType(type)) l.Unsupported("a window of " + TypeName(type));
  Known r = Empty(type, {size});
  for (int64_t e = 0; e < size; ++e) {
    const double x = 2 * M_PI * static_cast<double>(e) / n;
    double v;
    if (l.type() == "HannWindow") {
      v = 0.5 - 0.5 * std::cos(x);
    } else if (l.type() == "HammingWindow") {
      v = 25.0 / 46.0 - 21.0 / 46.0 * std::cos(x);
    } else {
      v = 0.42 - 0.5 * std::cos(x) + 0.08 * std::cos(2 * x);
    }
    Store(r, e, v);
  }
  l.DefineKnown(0, std::move(r));
}

}  // namespace

void AddConstantOps(OpTable& table) {
  table["Constant"] = {nullptr, ConvertConstant};
  table["ConstantOfShape"] = {nullptr, ConvertConstantOfShape};
  table["Range"] = {nullptr, ConvertRange};
  table["Shape"] = {nullptr, ConvertShape};
  table["Size"] = {nullptr, ConvertShape};
  table["EyeLike"] = {nullptr, ConvertEyeLike};
  for (const char* window : {"HannWindow", "HammingWindow", "BlackmanWindow"}) {
    table[window] = {nullptr, ConvertWindow};
  }
}

}  // namespace placer::graph::onnx
