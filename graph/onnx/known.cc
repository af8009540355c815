#include "graph/onnx/known.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "placer_onnx.pb.h"

namespace placer::graph::onnx {

namespace pb = ::placer::onnxpb;
// The numbers are the format's; the generated enum must agree.
constexpr bool Same(ElemType ours, pb::TensorProto_DataType theirs) {
  return static_cast<int>(ours) == static_cast<int>(theirs);
}
static_assert(Same(kFloat, pb::TensorProto_DataType_FLOAT) &&
              Same(kInt64, pb::TensorProto_DataType_INT64) &&
              Same(kBool, pb::TensorProto_DataType_BOOL) &&
              Same(kDouble, pb::TensorProto_DataType_DOUBLE) &&
              Same(kFloat16, pb::TensorProto_DataType_FLOAT16) &&
              Same(kBfloat16, pb::TensorProto_DataType_BFLOAT16) &&
              Same(kUint64, pb::TensorProto_DataType_UINT64) &&
              Same(kString, pb::TensorProto_DataType_STRING));

bool IsFloatType(int type) {
  return type == kFloat || type == kDouble || type == kFloat16 || type == kBfloat16;
}

bool IsIntType(int type) {
  switch (type) {
    case pb::TensorProto_DataType_UINT8:
    case pb::TensorProto_DataType_INT8:
    case pb::TensorProto_DataType_UINT16:
    case pb::TensorProto_DataType_INT16:
    case pb::TensorProto_DataType_INT32:
    case pb::TensorProto_DataType_INT64:
    case pb::TensorProto_DataType_BOOL:
    case pb::TensorProto_DataType_UINT32:
    case pb::TensorProto_DataType_UINT64:
      return true;
    default:
      return false;
  }
}

std::string TypeName(int type) {
  return pb::TensorProto_DataType_IsValid(type)
             ? pb::TensorProto_DataType_Name(static_cast<pb::TensorProto_DataType>(type))
             : fmt::format("type {}", type);
}

// Values are computed in double; float32 results are rounded to float32 after every operation so

DType IrType(int type) { return IsFloatType(type) ? DType::kFloat32 : DType::kInt64; }

namespace {

// Values are computed in double; float32 results are rounded to float32 after every operation so
// that a folded constant equals what a float32 kernel would have produced.
double Round(int type, double value) {
  return type == kDouble ? value : static_cast<double>(static_cast<float>(value));
}

}  // namespace

int64_t Known::I(int64_t k) const {
  if (!is_float()) return i[static_cast<size_t>(k)];
  const double v = f[static_cast<size_t>(k)];
  if (!(v >= -9223372036854775808.0 && v < 9223372036854775808.0)) {
    throw GraphError(fmt::format("{} does not fit an integer", v));
  }
  return static_cast<int64_t>(v);
}

Known Empty(int type, Shape shape) {
  if (NumElements(shape) > kMaxLoadTimeElements) {
    throw GraphError(
        fmt::format("a value of shape {} is too large to compute at load time", ToString(shape)));
  }
  Known k;
  k.type = type;
  k.shape = std::move(shape);
  if (k.is_float()) {
    k.f.assign(static_cast<size_t>(k.size()), 0.0);
  } else {
    k.i.assign(static_cast<size_t>(k.size()), 0);
  }
  return k;
}

Known Ints(Shape shape, std::vector<int64_t> values, int type) {
  Known k;
  k.type = type;
  k.shape = std::move(shape);
  k.i = std::move(values);
  return k;
}

void Store(Known& k, int64_t at, double value) {
  if (k.is_float()) {
    k.f[static_cast<size_t>(at)] = Round(k.type, value);
  } else {
    // 2^63 is exactly representable; anything outside [-2^63, 2^63) does not convert.
    if (!(value >= -9223372036854775808.0 && value < 9223372036854775808.0)) {
      throw GraphError(fmt::format("{} does not fit an integer", value));
    }
    k.i[static_cast<size_t>(at)] = static_cast<int64_t>(value);
  }
}

int64_t CastFloatToInt(double value, int type) {
  // Range checks on the truncated value; NaN fails every comparison.
  const double whole = std::trunc(value);
  if (type == kInt64) {
    // 2^63 is exactly representable; [-2^63, 2^63) converts.
    return whole >= -9223372036854775808.0 && whole < 9223372036854775808.0
               ? static_cast<int64_t>(whole)
               : std::numeric_limits<int64_t>::min();
  }
  if (type == kUint32 || type == kUint64) {
    const double limit = type == kUint32 ? 4294967296.0 : 9223372036854775808.0;
    if (!(whole >= 0 && whole < limit)) {
      throw GraphError(fmt::format("{} does not fit {}", value, TypeName(type)));
    }
    return static_cast<int64_t>(whole);
  }
  const int32_t as_int32 = whole >= -2147483648.0 && whole < 2147483648.0
                               ? static_cast<int32_t>(whole)
                               : std::numeric_limits<int32_t>::min();
  switch (type) {
    case kInt8:
      return static_cast<int8_t>(as_int32);
    case kUint8:
      return static_cast<uint8_t>(as_int32);
    case kInt16:
      return static_cast<int16_t>(as_int32);
    case kUint16:
      return static_cast<uint16_t>(as_int32);
    case kBool:
      return value != 0 ? 1 : 0;
    default:
      return as_int32;
  }
}

void StoreInt(Known& k, int64_t at, int64_t value) {
  if (k.is_float()) {
    k.f[static_cast<size_t>(at)] = Round(k.type, static_cast<double>(value));
  } else {
    k.i[static_cast<size_t>(at)] = value;
  }
}

// Copies element `from` of `src` to element `to` of `dst` (same type).
void CopyElement(const Known& src, int64_t from, Known& dst, int64_t to) {
  if (src.is_float()) {
    dst.f[static_cast<size_t>(to)] = src.f[static_cast<size_t>(from)];
  } else {
    dst.i[static_cast<size_t>(to)] = src.i[static_cast<size_t>(from)];
  }
}

std::vector<int64_t> Strides(const Shape& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) strides[d - 1] = strides[d] * shape[d];
  return strides;
}

