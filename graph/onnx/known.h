// Values the ONNX loader knows at load time (initializers, Constant nodes, shapes, and anything
// computed from those alone), and the arithmetic that folds ONNX nodes over them. Free of the
// generated protobuf classes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "graph/ir.h"

namespace placer::graph::onnx {

// ONNX's TensorProto.DataType numbers (a stable part of the format; known.cc checks them against
// the generated enum).
enum ElemType : int {
  kFloat = 1,
  kUint8 = 2,
  kInt8 = 3,
  kUint16 = 4,
  kInt16 = 5,
  kInt32 = 6,
  kInt64 = 7,
  kString = 8,
  kBool = 9,
  kFloat16 = 10,
  kDouble = 11,
  kUint32 = 12,
  kUint64 = 13,
  kBfloat16 = 16,
};

bool IsFloatType(int type);
bool IsIntType(int type);
std::string TypeName(int type);
// The IR type a value of ONNX type `type` is computed in: float32 for floating types, int64 for
// integers and bool (0/1).
DType IrType(int type);

// Values computed at load time are shapes, masks and small constants: anything larger comes from
// a malformed file, and is refused before allocating.
inline constexpr int64_t kMaxLoadTimeElements = int64_t{1} << 24;
// Likewise for the data of IR Constant ops the loader makes (zeros for Expand and LSTM states).
inline constexpr int64_t kMaxConstantElements = int64_t{1} << 26;

struct Known {
  int type = kFloat;
  Shape shape;
  std::vector<double> f;   // floating types
  std::vector<int64_t> i;  // integer types and bool
  bool has_data = true;    // false: an initializer whose data was stripped (dims only)
  // Float initializers with more than one element are the model's weights: they become trainable
  // parameters, and nothing computed from them is folded (training must see the computation).
  bool trainable = false;
  std::string name;  // the ONNX value it was made as: names its parameter or Constant op

  bool is_float() const { return IsFloatType(type); }
  int64_t size() const { return NumElements(shape); }
  double F(int64_t k) const {
    return is_float() ? f[static_cast<size_t>(k)] : static_cast<double>(i[static_cast<size_t>(k)]);
  }
  int64_t I(int64_t k) const;
};
using KnownPtr = std::shared_ptr<const Known>;

// A value of `shape` filled with zeros; refuses shapes beyond kMaxLoadTimeElements.
Known Empty(int type, Shape shape);
Known Ints(Shape shape, std::vector<int64_t> values, int type = kInt64);
// Element `at` of k set from a double (rounded to float32 unless k is double; integers must fit)
// or from an integer.
void Store(Known& k, int64_t at, double value);
void StoreInt(Known& k, int64_t at, int64_t value);
// The integer a Cast of the float `value` to integer type `type` gives, as PyTorch computes it on
// x86 (and ONNX Runtime likewise): truncated toward zero, and NaN or a value out of the type's
// range gives the type's minimum (the "integer indefinite" of cvttsd2si: -inf, +inf and 1e30 give
// INT64_MIN as int64 and INT32_MIN as int32). Types narrower than int32 convert through int32 and
// wrap, as PyTorch's casts do; uint32 and uint64, which PyTorch converts otherwise, must hold the
// value (GraphError if not).
int64_t CastFloatToInt(double value, int type);
// Copies element `from` of `src` to element `to` of `dst` (same type).
void CopyElement(const Known& src, int64_t from, Known& dst, int64_t to);

// Integer arithmetic at load time: an overflow means a malformed file, not a wrapped value.
[[noreturn]] void Overflow();

std::vector<int64_t> Strides(const Shape& shape);
int64_t Dot(const std::vector<int64_t>& index, const std::vector<int64_t>& strides);
Shape BroadcastShapes(const Shape& a, const Shape& b);
// Strides of a tensor of shape `in` read as the broadcast shape `out` (0 along broadcast axes).
std::vector<int64_t> BroadcastStrides(const Shape& in, const Shape& out);
// An axis in [-rank, rank) made non-negative.
int64_t NormalizeAxis(int64_t axis, size_t rank);
int64_t Product(const Shape& shape, size_t from, size_t to);
// ONNX Reshape's target: 0 copies the input's extent (unless allowzero), one -1 is inferred.
Shape ResolveReshape(const Shape& in, const std::vector<int64_t>& target, bool allowzero);

// One axis of an ONNX Slice, resolved against the extent: elements start, start+step, ... before
// end.
struct SliceRange {
  int64_t start = 0, end = 0, step = 1, count = 0;
};
SliceRange ResolveSlice(int64_t start, int64_t end, int64_t step, int64_t extent);

// Calls f(flat, index) for every element of `shape`, in row-major order.
template <typename F>
void ForEachIndex(const Shape& shape, F&& f) {
  const int64_t n = NumElements(shape);
  std::vector<int64_t> index(shape.size(), 0);
  for (int64_t flat = 0; flat < n; ++flat) {
    f(flat, index);
    for (size_t d = shape.size(); d-- > 0;) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
}

// f over every element, computed in double, stored as `out_type`.
template <typename F>
Known MapFold(const Known& x, int out_type, F f) {
  Known r = Empty(out_type, x.shape);
  for (int64_t e = 0; e < x.size(); ++e) Store(r, e, f(x.F(e)));
  return r;
}

// Elementwise over broadcast inputs; `ff` gets doubles when either input is float, `fi` int64s
// when both are integers.
template <typename FF, typename FI>
Known BinaryFold(const Known& a, const Known& b, int out_type, FF ff, FI fi) {
  const Shape out = BroadcastShapes(a.shape, b.shape);
  const auto sa = BroadcastStrides(a.shape, out), sb = BroadcastStrides(b.shape, out);
  Known r = Empty(out_type, out);
  const bool floats = a.is_float() || b.is_float();
  ForEachIndex(out, [&](int64_t flat, const std::vector<int64_t>& index) {
    const int64_t pa = Dot(index, sa), pb = Dot(index, sb);
    if (floats) {
      Store(r, flat, static_cast<double>(ff(a.F(pa), b.F(pb))));
    } else {
      StoreInt(r, flat, static_cast<int64_t>(fi(a.I(pa), b.I(pb))));
    }
  });
  return r;
}

// Copies elements of `src` into a new value of `shape`: element e comes from src[from(index)].
template <typename F>
Known Rearrange(const Known& src, const Shape& shape, F from) {
  Known r = Empty(src.type, shape);
  ForEachIndex(shape, [&](int64_t flat, const std::vector<int64_t>& index) {
    CopyElement(src, from(index), r, flat);
  });
  return r;
}

// The same elements under another shape.
Known Reshaped(const Known& src, Shape shape);

}  // namespace placer::graph::onnx