int64_t Dot(const std::vector<int64_t>& index, const std::vector<int64_t>& strides) {
  int64_t at = 0;
  for (size_t d = 0; d < index.size(); ++d) at += index[d] * strides[d];
  return at;
}

Shape BroadcastShapes(const Shape& a, const Shape& b) {
  Shape out(std::max(a.size(), b.size()));
  for (size_t d = 0; d < out.size(); ++d) {
    const size_t pa = out.size() - a.size(), pb = out.size() - b.size();
    const int64_t da = d < pa ? 1 : a[d - pa], db = d < pb ? 1 : b[d - pb];
    if (da != db && da != 1 && db != 1) {
      throw GraphError(fmt::format("shapes {} and {} do not broadcast", ToString(a), ToString(b)));
    }
    out[d] = da == 1 ? db : da;
  }
  return out;
}

// Strides of a tensor of shape `in` read as the broadcast shape `out` (0 along broadcast axes).
std::vector<int64_t> BroadcastStrides(const Shape& in, const Shape& out) {
  std::vector<int64_t> strides(out.size(), 0);
  const std::vector<int64_t> own = Strides(in);
  const size_t pad = out.size() - in.size();
  for (size_t d = 0; d < in.size(); ++d) strides[pad + d] = in[d] == 1 ? 0 : own[d];
  return strides;
}

// An axis in [-rank, rank) made non-negative.
int64_t NormalizeAxis(int64_t axis, size_t rank) {
  const auto r = static_cast<int64_t>(rank);
  if (axis < -r || axis >= r) {
    throw GraphError(fmt::format("axis {} is out of range for rank {}", axis, rank));
  }
  return axis < 0 ? axis + r : axis;
}

int64_t Product(const Shape& shape, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t d = from; d < to; ++d) p *= shape[d];
  return p;
}

// ONNX Reshape's target: 0 copies the input's extent (unless allowzero), one -1 is inferred.
Shape ResolveReshape(const Shape& in, const std::vector<int64_t>& target, bool allowzero) {
  Shape out(target.begin(), target.end());
  int inferred = -1;
  int64_t product = 1;
  for (size_t d = 0; d < out.size(); ++d) {
    if (out[d] == 0 && !allowzero) {
      if (d >= in.size()) {
        throw GraphError(
            fmt::format("reshape target {} copies axis {} of {}, which has no such axis",
                        ToString(target), d, ToString(in)));
      }
      out[d] = in[d];
    }
    if (out[d] == -1) {
      if (inferred >= 0)
        throw GraphError(fmt::format("reshape target {} has two -1", ToString(target)));
      inferred = static_cast<int>(d);
    } else if (out[d] < 0) {
      throw GraphError(fmt::format("reshape target {} has a negative extent", ToString(target)));
    } else if (__builtin_mul_overflow(product, out[d], &product)) {
      throw GraphError(fmt::format("reshape target {} is too large", ToString(target)));
    }
  }
  const int64_t elements = NumElements(in);
  if (inferred >= 0) {
    if (product == 0 || elements % product != 0) {
      throw GraphError(fmt::format("cannot reshape {} to {}", ToString(in), ToString(target)));
    }
    out[static_cast<size_t>(inferred)] = elements / product;
  }
  if (NumElements(out) != elements) {
    throw GraphError(fmt::format("cannot reshape {} to {}", ToString(in), ToString(target)));
  }
  return out;
}

SliceRange ResolveSlice(int64_t start, int64_t end, int64_t step, int64_t extent) {
  if (step == 0) throw GraphError("slice step is 0");
  // A step beyond the extent takes one element either way; clamping it keeps the arithmetic below
  // from overflowing.
  step = std::clamp<int64_t>(step, -extent - 1, extent + 1);
  if (step == 0) step = 1;
  SliceRange r;
  r.step = step;
  auto wrap = [extent](int64_t i) { return i < 0 ? (i < -extent ? -1 - extent : i + extent) : i; };
  start = wrap(start);
  end = wrap(end);
  if (step > 0) {
    r.start = std::clamp<int64_t>(start, 0, extent);
    r.end = std::clamp<int64_t>(end, 0, extent);
    r.count = r.end > r.start ? (r.end - r.start + step - 1) / step : 0;
  } else {
    r.start = std::clamp<int64_t>(start, -1, extent - 1);
    r.end = std::clamp<int64_t>(end, -1, extent - 1);
    r.count = r.start > r.end ? (r.start - r.end - step - 1) / -step : 0;
  }
  return r;
}

[[noreturn]] void Overflow() {
  throw GraphError("integer overflow in a value computed at load time");
}

Known Reshaped(const Known& src, Shape shape) {
  Known r = src;
  r.shape = std::move(shape);
  r.trainable = false;
  return r;
}

}  // namespace placer::graph::onnx
