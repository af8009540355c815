#include "graph/onnx_loader.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "graph/ops.h"
#include "graph/training_step.h"
#include "placer_onnx.pb.h"

namespace placer::graph {
namespace {

namespace pb = ::placer::onnxpb;

constexpr int kFloat = pb::TensorProto_DataType_FLOAT;
constexpr int kDouble = pb::TensorProto_DataType_DOUBLE;
constexpr int kFloat16 = pb::TensorProto_DataType_FLOAT16;
constexpr int kBfloat16 = pb::TensorProto_DataType_BFLOAT16;
constexpr int kInt64 = pb::TensorProto_DataType_INT64;
constexpr int kInt32 = pb::TensorProto_DataType_INT32;
constexpr int kBool = pb::TensorProto_DataType_BOOL;

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
// that a folded constant equals what a float32 kernel would have produced.
double Round(int type, double value) {
  return type == kDouble ? value : static_cast<double>(static_cast<float>(value));
}

// Values computed at load time are shapes, masks and small constants: anything larger comes from a
// malformed file, and is refused before allocating.
constexpr int64_t kMaxLoadTimeElements = int64_t{1} << 24;
// Likewise for the data of IR Constant ops the loader makes (zeros for Expand and LSTM states).
constexpr int64_t kMaxConstantElements = int64_t{1} << 26;
// An LSTM is unrolled into one cell per step and direction.
constexpr int64_t kMaxUnrolledCells = 100000;

// A value known at load time: an initializer, a Constant node, a shape, or anything computed from
// those alone.
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
  double F(int64_t k) const { return is_float() ? f[k] : static_cast<double>(i[k]); }
  int64_t I(int64_t k) const {
    if (!is_float()) return i[static_cast<size_t>(k)];
    const double v = f[static_cast<size_t>(k)];
    if (!(v >= -9223372036854775808.0 && v < 9223372036854775808.0)) {
      throw GraphError(fmt::format("{} does not fit an integer", v));
    }
    return static_cast<int64_t>(v);
  }
};
using KnownPtr = std::shared_ptr<const Known>;

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

Known Ints(Shape shape, std::vector<int64_t> values, int type = kInt64) {
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

// One axis of an ONNX Slice, resolved against the extent: elements start, start+step, ... before
// end.
struct SliceRange {
  int64_t start = 0, end = 0, step = 1, count = 0;
};

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

// float16 and bfloat16 bit patterns to float.
float HalfToFloat(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  uint32_t bits;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      uint32_t m = mantissa;
      do {
        ++e;
        m <<= 1;
      } while ((m & 0x400u) == 0);
      bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (m & 0x3ffu) << 13;
    }
  } else if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | mantissa << 13;
  } else {
    bits = sign | (exponent + 127 - 15) << 23 | mantissa << 13;
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

float Bfloat16ToFloat(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

template <typename T>
std::vector<T> RawValues(const std::string& raw, int64_t count, const std::string& name) {
  if (raw.size() % sizeof(T) != 0 || static_cast<uint64_t>(count) != raw.size() / sizeof(T)) {
    throw GraphError(fmt::format("tensor '{}' holds {} bytes of data, its {} elements need {} each",
                                 name, raw.size(), count, sizeof(T)));
  }
  std::vector<T> values(static_cast<size_t>(count));
  if (count > 0) std::memcpy(values.data(), raw.data(), raw.size());  // little-endian, as ONNX
  return values;
}

// A TensorProto to a Known value. Data may be missing (a stripped weight): has_data is then false.
Known FromTensorProto(const pb::TensorProto& t, const std::string& name) {
  if (t.data_location() == pb::TensorProto_DataLocation_EXTERNAL) {
    throw GraphError(
        fmt::format("tensor '{}' keeps its data in an external file, which is not "
                    "supported (export with external_data=False)",
                    name));
  }
  const int type = t.data_type();
  if (!IsFloatType(type) && !IsIntType(type)) {
    throw GraphError(fmt::format("tensor '{}' has element type {}; only numbers are supported",
                                 name, TypeName(type)));
  }
  Known k;
  k.type = type;
  k.name = name;
  for (int64_t d : t.dims()) {
    if (d < 0) throw GraphError(fmt::format("tensor '{}' has a negative extent", name));
    k.shape.push_back(d);
  }
  const int64_t n = NumElements(k.shape);
  auto check = [&](int64_t held) {
    if (held != n) {
      throw GraphError(fmt::format("tensor '{}' holds {} values, its shape {} needs {}", name, held,
                                   ToString(k.shape), n));
    }
  };
  const bool raw = t.has_raw_data();
  const int typed = t.float_data_size() + t.int32_data_size() + t.int64_data_size() +
                    t.double_data_size() + t.uint64_data_size();
  if (n > 0 && !raw && typed == 0) {
    k.has_data = false;
    return k;
  }
  const std::string& bytes = t.raw_data();
  switch (type) {
    case kFloat:
      if (raw) {
        for (float v : RawValues<float>(bytes, n, name)) k.f.push_back(v);
      } else {
        check(t.float_data_size());
        k.f.assign(t.float_data().begin(), t.float_data().end());
      }
      break;
    case kDouble:
      if (raw) {
        k.f = RawValues<double>(bytes, n, name);
      } else {
        check(t.double_data_size());
        k.f.assign(t.double_data().begin(), t.double_data().end());
      }
      break;
    case kFloat16:
    case kBfloat16: {
      auto convert = type == kFloat16 ? HalfToFloat : Bfloat16ToFloat;
      if (raw) {
        for (uint16_t v : RawValues<uint16_t>(bytes, n, name)) k.f.push_back(convert(v));
      } else {
        check(t.int32_data_size());
        for (int32_t v : t.int32_data()) k.f.push_back(convert(static_cast<uint16_t>(v)));
      }
      break;
    }
    case kInt64:
      if (raw) {
        k.i = RawValues<int64_t>(bytes, n, name);
      } else {
        check(t.int64_data_size());
        k.i.assign(t.int64_data().begin(), t.int64_data().end());
      }
      break;
    case pb::TensorProto_DataType_UINT32:
    case pb::TensorProto_DataType_UINT64:
      if (raw && type == pb::TensorProto_DataType_UINT32) {
        for (uint32_t v : RawValues<uint32_t>(bytes, n, name)) k.i.push_back(v);
      } else if (raw) {
        for (uint64_t v : RawValues<uint64_t>(bytes, n, name))
          k.i.push_back(static_cast<int64_t>(v));
      } else {
        check(t.uint64_data_size());
        for (uint64_t v : t.uint64_data()) k.i.push_back(static_cast<int64_t>(v));
      }
      break;
    default:  // int32, int16, int8, uint16, uint8, bool: int32_data, or raw bytes of their size
      if (raw) {
        switch (type) {
          case kInt32:
            for (int32_t v : RawValues<int32_t>(bytes, n, name)) k.i.push_back(v);
            break;
          case pb::TensorProto_DataType_INT16:
            for (int16_t v : RawValues<int16_t>(bytes, n, name)) k.i.push_back(v);
            break;
          case pb::TensorProto_DataType_UINT16:
            for (uint16_t v : RawValues<uint16_t>(bytes, n, name)) k.i.push_back(v);
            break;
          case pb::TensorProto_DataType_INT8:
            for (int8_t v : RawValues<int8_t>(bytes, n, name)) k.i.push_back(v);
            break;
          default:  // uint8, bool
            for (uint8_t v : RawValues<uint8_t>(bytes, n, name)) k.i.push_back(v);
            break;
        }
      } else {
        check(t.int32_data_size());
        k.i.assign(t.int32_data().begin(), t.int32_data().end());
      }
      break;
  }
  return k;
}

std::string ReadFile(const std::filesystem::path& file) {
  std::error_code error;
  if (std::filesystem::is_directory(file, error)) {
    throw GraphError(fmt::format("{}: cannot read: it is a directory", file.string()));
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    throw GraphError(fmt::format("{}: cannot read: {}", file.string(), std::strerror(errno)));
  }
  std::ostringstream bytes;
  bytes << in.rdbuf();
  if (in.bad()) throw GraphError(fmt::format("{}: cannot read", file.string()));
  return bytes.str();
}

pb::ModelProto ParseModel(const std::filesystem::path& file) {
  const std::string bytes = ReadFile(file);
  pb::ModelProto model;
  if (bytes.empty() || !model.ParseFromString(bytes) || !model.has_graph()) {
    throw GraphError(fmt::format(
        "{}: not an ONNX model: the file is {}", file.string(),
        bytes.empty() ? "empty"
                      : "truncated, corrupt or of another format (protobuf parse failed)"));
  }
  return model;
}

// Roles a known value plays for the op that consumes it: decides whether a stripped initializer
// starts as ones (normalisation scales), and whether an initializer may become a parameter.
enum class Role { kWeight, kScale, kConstant };

class Loader {
 public:
  Loader(const std::filesystem::path& file, const OnnxOptions& options)
      : file_(file.string()), options_(options), model_(ParseModel(file)) {}

  Graph Load();

 private:
  struct Value {
    std::optional<TensorId> tensor;  // a runtime tensor of the IR graph
    KnownPtr known;                  // a value known at load time
  };
  using Handler = void (Loader::*)();

  static const std::unordered_map<std::string, Handler>& Handlers();
  static const std::set<std::string>& FoldableOps();

  void DeclareInputs();
  std::vector<bool> LiveNodes() const;
  void CheckSupported(const std::vector<bool>& live) const;
  void ConvertNode();
  std::vector<Known> Fold(const std::vector<KnownPtr>& in);
  void AttachOutputsAndLoss();

  // The current node.
  std::string Describe() const;
  size_t NumInputs() const { return static_cast<size_t>(node_->input_size()); }
  bool HasInput(size_t k) const {
    return k < NumInputs() && !node_->input(static_cast<int>(k)).empty();
  }
  const std::string& InputName(size_t k) const {
    if (k >= NumInputs()) throw GraphError(fmt::format("input {} is missing", k));
    return node_->input(static_cast<int>(k));
  }
  const Value& In(size_t k) const;
  Shape InShape(size_t k) const;
  // Input k as a runtime tensor: known values become a parameter or a Constant op.
  TensorId Tensor(size_t k, Role role = Role::kWeight);
  // Input k as load-time integers (a shape, axes, indices); `what` names it in errors.
  std::vector<int64_t> KnownInts(size_t k, const char* what) const;
  bool OutputLive(size_t k) const;
  const std::string& OutputName(size_t k) const {
    if (k >= static_cast<size_t>(node_->output_size())) {
      throw GraphError(fmt::format("output {} is missing", k));
    }
    return node_->output(static_cast<int>(k));
  }

  const pb::AttributeProto* Attr(const std::string& name) const;
  int64_t AttrInt(const std::string& name, int64_t fallback) const;
  double AttrFloat(const std::string& name, double fallback) const;
  std::string AttrString(const std::string& name, const std::string& fallback) const;
  std::optional<std::vector<int64_t>> AttrInts(const std::string& name) const;
  void Unsupported(const std::string& what) const;

  TensorId Materialize(const Value& value, const std::string& value_name, Role role);
  TensorId ConstantOp(const std::string& base, const Shape& shape, const std::vector<float>& values,
                      bool exact = false);
  TensorId ZerosOp(const std::string& base, const Shape& shape);
  // Adds an IR op for the current node. The op is named `op_name` (made unique); its outputs are
  // named `outputs`: the current node's output names (or all, when `exact`) as they are, other
  // names made unique against the graph and the file's value names.
  std::vector<TensorId> Emit(const std::string& op_name, const std::string& type,
                             std::vector<TensorId> inputs, Attributes attrs,
                             const std::vector<std::string>& outputs, bool exact = false);
  TensorId Emit1(const std::string& op_name, const std::string& type, std::vector<TensorId> inputs,
                 Attributes attrs, const std::string& output, bool exact = false);
  // Helpers emitting one IR op named after the current node plus `suffix`.
  TensorId Sub(const std::string& suffix, const std::string& type, std::vector<TensorId> inputs,
               Attributes attrs = {});
  TensorId ReshapeTo(const std::string& suffix, TensorId x, const Shape& shape,
                     const std::string& output = "");
  TensorId SliceAxis(const std::string& suffix, TensorId x, int64_t axis, int64_t start,
                     int64_t end, int64_t step = 1);
  std::string UniqueOpName(const std::string& base);
  std::string UniqueTensorName(const std::string& base);
  std::string NodeBase() const { return node_base_; }
  void Define(size_t output, TensorId tensor);
  void DefineKnown(size_t output, Known known);

  // Op handlers (runtime tensors).
  void Identity();
  void Unary();
  void Binary();
  void Sum();
  void Conv();
  void Pool();
  void GlobalAveragePool();
  void BatchNormalization();
  void Gemm();
  void MatMul();
  void Concat();
  void Flatten();
  void Reshape();
  void Squeeze();
  void Unsqueeze();
  void Transpose();
  void Softmax();
  void LayerNormalization();
  void ReduceMean();
  void Gather();
  void Split();
  void Slice();
  void Expand();
  void Cast();
  void Reciprocal();
  void Shape_();
  void Lstm();
  void ConstantOnly();

  std::vector<int64_t> SplitSizes(int64_t extent, size_t outputs) const;
  struct SliceSpec {
    std::vector<int64_t> starts, ends, axes, steps;
  };
  SliceSpec SliceInputs() const;
  std::vector<int64_t> SqueezeAxes() const;
  Shape UnsqueezedShape(const Shape& x) const;  // by the current Unsqueeze node's axes
  std::vector<TensorId> LstmWeights(size_t input, int64_t directions, int64_t hidden, bool bias);

  std::string file_;
  OnnxOptions options_;
  pb::ModelProto model_;
  int64_t opset_ = 1;
  Graph graph_;
  std::unordered_map<std::string, Value> values_;
  std::map<const Known*, TensorId> materialized_;
  std::unordered_set<std::string> reserved_;  // every ONNX value name of the file
  std::unordered_set<std::string> live_values_;
  std::unordered_set<std::string> current_outputs_;  // of the node being converted
  const pb::NodeProto* node_ = nullptr;
  int node_index_ = -1;
  std::string node_base_;
};

const std::unordered_map<std::string, Loader::Handler>& Loader::Handlers() {
  static const auto* handlers = new std::unordered_map<std::string, Handler>{
      {"Identity", &Loader::Identity},
      {"Dropout", &Loader::Identity},
      {"Relu", &Loader::Unary},
      {"Sigmoid", &Loader::Unary},
      {"Tanh", &Loader::Unary},
      {"Erf", &Loader::Unary},
      {"Sqrt", &Loader::Unary},
      {"Exp", &Loader::Unary},
      {"Neg", &Loader::Unary},
      {"Gelu", &Loader::Unary},
      {"Add", &Loader::Binary},
      {"Sub", &Loader::Binary},
      {"Mul", &Loader::Binary},
      {"Div", &Loader::Binary},
      {"Pow", &Loader::Binary},
      {"Sum", &Loader::Sum},
      {"Conv", &Loader::Conv},
      {"MaxPool", &Loader::Pool},
      {"AveragePool", &Loader::Pool},
      {"GlobalAveragePool", &Loader::GlobalAveragePool},
      {"BatchNormalization", &Loader::BatchNormalization},
      {"Gemm", &Loader::Gemm},
      {"MatMul", &Loader::MatMul},
      {"Concat", &Loader::Concat},
      {"Flatten", &Loader::Flatten},
      {"Reshape", &Loader::Reshape},
      {"Squeeze", &Loader::Squeeze},
      {"Unsqueeze", &Loader::Unsqueeze},
      {"Transpose", &Loader::Transpose},
      {"Softmax", &Loader::Softmax},
      {"LayerNormalization", &Loader::LayerNormalization},
      {"ReduceMean", &Loader::ReduceMean},
      {"Gather", &Loader::Gather},
      {"Split", &Loader::Split},
      {"Slice", &Loader::Slice},
      {"Expand", &Loader::Expand},
      {"Cast", &Loader::Cast},
      {"Shape", &Loader::Shape_},
      {"Size", &Loader::Shape_},
      {"LSTM", &Loader::Lstm},
      // Evaluated at load time only (shape arithmetic, masks); a runtime input is an error.
      {"Constant", &Loader::ConstantOnly},
      {"ConstantOfShape", &Loader::ConstantOnly},
      {"Range", &Loader::ConstantOnly},
      {"Mod", &Loader::ConstantOnly},
      {"Abs", &Loader::ConstantOnly},
      {"Reciprocal", &Loader::Reciprocal},
      {"Floor", &Loader::ConstantOnly},
      {"Ceil", &Loader::ConstantOnly},
      {"Equal", &Loader::ConstantOnly},
      {"Less", &Loader::ConstantOnly},
      {"Greater", &Loader::ConstantOnly},
      {"LessOrEqual", &Loader::ConstantOnly},
      {"GreaterOrEqual", &Loader::ConstantOnly},
      {"Not", &Loader::ConstantOnly},
      {"And", &Loader::ConstantOnly},
      {"Or", &Loader::ConstantOnly},
      {"Where", &Loader::ConstantOnly},
      {"Min", &Loader::ConstantOnly},
      {"Max", &Loader::ConstantOnly},
  };
  return *handlers;
}

const std::set<std::string>& Loader::FoldableOps() {
  static const auto* ops = new std::set<std::string>{
      "Identity", "Dropout",   "Relu",      "Sigmoid", "Tanh",        "Erf",
      "Sqrt",     "Exp",       "Neg",       "Add",     "Sub",         "Mul",
      "Div",      "Pow",       "Sum",       "Concat",  "Flatten",     "Reshape",
      "Squeeze",  "Unsqueeze", "Transpose", "Gather",  "Split",       "Slice",
      "Expand",   "Cast",      "Mod",       "Abs",     "Reciprocal",  "Floor",
      "Ceil",     "Equal",     "Less",      "Greater", "LessOrEqual", "GreaterOrEqual",
      "Not",      "And",       "Or",        "Where",   "Min",         "Max"};
  return *ops;
}

std::string Loader::Describe() const {
  return node_->name().empty()
             ? fmt::format("node {} ({})", node_index_, node_->op_type())
             : fmt::format("node {} '{}' ({})", node_index_, node_->name(), node_->op_type());
}

const Loader::Value& Loader::In(size_t k) const {
  const std::string& name = InputName(k);
  if (name.empty()) throw GraphError(fmt::format("input {} is missing", k));
  auto it = values_.find(name);
  if (it == values_.end()) {
    throw GraphError(fmt::format(
        "input '{}' is not a graph input, an initializer or an output of an earlier node", name));
  }
  return it->second;
}

Shape Loader::InShape(size_t k) const {
  const Value& v = In(k);
  return v.tensor ? graph_.tensor(*v.tensor).shape : v.known->shape;
}

std::vector<int64_t> Loader::KnownInts(size_t k, const char* what) const {
  const Value& v = In(k);
  if (!v.known) {
    throw GraphError(
        fmt::format("input '{}' ({}) must be computable at load time, but depends on "
                    "the minibatch or the weights",
                    InputName(k), what));
  }
  if (!v.known->has_data) {
    throw GraphError(fmt::format("initializer '{}' ({}) has no data", InputName(k), what));
  }
  std::vector<int64_t> out;
  for (int64_t e = 0; e < v.known->size(); ++e) out.push_back(v.known->I(e));
  return out;
}

bool Loader::OutputLive(size_t k) const {
  return k < static_cast<size_t>(node_->output_size()) && !OutputName(k).empty() &&
         live_values_.count(OutputName(k)) != 0;
}

const pb::AttributeProto* Loader::Attr(const std::string& name) const {
  for (const pb::AttributeProto& a : node_->attribute()) {
    if (a.name() == name) return &a;
  }
  return nullptr;
}

int64_t Loader::AttrInt(const std::string& name, int64_t fallback) const {
  const pb::AttributeProto* a = Attr(name);
  return a ? a->i() : fallback;
}

double Loader::AttrFloat(const std::string& name, double fallback) const {
  const pb::AttributeProto* a = Attr(name);
  return a ? static_cast<double>(a->f()) : fallback;
}

std::string Loader::AttrString(const std::string& name, const std::string& fallback) const {
  const pb::AttributeProto* a = Attr(name);
  return a ? a->s() : fallback;
}

std::optional<std::vector<int64_t>> Loader::AttrInts(const std::string& name) const {
  const pb::AttributeProto* a = Attr(name);
  if (!a) return std::nullopt;
  return std::vector<int64_t>(a->ints().begin(), a->ints().end());
}

void Loader::Unsupported(const std::string& what) const {
  throw GraphError(fmt::format("not supported: {}", what));
}

std::string Loader::UniqueOpName(const std::string& base) {
  std::string name = base;
  for (int n = 2; graph_.FindOp(name); ++n) name = fmt::format("{}#{}", base, n);
  return name;
}

std::string Loader::UniqueTensorName(const std::string& base) {
  std::string name = base;
  for (int n = 2; graph_.FindTensor(name) || reserved_.count(name) != 0; ++n) {
    name = fmt::format("{}#{}", base, n);
  }
  return name;
}

std::vector<TensorId> Loader::Emit(const std::string& op_name, const std::string& type,
                                   std::vector<TensorId> inputs, Attributes attrs,
                                   const std::vector<std::string>& outputs, bool exact) {
  Op op{.name = UniqueOpName(op_name),
        .type = type,
        .inputs = std::move(inputs),
        .attrs = std::move(attrs)};
  std::vector<Shape> shapes;
  try {
    shapes = InferOutputShapes(graph_, op);
  } catch (const GraphError& error) {
    throw GraphError(fmt::format("IR op '{}' ({}): {}", op.name, type, error.what()));
  }
  if (shapes.size() != outputs.size()) {
    throw GraphError(fmt::format("IR op '{}' ({}) has {} outputs, {} expected", op.name, type,
                                 shapes.size(), outputs.size()));
  }
  for (size_t k = 0; k < shapes.size(); ++k) {
    // ONNX value names are kept as they are (tests and users look values up by them).
    const bool verbatim =
        (exact || current_outputs_.count(outputs[k]) != 0) && !graph_.FindTensor(outputs[k]);
    op.outputs.push_back(graph_.AddTensor(
        {.name = verbatim ? outputs[k] : UniqueTensorName(outputs[k]), .shape = shapes[k]}));
  }
  std::vector<TensorId> out = op.outputs;
  graph_.AddOp(std::move(op));
  return out;
}

TensorId Loader::Emit1(const std::string& op_name, const std::string& type,
                       std::vector<TensorId> inputs, Attributes attrs, const std::string& output,
                       bool exact) {
  return Emit(op_name, type, std::move(inputs), std::move(attrs), {output}, exact).at(0);
}

TensorId Loader::Sub(const std::string& suffix, const std::string& type,
                     std::vector<TensorId> inputs, Attributes attrs) {
  const std::string name = NodeBase() + "/" + suffix;
  return Emit1(name, type, std::move(inputs), std::move(attrs), name);
}

TensorId Loader::ReshapeTo(const std::string& suffix, TensorId x, const Shape& shape,
                           const std::string& output) {
  Attributes attrs;
  attrs.Set("shape", shape);
  const std::string name = NodeBase() + "/" + suffix;
  return Emit1(name, op_types::kReshape, {x}, std::move(attrs), output.empty() ? name : output);
}

TensorId Loader::SliceAxis(const std::string& suffix, TensorId x, int64_t axis, int64_t start,
                           int64_t end, int64_t step) {
  Attributes attrs;
  attrs.Set("axis", axis);
  attrs.Set("start", start);
  attrs.Set("end", end);
  if (step != 1) attrs.Set("step", step);
  return Sub(suffix, op_types::kSlice, {x}, std::move(attrs));
}

void Loader::Define(size_t output, TensorId tensor) {
  values_[OutputName(output)] = Value{.tensor = tensor, .known = nullptr};
}

void Loader::DefineKnown(size_t output, Known known) {
  known.name = OutputName(output);
  values_[OutputName(output)] =
      Value{.tensor = std::nullopt, .known = std::make_shared<const Known>(std::move(known))};
}

TensorId Loader::ConstantOp(const std::string& base, const Shape& shape,
                            const std::vector<float>& values, bool exact) {
  if (NumElements(shape) > kMaxConstantElements) {
    throw GraphError(fmt::format("a constant of shape {} is too large", ToString(shape)));
  }
  Attributes attrs;
  attrs.Set("shape", shape);
  std::string bytes(values.size() * sizeof(float), '\0');
  if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());  // little-endian
  attrs.Set("values", std::move(bytes));
  return Emit1(base, op_types::kConstant, {}, std::move(attrs), base, exact);
}

TensorId Loader::ZerosOp(const std::string& base, const Shape& shape) {
  const int64_t elements = NumElements(shape);
  if (elements > kMaxConstantElements) {  // checked before allocating
    throw GraphError(fmt::format("a constant of shape {} is too large", ToString(shape)));
  }
  return ConstantOp(base, shape, std::vector<float>(static_cast<size_t>(elements)));
}

TensorId Loader::Materialize(const Value& value, const std::string& value_name, Role role) {
  if (value.tensor) return *value.tensor;
  const Known& k = *value.known;
  auto cached = materialized_.find(&k);
  if (cached != materialized_.end()) return cached->second;
  if (!k.is_float()) {
    throw GraphError(
        fmt::format("'{}' is a {} value computed at load time; only float values can feed IR ops",
                    value_name, TypeName(k.type)));
  }
  TensorId id;
  if (k.trainable && role != Role::kConstant) {
    Initializer init;
    if (k.has_data) {
      init.kind = Initializer::Kind::kValues;
      init.values = std::make_shared<const std::vector<float>>(k.f.begin(), k.f.end());
    } else if (role == Role::kScale) {
      init.kind = Initializer::Kind::kOnes;
    } else if (k.shape.size() <= 1) {
      init.kind = Initializer::Kind::kZeros;
    } else {
      init.kind = Initializer::Kind::kNormal;
      init.stddev = options_.init_stddev;
    }
    id = graph_.AddTensor({.name = graph_.FindTensor(k.name) ? UniqueTensorName(k.name) : k.name,
                           .shape = k.shape,
                           .dtype = DType::kFloat32,
                           .kind = TensorKind::kParameter,
                           .init = init});
  } else {
    if (!k.has_data) {
      throw GraphError(fmt::format("initializer '{}' has no data and is not a weight", k.name));
    }
    id = ConstantOp(k.name, k.shape, std::vector<float>(k.f.begin(), k.f.end()), true);
  }
  materialized_.emplace(&k, id);
  return id;
}

TensorId Loader::Tensor(size_t k, Role role) {
  const Value& v = In(k);
  return Materialize(v, InputName(k), role);
}

void Loader::DeclareInputs() {
  const pb::GraphProto& g = model_.graph();
  std::unordered_set<std::string> initializers;
  for (const pb::TensorProto& t : g.initializer()) {
    if (t.name().empty()) throw GraphError("an initializer has no name");
    Known k = FromTensorProto(t, t.name());
    k.trainable = k.is_float() && k.size() > 1;
    initializers.insert(t.name());
    values_[t.name()] =
        Value{.tensor = std::nullopt, .known = std::make_shared<const Known>(std::move(k))};
  }
  for (const pb::ValueInfoProto& input : g.input()) {
    if (initializers.count(input.name()) != 0) continue;  // older exports list weights as inputs
    if (live_values_.count(input.name()) == 0) continue;
    if (auto bound = options_.bound_inputs.find(input.name());
        bound != options_.bound_inputs.end()) {
      const OnnxTensor& t = bound->second;
      Known k;
      k.name = input.name();
      k.shape = t.shape;
      if (t.dtype == DType::kFloat32) {
        k.f.assign(t.floats.begin(), t.floats.end());
      } else {
        k.type = kInt64;
        k.i = t.ints;
      }
      if ((k.is_float() ? k.f.size() : k.i.size()) != static_cast<size_t>(k.size())) {
        throw GraphError(fmt::format("the value bound to input '{}' does not fill its shape {}",
                                     input.name(), ToString(k.shape)));
      }
      values_[input.name()] =
          Value{.tensor = std::nullopt, .known = std::make_shared<const Known>(std::move(k))};
      continue;
    }
    if (!input.type().has_tensor_type()) {
      throw GraphError(fmt::format("graph input '{}' is not a tensor", input.name()));
    }
    const pb::TypeProto_Tensor& type = input.type().tensor_type();
    DType dtype;
    if (IsFloatType(type.elem_type())) {
      if (type.elem_type() != kFloat) {
        throw GraphError(
            fmt::format("graph input '{}' is {}; only float32 and integer inputs are "
                        "supported",
                        input.name(), TypeName(type.elem_type())));
      }
      dtype = DType::kFloat32;
    } else if (type.elem_type() == kInt64 || type.elem_type() == kInt32) {
      dtype = DType::kInt64;  // token ids: fed as int64
    } else {
      throw GraphError(
          fmt::format("graph input '{}' is {}; only float32 and integer inputs are "
                      "supported",
                      input.name(), TypeName(type.elem_type())));
    }
    if (!type.has_shape()) {
      throw GraphError(fmt::format("graph input '{}' has no shape", input.name()));
    }
    Shape shape;
    for (int d = 0; d < type.shape().dim_size(); ++d) {
      const pb::TensorShapeProto_Dimension& dim = type.shape().dim(d);
      if (d == 0 && options_.batch_size) {
        shape.push_back(*options_.batch_size);
      } else if (dim.has_dim_value() && dim.dim_value() > 0) {
        shape.push_back(dim.dim_value());
      } else if (d == 0) {
        throw GraphError(fmt::format(
            "graph input '{}' leaves its batch axis (axis 0) {}; give a "
            "batch size",
            input.name(), dim.has_dim_param() ? "symbolic ('" + dim.dim_param() + "')" : "open"));
      } else {
        throw GraphError(
            fmt::format("graph input '{}' has a symbolic or empty extent on axis {}; "
                        "only the batch axis (0) may vary",
                        input.name(), d));
      }
    }
    TensorId id = graph_.AddTensor(
        {.name = input.name(), .shape = shape, .dtype = dtype, .kind = TensorKind::kInput});
    values_[input.name()] = Value{.tensor = id, .known = nullptr};
  }
}

std::vector<bool> Loader::LiveNodes() const {
  const pb::GraphProto& g = model_.graph();
  std::unordered_set<std::string> needed;
  // With a loss, only the first output is trained: the others would leave weights without
  // gradients.
  const int outputs = options_.loss ? std::min(1, g.output_size()) : g.output_size();
  for (int k = 0; k < outputs; ++k) needed.insert(g.output(k).name());
  std::vector<bool> live(static_cast<size_t>(g.node_size()), false);
  for (int n = g.node_size() - 1; n >= 0; --n) {
    const pb::NodeProto& node = g.node(n);
    bool any = false;
    for (const std::string& out : node.output()) any = any || needed.count(out) != 0;
    if (!any) continue;
    live[static_cast<size_t>(n)] = true;
    for (const std::string& in : node.input()) {
      if (!in.empty()) needed.insert(in);
    }
  }
  return live;
}

void Loader::CheckSupported(const std::vector<bool>& live) const {
  const pb::GraphProto& g = model_.graph();
  std::map<std::string, int> first;  // unsupported op type -> first node
  for (int n = 0; n < g.node_size(); ++n) {
    const pb::NodeProto& node = g.node(n);
    if (!live[static_cast<size_t>(n)]) continue;
    const bool standard = node.domain().empty() || node.domain() == "ai.onnx";
    const std::string type = standard ? node.op_type() : node.domain() + "::" + node.op_type();
    if (standard && Handlers().count(node.op_type()) != 0) continue;
    first.emplace(type, n);
  }
  if (first.empty()) return;
  std::vector<std::string> parts;
  for (const auto& [type, n] : first) {
    const pb::NodeProto& node = g.node(n);
    parts.push_back(node.name().empty()
                        ? fmt::format("{} (first: node {})", type, n)
                        : fmt::format("{} (first: node {} '{}')", type, n, node.name()));
  }
  throw GraphError(fmt::format("{}: unsupported ONNX op types: {}", file_, fmt::join(parts, ", ")));
}

Graph Loader::Load() {
  const pb::GraphProto& g = model_.graph();
  for (const pb::OperatorSetIdProto& set : model_.opset_import()) {
    if (set.domain().empty() || set.domain() == "ai.onnx") opset_ = set.version();
  }
  if (g.output_size() == 0) throw GraphError(fmt::format("{}: the graph has no outputs", file_));
  if (options_.training_step && !options_.loss) {
    throw GraphError("a training step needs a loss");
  }
  for (const pb::TensorProto& t : g.initializer()) reserved_.insert(t.name());
  for (const pb::ValueInfoProto& v : g.input()) reserved_.insert(v.name());
  for (const pb::NodeProto& node : g.node()) {
    for (const std::string& out : node.output()) reserved_.insert(out);
  }
  const std::vector<bool> live = LiveNodes();
  for (int n = 0; n < g.node_size(); ++n) {
    if (!live[static_cast<size_t>(n)]) continue;
    for (const std::string& in : g.node(n).input()) live_values_.insert(in);
    for (const std::string& out : g.node(n).output()) live_values_.insert(out);
  }
  for (const pb::ValueInfoProto& v : g.output()) live_values_.insert(v.name());
  CheckSupported(live);
  try {
    DeclareInputs();
  } catch (const GraphError& error) {
    throw GraphError(fmt::format("{}: {}", file_, error.what()));
  }
  for (int n = 0; n < g.node_size(); ++n) {
    if (!live[static_cast<size_t>(n)]) continue;
    node_ = &g.node(n);
    node_index_ = n;
    node_base_ = node_->name().empty() ? fmt::format("{}_{}", node_->op_type(), n) : node_->name();
    current_outputs_ = {node_->output().begin(), node_->output().end()};
    try {
      ConvertNode();
    } catch (const GraphError& error) {
      throw GraphError(fmt::format("{}: {}: {}", file_, Describe(), error.what()));
    } catch (const std::logic_error& error) {  // an index a malformed node got wrong
      throw GraphError(fmt::format("{}: {}: malformed node ({})", file_, Describe(), error.what()));
    }
  }
  node_ = nullptr;
  current_outputs_.clear();
  try {
    AttachOutputsAndLoss();
    if (options_.training_step) AppendBackwardAndUpdate(graph_, options_.learning_rate);
    graph_.Validate();
  } catch (const GraphError& error) {
    throw GraphError(fmt::format("{}: {}", file_, error.what()));
  }
  return std::move(graph_);
}

void Loader::ConvertNode() {
  const std::string& type = node_->op_type();
  std::vector<KnownPtr> known;
  bool all_known = true, any_trainable = false;
  for (size_t k = 0; k < NumInputs(); ++k) {
    if (!HasInput(k)) {
      known.push_back(nullptr);
      continue;
    }
    const Value& v = In(k);
    all_known = all_known && v.known != nullptr && !v.tensor;
    if (v.known) {
      any_trainable = any_trainable || v.known->trainable;
      known.push_back(v.known);
    } else {
      known.push_back(nullptr);
    }
  }
  // Identity of a weight (exporters de-duplicate equal initializers this way) is the same weight:
  // both names lead to one parameter, so tied weights stay tied.
  if ((type == "Identity" || type == "Dropout") && HasInput(0) && In(0).known && !In(0).tensor) {
    if (OutputLive(1)) Unsupported("Dropout's mask output");
    values_[OutputName(0)] = In(0);
    return;
  }
  if (all_known && !any_trainable && FoldableOps().count(type) != 0) {
    for (const KnownPtr& k : known) {
      if (k && !k->has_data) {
        throw GraphError(fmt::format("initializer '{}' has no data", k->name));
      }
    }
    std::vector<Known> out = Fold(known);
    for (size_t k = 0; k < out.size() && k < static_cast<size_t>(node_->output_size()); ++k) {
      if (!OutputName(k).empty()) DefineKnown(k, std::move(out[k]));
    }
    return;
  }
  (this->*Handlers().at(type))();
}

// ---------------------------------------------------------------------------------------------
// Load-time evaluation.

// Integer arithmetic at load time: an overflow means a malformed file, not a wrapped value.
[[noreturn]] void Overflow() {
  throw GraphError("integer overflow in a value computed at load time");
}

template <typename F>
Known MapFold(const Known& x, int out_type, F f) {
  Known r = Empty(out_type, x.shape);
  for (int64_t e = 0; e < x.size(); ++e) Store(r, e, f(x.F(e)));
  return r;
}

// Elementwise over broadcast inputs; `f` gets doubles for float inputs, int64 for integer inputs.
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

Known Reshaped(const Known& src, Shape shape) {
  Known r = src;
  r.shape = std::move(shape);
  r.trainable = false;
  return r;
}

std::vector<Known> Loader::Fold(const std::vector<KnownPtr>& in) {
  const std::string& type = node_->op_type();
  auto arg = [&](size_t k) -> const Known& {
    if (k >= in.size() || !in[k]) throw GraphError(fmt::format("input {} is missing", k));
    return *in[k];
  };
  auto result = [](Known k) { return std::vector<Known>{std::move(k)}; };
  const Known& x = arg(0);

  if (type == "Identity" || type == "Dropout") return result(x);
  if (type == "Relu") return result(MapFold(x, x.type, [](double v) { return v > 0 ? v : 0.0; }));
  if (type == "Sigmoid") {
    return result(MapFold(x, x.type, [](double v) { return 1 / (1 + std::exp(-v)); }));
  }
  if (type == "Tanh") return result(MapFold(x, x.type, [](double v) { return std::tanh(v); }));
  if (type == "Erf") return result(MapFold(x, x.type, [](double v) { return std::erf(v); }));
  if (type == "Sqrt") return result(MapFold(x, x.type, [](double v) { return std::sqrt(v); }));
  if (type == "Exp") return result(MapFold(x, x.type, [](double v) { return std::exp(v); }));
  if (type == "Neg") return result(MapFold(x, x.type, [](double v) { return -v; }));
  if (type == "Abs") return result(MapFold(x, x.type, [](double v) { return std::abs(v); }));
  if (type == "Floor") return result(MapFold(x, x.type, [](double v) { return std::floor(v); }));
  if (type == "Ceil") return result(MapFold(x, x.type, [](double v) { return std::ceil(v); }));
  if (type == "Reciprocal") return result(MapFold(x, x.type, [](double v) { return 1 / v; }));
  if (type == "Not") return result(MapFold(x, kBool, [](double v) { return v == 0 ? 1.0 : 0.0; }));
  if (type == "Add" || type == "Sum") {
    Known acc = x;
    for (size_t k = 1; k < in.size(); ++k) {
      acc = BinaryFold(acc, arg(k), x.type, std::plus<double>(), [](int64_t a, int64_t b) {
        int64_t r;
        if (__builtin_add_overflow(a, b, &r)) Overflow();
        return r;
      });
    }
    return result(acc);
  }
  if (type == "Sub") {
    return result(BinaryFold(x, arg(1), x.type, std::minus<double>(), [](int64_t a, int64_t b) {
      int64_t r;
      if (__builtin_sub_overflow(a, b, &r)) Overflow();
      return r;
    }));
  }
  if (type == "Mul") {
    return result(
        BinaryFold(x, arg(1), x.type, std::multiplies<double>(), [](int64_t a, int64_t b) {
          int64_t r;
          if (__builtin_mul_overflow(a, b, &r)) Overflow();
          return r;
        }));
  }
  if (type == "Div") {
    return result(BinaryFold(x, arg(1), x.type, std::divides<double>(), [](int64_t a, int64_t b) {
      if (b == 0) throw GraphError("integer division by zero");
      if (a == std::numeric_limits<int64_t>::min() && b == -1) Overflow();
      return a / b;
    }));
  }
  if (type == "Pow") {
    return result(BinaryFold(
        x, arg(1), x.type, [](double a, double b) { return std::pow(a, b); },
        [](int64_t a, int64_t b) {
          const double p = std::pow(static_cast<double>(a), static_cast<double>(b));
          if (!(p >= -9223372036854775808.0 && p < 9223372036854775808.0)) Overflow();
          return static_cast<int64_t>(p);
        }));
  }
  if (type == "Mod") {
    const bool fmod = AttrInt("fmod", 0) != 0;
    return result(BinaryFold(
        x, arg(1), x.type, [](double a, double b) { return std::fmod(a, b); },
        [fmod](int64_t a, int64_t b) {
          if (b == 0) throw GraphError("integer modulo by zero");
          if (b == -1) return int64_t{0};  // INT64_MIN % -1 would trap
          int64_t m = a % b;
          if (!fmod && m != 0 && ((m < 0) != (b < 0))) m += b;  // the divisor's sign, as numpy
          return m;
        }));
  }
  if (type == "Min" || type == "Max") {
    const bool max = type == "Max";
    Known acc = x;
    for (size_t k = 1; k < in.size(); ++k) {
      acc = BinaryFold(
          acc, arg(k), x.type,
          [max](double a, double b) { return max ? std::max(a, b) : std::min(a, b); },
          [max](int64_t a, int64_t b) { return max ? std::max(a, b) : std::min(a, b); });
    }
    return result(acc);
  }
  if (type == "Equal" || type == "Less" || type == "Greater" || type == "LessOrEqual" ||
      type == "GreaterOrEqual" || type == "And" || type == "Or") {
    auto compare = [&type](auto a, auto b) {
      if (type == "Equal") return a == b;
      if (type == "Less") return a < b;
      if (type == "Greater") return a > b;
      if (type == "LessOrEqual") return a <= b;
      if (type == "GreaterOrEqual") return a >= b;
      if (type == "And") return a != 0 && b != 0;
      return a != 0 || b != 0;
    };
    return result(BinaryFold(
        x, arg(1), kBool, [&](double a, double b) { return compare(a, b) ? 1.0 : 0.0; },
        [&](int64_t a, int64_t b) { return compare(a, b) ? int64_t{1} : int64_t{0}; }));
  }
  if (type == "Where") {
    const Known &a = arg(1), &b = arg(2);
    const Shape out = BroadcastShapes(BroadcastShapes(x.shape, a.shape), b.shape);
    const auto sc = BroadcastStrides(x.shape, out), sa = BroadcastStrides(a.shape, out),
               sb = BroadcastStrides(b.shape, out);
    Known r = Empty(a.type, out);
    ForEachIndex(out, [&](int64_t flat, const std::vector<int64_t>& index) {
      const bool pick_a = x.I(Dot(index, sc)) != 0;
      CopyElement(pick_a ? a : b, Dot(index, pick_a ? sa : sb), r, flat);
    });
    return result(r);
  }
  if (type == "Cast") {
    const int to = static_cast<int>(AttrInt("to", kFloat));
    if (!IsFloatType(to) && !IsIntType(to)) Unsupported("Cast to " + TypeName(to));
    Known r = Empty(to, x.shape);
    for (int64_t e = 0; e < x.size(); ++e) {
      if (to == kBool) {
        StoreInt(r, e, x.F(e) != 0 ? 1 : 0);
      } else if (x.is_float()) {
        Store(r, e, r.is_float() ? x.f[static_cast<size_t>(e)] : std::trunc(x.F(e)));
      } else {
        StoreInt(r, e, x.I(e));
      }
    }
    return result(r);
  }
  if (type == "Concat") {
    const int64_t axis = NormalizeAxis(AttrInt("axis", 0), x.shape.size());
    Shape out = x.shape;
    out[static_cast<size_t>(axis)] = 0;
    for (const KnownPtr& k : in) {
      bool fits = k->shape.size() == x.shape.size();
      for (size_t d = 0; fits && d < x.shape.size(); ++d) {
        fits = d == static_cast<size_t>(axis) || k->shape[d] == x.shape[d];
      }
      if (!fits) {
        throw GraphError(fmt::format("shapes {} and {} do not concatenate along axis {}",
                                     ToString(x.shape), ToString(k->shape), axis));
      }
      out[static_cast<size_t>(axis)] += k->shape[static_cast<size_t>(axis)];
    }
    Known r = Empty(x.type, out);
    const int64_t outer = Product(out, 0, static_cast<size_t>(axis));
    int64_t at = 0;
    for (int64_t o = 0; o < outer; ++o) {
      for (const KnownPtr& k : in) {
        const int64_t block = Product(k->shape, static_cast<size_t>(axis), k->shape.size());
        for (int64_t e = 0; e < block; ++e) CopyElement(*k, o * block + e, r, at++);
      }
    }
    return result(r);
  }
  if (type == "Flatten") {
    const int64_t rank = static_cast<int64_t>(x.shape.size());
    int64_t axis = AttrInt("axis", 1);
    if (axis < 0) axis += rank;
    if (axis < 0 || axis > rank) throw GraphError("Flatten axis out of range");
    return result(Reshaped(x, {Product(x.shape, 0, static_cast<size_t>(axis)),
                               Product(x.shape, static_cast<size_t>(axis), x.shape.size())}));
  }
  if (type == "Reshape") {
    std::vector<int64_t> target;
    if (opset_ < 5) {
      target = AttrInts("shape").value_or(std::vector<int64_t>{});
    } else {
      target = KnownInts(1, "shape");
    }
    return result(Reshaped(x, ResolveReshape(x.shape, target, AttrInt("allowzero", 0) != 0)));
  }
  if (type == "Squeeze") {
    const std::vector<int64_t> axes = SqueezeAxes();
    Shape out;
    for (size_t d = 0; d < x.shape.size(); ++d) {
      if (std::find(axes.begin(), axes.end(), static_cast<int64_t>(d)) == axes.end()) {
        out.push_back(x.shape[d]);
      }
    }
    return result(Reshaped(x, out));
  }
  if (type == "Unsqueeze") return result(Reshaped(x, UnsqueezedShape(x.shape)));
  if (type == "Transpose") {
    std::vector<int64_t> perm = AttrInts("perm").value_or(std::vector<int64_t>{});
    if (perm.empty()) {
      for (size_t d = x.shape.size(); d-- > 0;) perm.push_back(static_cast<int64_t>(d));
    }
    std::vector<bool> seen(x.shape.size(), false);
    if (perm.size() != x.shape.size()) throw GraphError("perm does not match the input's rank");
    Shape out;
    for (int64_t p : perm) {
      if (p < 0 || p >= static_cast<int64_t>(seen.size()) || seen[static_cast<size_t>(p)]) {
        throw GraphError(fmt::format("perm [{}] is not a permutation", fmt::join(perm, ", ")));
      }
      seen[static_cast<size_t>(p)] = true;
      out.push_back(x.shape[static_cast<size_t>(p)]);
    }
    const auto strides = Strides(x.shape);
    return result(Rearrange(x, out, [&](const std::vector<int64_t>& index) {
      int64_t at = 0;
      for (size_t d = 0; d < perm.size(); ++d)
        at += index[d] * strides[static_cast<size_t>(perm[d])];
      return at;
    }));
  }
  if (type == "Gather") {
    const Known& indices = arg(1);
    const int64_t axis = NormalizeAxis(AttrInt("axis", 0), x.shape.size());
    const auto a = static_cast<size_t>(axis);
    Shape out(x.shape.begin(), x.shape.begin() + axis);
    out.insert(out.end(), indices.shape.begin(), indices.shape.end());
    out.insert(out.end(), x.shape.begin() + axis + 1, x.shape.end());
    const auto strides = Strides(x.shape);
    const auto index_strides = Strides(indices.shape);
    return result(Rearrange(x, out, [&](const std::vector<int64_t>& index) {
      int64_t at = 0;
      for (size_t d = 0; d < a; ++d) at += index[d] * strides[d];
      int64_t which = 0;
      for (size_t d = 0; d < indices.shape.size(); ++d) which += index[a + d] * index_strides[d];
      int64_t i = indices.I(which);
      if (i < 0) i += x.shape[a];
      if (i < 0 || i >= x.shape[a])
        throw GraphError(fmt::format("gather index {} out of range", i));
      at += i * strides[a];
      for (size_t d = a + 1; d < x.shape.size(); ++d) {
        at += index[d - 1 + indices.shape.size()] * strides[d];
      }
      return at;
    }));
  }
  if (type == "Slice") {
    const SliceSpec spec = SliceInputs();
    Shape out = x.shape;
    std::vector<SliceRange> ranges(x.shape.size());
    for (size_t d = 0; d < x.shape.size(); ++d) ranges[d] = {0, x.shape[d], 1, x.shape[d]};
    for (size_t j = 0; j < spec.axes.size(); ++j) {
      const auto d = static_cast<size_t>(NormalizeAxis(spec.axes[j], x.shape.size()));
      ranges[d] = ResolveSlice(spec.starts[j], spec.ends[j], spec.steps[j], x.shape[d]);
      out[d] = ranges[d].count;
    }
    const auto strides = Strides(x.shape);
    return result(Rearrange(x, out, [&](const std::vector<int64_t>& index) {
      int64_t at = 0;
      for (size_t d = 0; d < index.size(); ++d) {
        at += (ranges[d].start + index[d] * ranges[d].step) * strides[d];
      }
      return at;
    }));
  }
  if (type == "Split") {
    const int64_t axis = NormalizeAxis(AttrInt("axis", 0), x.shape.size());
    const auto a = static_cast<size_t>(axis);
    std::vector<Known> out;
    int64_t offset = 0;
    const auto strides = Strides(x.shape);
    for (int64_t size : SplitSizes(x.shape[a], static_cast<size_t>(node_->output_size()))) {
      Shape shape = x.shape;
      shape[a] = size;
      out.push_back(Rearrange(x, shape, [&](const std::vector<int64_t>& index) {
        int64_t at = 0;
        for (size_t d = 0; d < index.size(); ++d) {
          at += (index[d] + (d == a ? offset : 0)) * strides[d];
        }
        return at;
      }));
      offset += size;
    }
    return out;
  }
  if (type == "Expand") {
    const Shape out = BroadcastShapes(x.shape, KnownInts(1, "shape"));
    const auto strides = BroadcastStrides(x.shape, out);
    return result(
        Rearrange(x, out, [&](const std::vector<int64_t>& index) { return Dot(index, strides); }));
  }
  throw GraphError(fmt::format("cannot evaluate {} at load time", type));
}

// ---------------------------------------------------------------------------------------------
// Handlers.

void Loader::ConstantOnly() {
  const std::string& type = node_->op_type();
  if (type == "Constant") {
    Known k;
    if (const pb::AttributeProto* a = Attr("value")) {
      k = FromTensorProto(a->t(), OutputName(0));
      if (!k.has_data) throw GraphError("the constant has no data");
    } else if (const pb::AttributeProto* a = Attr("value_float")) {
      k.type = kFloat;
      k.f = {static_cast<double>(a->f())};
    } else if (const pb::AttributeProto* a = Attr("value_floats")) {
      k.type = kFloat;
      k.shape = {a->floats_size()};
      k.f.assign(a->floats().begin(), a->floats().end());
    } else if (const pb::AttributeProto* a = Attr("value_int")) {
      k = Ints({}, {a->i()});
    } else if (const pb::AttributeProto* a = Attr("value_ints")) {
      k = Ints({a->ints_size()}, {a->ints().begin(), a->ints().end()});
    } else {
      Unsupported("a Constant without a numeric value");
    }
    DefineKnown(0, std::move(k));
    return;
  }
  if (type == "ConstantOfShape") {
    const std::vector<int64_t> shape = KnownInts(0, "shape");
    Known fill = Empty(kFloat, {1});
    if (const pb::AttributeProto* a = Attr("value")) fill = FromTensorProto(a->t(), "value");
    if (!fill.has_data || fill.size() != 1) throw GraphError("value must hold one element");
    Known r = Empty(fill.type, Shape(shape.begin(), shape.end()));
    for (int64_t e = 0; e < r.size(); ++e) CopyElement(fill, 0, r, e);
    DefineKnown(0, std::move(r));
    return;
  }
  if (type == "Range") {
    const Value &start = In(0), &limit = In(1), &delta = In(2);
    if (!start.known || !limit.known || !delta.known) {
      Unsupported("Range over runtime values");
    }
    for (const Value* v : {&start, &limit, &delta}) {
      if (!v->known->has_data || v->known->size() != 1) {
        throw GraphError("Range takes three scalars");
      }
    }
    const Known& s = *start.known;
    const double step = delta.known->F(0);
    if (step == 0) throw GraphError("Range delta is 0");
    const double count = std::max(0.0, std::ceil((limit.known->F(0) - s.F(0)) / step));
    if (!(count <= static_cast<double>(kMaxLoadTimeElements))) {
      throw GraphError("Range is too long to compute at load time");
    }
    const auto n = static_cast<int64_t>(count);
    Known r = Empty(s.type, {n});
    for (int64_t e = 0; e < n; ++e) Store(r, e, s.F(0) + static_cast<double>(e) * step);
    DefineKnown(0, std::move(r));
    return;
  }
  Unsupported(fmt::format("{} on runtime tensors (only on values computable at load time)", type));
}

void Loader::Shape_() {
  const Shape shape = InShape(0);
  if (node_->op_type() == "Size") {
    DefineKnown(0, Ints({}, {NumElements(shape)}));
    return;
  }
  const auto rank = static_cast<int64_t>(shape.size());
  int64_t start = AttrInt("start", 0), end = AttrInt("end", rank);
  start = std::clamp<int64_t>(start < 0 ? start + rank : start, 0, rank);
  end = std::clamp<int64_t>(end < 0 ? end + rank : end, 0, rank);
  std::vector<int64_t> dims(shape.begin() + start, shape.begin() + std::max(start, end));
  DefineKnown(0, Ints({static_cast<int64_t>(dims.size())}, dims));
}

void Loader::Identity() {
  if (node_->op_type() == "Dropout" && OutputLive(1)) Unsupported("Dropout's mask output");
  Define(0, Emit1(NodeBase(), op_types::kIdentity, {Tensor(0)}, {}, OutputName(0)));
}

void Loader::Cast() {
  const int to = static_cast<int>(AttrInt("to", kFloat));
  const Value& v = In(0);
  const bool float_in =
      v.tensor ? graph_.tensor(*v.tensor).dtype == DType::kFloat32 : v.known->is_float();
  // float32 -> float32 or float64 only: the IR computes in float32 throughout, which a cast to a
  // narrower float would not round to.
  if (!float_in || (to != kFloat && to != kDouble)) {
    Unsupported(fmt::format("Cast of a runtime tensor to {}", TypeName(to)));
  }
  Define(0, Emit1(NodeBase(), op_types::kIdentity, {Tensor(0)}, {}, OutputName(0)));
}

void Loader::Reciprocal() {
  TensorId one = ConstantOp(NodeBase() + "/one", {}, {1.0f});
  Define(0, Emit1(NodeBase(), op_types::kDiv, {one, Tensor(0)}, {}, OutputName(0)));
}

void Loader::Unary() {
  const std::string& type = node_->op_type();
  std::string ir;
  if (type == "Relu") ir = op_types::kRelu;
  if (type == "Sigmoid") ir = op_types::kSigmoid;
  if (type == "Tanh") ir = op_types::kTanh;
  if (type == "Erf") ir = op_types::kErf;
  if (type == "Sqrt") ir = op_types::kSqrt;
  if (type == "Exp") ir = op_types::kExp;
  if (type == "Neg") ir = op_types::kNeg;
  if (type == "Gelu") {
    if (AttrString("approximate", "none") != "none") Unsupported("Gelu with tanh approximation");
    ir = op_types::kGelu;
  }
  Define(0, Emit1(NodeBase(), ir, {Tensor(0)}, {}, OutputName(0)));
}

void Loader::Binary() {
  const std::string& type = node_->op_type();
  std::string ir;
  if (type == "Add") ir = op_types::kAdd;
  if (type == "Sub") ir = op_types::kSub;
  if (type == "Mul") ir = op_types::kMul;
  if (type == "Div") ir = op_types::kDiv;
  if (type == "Pow") ir = op_types::kPow;
  if (opset_ < 7 && AttrInt("broadcast", 0) != 0 && Attr("axis")) {
    Unsupported("legacy broadcasting with an axis");
  }
  Define(0, Emit1(NodeBase(), ir, {Tensor(0), Tensor(1)}, {}, OutputName(0)));
}

void Loader::Sum() {
  TensorId acc = Tensor(0);
  for (size_t k = 1; k < NumInputs(); ++k) {
    const bool last = k + 1 == NumInputs();
    const std::string name = last ? NodeBase() : fmt::format("{}/add{}", NodeBase(), k);
    acc = Emit1(name, op_types::kAdd, {acc, Tensor(k)}, {}, last ? OutputName(0) : name);
  }
  if (NumInputs() == 1) acc = Emit1(NodeBase(), op_types::kIdentity, {acc}, {}, OutputName(0));
  Define(0, acc);
}

// Symmetric 2-D padding from ONNX "pads" / "auto_pad" for a window op.
std::vector<int64_t> WindowPadding(const std::string& auto_pad, std::vector<int64_t> pads,
                                   const Shape& x, const std::vector<int64_t>& kernel,
                                   const std::vector<int64_t>& strides) {
  // Bounds that keep the arithmetic below and the IR's shape rules from overflowing.
  constexpr int64_t kLimit = int64_t{1} << 31;
  for (size_t d = 0; d < 2; ++d) {
    if (kernel[d] < 1 || kernel[d] > kLimit || strides[d] < 1 || strides[d] > kLimit) {
      throw GraphError(fmt::format("kernel [{}] and strides [{}] must be positive",
                                   fmt::join(kernel, ", "), fmt::join(strides, ", ")));
    }
  }
  for (int64_t p : pads) {
    if (p < 0 || p > kLimit) {
      throw GraphError(fmt::format("pads [{}] must be non-negative", fmt::join(pads, ", ")));
    }
  }
  if (auto_pad == "VALID") return {0, 0};
  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    pads.assign(4, 0);
    for (size_t d = 0; d < 2; ++d) {
      const int64_t in = x[2 + d], out = (in + strides[d] - 1) / strides[d];
      const int64_t total = std::max<int64_t>((out - 1) * strides[d] + kernel[d] - in, 0);
      pads[d] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      pads[d + 2] = total - pads[d];
    }
  } else if (!auto_pad.empty() && auto_pad != "NOTSET") {
    throw GraphError(fmt::format("unknown auto_pad '{}'", auto_pad));
  }
  if (pads.empty()) pads.assign(4, 0);
  if (pads.size() != 4 || pads[0] != pads[2] || pads[1] != pads[3]) {
    throw GraphError(fmt::format("not supported: asymmetric padding [{}]", fmt::join(pads, ", ")));
  }
  return {pads[0], pads[1]};
}

void Loader::Conv() {
  const Shape x = InShape(0), w = InShape(1);
  if (x.size() != 4 || w.size() != 4) Unsupported("convolutions other than 2-D");
  const auto dilations = AttrInts("dilations").value_or(std::vector<int64_t>{1, 1});
  for (int64_t d : dilations) {
    if (d != 1) Unsupported("dilated convolution");
  }
  const std::vector<int64_t> kernel = {w[2], w[3]};
  const auto strides = AttrInts("strides").value_or(std::vector<int64_t>{1, 1});
  if (strides.size() != 2) throw GraphError("strides must have 2 entries");
  Attributes attrs;
  attrs.Set("stride", strides);
  attrs.Set("padding",
            WindowPadding(AttrString("auto_pad", "NOTSET"),
                          AttrInts("pads").value_or(std::vector<int64_t>{}), x, kernel, strides));
  attrs.Set("groups", AttrInt("group", 1));
  std::vector<TensorId> inputs = {Tensor(0), Tensor(1)};
  if (HasInput(2)) inputs.push_back(Tensor(2));
  Define(0, Emit1(NodeBase(), op_types::kConv2d, inputs, std::move(attrs), OutputName(0)));
}

void Loader::Pool() {
  const bool max = node_->op_type() == "MaxPool";
  if (max && OutputLive(1)) Unsupported("MaxPool's indices output");
  const Shape x = InShape(0);
  if (x.size() != 4) Unsupported("pooling other than 2-D");
  const auto kernel = AttrInts("kernel_shape").value_or(std::vector<int64_t>{});
  if (kernel.size() != 2) throw GraphError("kernel_shape must have 2 entries");
  const auto strides = AttrInts("strides").value_or(std::vector<int64_t>{1, 1});
  if (strides.size() != 2) throw GraphError("strides must have 2 entries");
  for (int64_t d : AttrInts("dilations").value_or(std::vector<int64_t>{1, 1})) {
    if (d != 1) Unsupported("dilated pooling");
  }
  if (AttrInt("storage_order", 0) != 0) Unsupported("column-major storage_order");
  const std::vector<int64_t> padding =
      WindowPadding(AttrString("auto_pad", "NOTSET"),
                    AttrInts("pads").value_or(std::vector<int64_t>{}), x, kernel, strides);
  if (AttrInt("ceil_mode", 0) != 0) {
    // Ceil mode only differs when a last, partial window exists.
    for (size_t d = 0; d < 2; ++d) {
      const int64_t span = x[2 + d] + 2 * padding[d] - kernel[d];
      if (span >= 0 && span % strides[d] != 0) Unsupported("ceil_mode with a partial window");
    }
  }
  Attributes attrs;
  attrs.Set("kernel", kernel);
  attrs.Set("stride", strides);
  attrs.Set("padding", padding);
  if (!max) attrs.Set("count_include_pad", AttrInt("count_include_pad", 0));
  Define(0, Emit1(NodeBase(), max ? op_types::kMaxPool2d : op_types::kAvgPool2d, {Tensor(0)},
                  std::move(attrs), OutputName(0)));
}

void Loader::GlobalAveragePool() {
  if (InShape(0).size() != 4) Unsupported("global pooling other than 2-D");
  Define(0, Emit1(NodeBase(), op_types::kGlobalAvgPool2d, {Tensor(0)}, {}, OutputName(0)));
}

void Loader::BatchNormalization() {
  for (size_t k = 1; k < 5; ++k) {
    if (OutputLive(k)) Unsupported("BatchNormalization's running statistics outputs");
  }
  // The IR normalises with the minibatch's statistics (training mode): the running mean and
  // variance inputs are not used.
  Attributes attrs;
  attrs.Set("epsilon", AttrFloat("epsilon", 1e-5));
  Define(0, Emit1(NodeBase(), op_types::kBatchNorm, {Tensor(0), Tensor(1, Role::kScale), Tensor(2)},
                  std::move(attrs), OutputName(0)));
}

std::vector<float> Floats(size_t count, double value) {
  return std::vector<float>(count, static_cast<float>(value));
}

void Loader::Gemm() {
  const double alpha = AttrFloat("alpha", 1.0), beta = AttrFloat("beta", 1.0);
  const bool trans_a = AttrInt("transA", 0) != 0, trans_b = AttrInt("transB", 0) != 0;
  const Shape a = InShape(0), b = InShape(1);
  if (a.size() != 2 || b.size() != 2) throw GraphError("Gemm operands must be matrices");
  const int64_t n = trans_b ? b[0] : b[1];
  const bool has_c = HasInput(2) && beta != 0;
  // x W^T + b: the Linear layer, as PyTorch exports nn.Linear.
  if (!trans_a && trans_b && alpha == 1.0 && (!has_c || (beta == 1.0 && InShape(2) == Shape{n}))) {
    std::vector<TensorId> inputs = {Tensor(0), Tensor(1)};
    if (has_c) inputs.push_back(Tensor(2));
    Define(0, Emit1(NodeBase(), op_types::kLinear, inputs, {}, OutputName(0)));
    return;
  }
  auto transpose = [&](const std::string& suffix, TensorId t) {
    Attributes attrs;
    attrs.Set("perm", std::vector<int64_t>{1, 0});
    return Sub(suffix, op_types::kTranspose, {t}, std::move(attrs));
  };
  TensorId lhs = trans_a ? transpose("transpose_a", Tensor(0)) : Tensor(0);
  TensorId rhs = trans_b ? transpose("transpose_b", Tensor(1)) : Tensor(1);
  const bool scaled = alpha != 1.0;
  TensorId y = has_c || scaled
                   ? Sub("matmul", op_types::kMatMul, {lhs, rhs})
                   : Emit1(NodeBase(), op_types::kMatMul, {lhs, rhs}, {}, OutputName(0));
  if (scaled) {
    TensorId s = ConstantOp(NodeBase() + "/alpha", {}, Floats(1, alpha));
    y = has_c ? Sub("scale", op_types::kMul, {y, s})
              : Emit1(NodeBase(), op_types::kMul, {y, s}, {}, OutputName(0));
  }
  if (has_c) {
    TensorId c = Tensor(2);
    if (beta != 1.0) {
      c = Sub("beta_c", op_types::kMul, {c, ConstantOp(NodeBase() + "/beta", {}, Floats(1, beta))});
    }
    y = Emit1(NodeBase(), op_types::kAdd, {y, c}, {}, OutputName(0));
  }
  Define(0, y);
}

void Loader::MatMul() {
  Define(0, Emit1(NodeBase(), op_types::kMatMul, {Tensor(0), Tensor(1)}, {}, OutputName(0)));
}

void Loader::Concat() {
  std::vector<TensorId> inputs;
  for (size_t k = 0; k < NumInputs(); ++k) inputs.push_back(Tensor(k, Role::kConstant));
  Attributes attrs;
  attrs.Set("axis", AttrInt("axis", 0));
  Define(0, Emit1(NodeBase(), op_types::kConcat, inputs, std::move(attrs), OutputName(0)));
}

void Loader::Flatten() {
  const Shape x = InShape(0);
  const auto rank = static_cast<int64_t>(x.size());
  int64_t axis = AttrInt("axis", 1);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis > rank) throw GraphError(fmt::format("axis {} out of range", axis));
  if (axis == 1) {
    Define(0, Emit1(NodeBase(), op_types::kFlatten, {Tensor(0)}, {}, OutputName(0)));
    return;
  }
  Attributes attrs;
  attrs.Set("shape", Shape{Product(x, 0, static_cast<size_t>(axis)),
                           Product(x, static_cast<size_t>(axis), x.size())});
  Define(0, Emit1(NodeBase(), op_types::kReshape, {Tensor(0)}, std::move(attrs), OutputName(0)));
}

void Loader::Reshape() {
  std::vector<int64_t> target =
      opset_ < 5 ? AttrInts("shape").value_or(std::vector<int64_t>{}) : KnownInts(1, "shape");
  const Shape shape = ResolveReshape(InShape(0), target, AttrInt("allowzero", 0) != 0);
  Attributes attrs;
  attrs.Set("shape", shape);
  Define(0, Emit1(NodeBase(), op_types::kReshape, {Tensor(0)}, std::move(attrs), OutputName(0)));
}

std::vector<int64_t> Loader::SqueezeAxes() const {
  const Shape x = InShape(0);
  std::optional<std::vector<int64_t>> axes;
  if (opset_ >= 13) {
    if (HasInput(1)) axes = KnownInts(1, "axes");
  } else {
    axes = AttrInts("axes");
  }
  std::vector<int64_t> out;
  if (!axes || axes->empty()) {
    for (size_t d = 0; d < x.size(); ++d) {
      if (x[d] == 1) out.push_back(static_cast<int64_t>(d));
    }
    return out;
  }
  for (int64_t a : *axes) {
    const int64_t d = NormalizeAxis(a, x.size());
    if (x[static_cast<size_t>(d)] != 1) {
      throw GraphError(
          fmt::format("cannot squeeze axis {} of extent {}", d, x[static_cast<size_t>(d)]));
    }
    out.push_back(d);
  }
  return out;
}

void Loader::Squeeze() {
  const Shape x = InShape(0);
  const std::vector<int64_t> axes = SqueezeAxes();
  Shape out;
  for (size_t d = 0; d < x.size(); ++d) {
    if (std::find(axes.begin(), axes.end(), static_cast<int64_t>(d)) == axes.end()) {
      out.push_back(x[d]);
    }
  }
  Attributes attrs;
  attrs.Set("shape", out);
  Define(0, Emit1(NodeBase(), op_types::kReshape, {Tensor(0)}, std::move(attrs), OutputName(0)));
}

Shape Loader::UnsqueezedShape(const Shape& x) const {
  std::vector<int64_t> axes =
      opset_ >= 13 ? KnownInts(1, "axes") : AttrInts("axes").value_or(std::vector<int64_t>{});
  const size_t rank = x.size() + axes.size();
  std::vector<bool> inserted(rank, false);
  for (int64_t a : axes) {
    const auto d = static_cast<size_t>(NormalizeAxis(a, rank));
    if (inserted[d]) throw GraphError(fmt::format("axes repeat axis {}", d));
    inserted[d] = true;
  }
  Shape out;
  size_t next = 0;
  for (size_t d = 0; d < rank; ++d) out.push_back(inserted[d] ? 1 : x[next++]);
  return out;
}

void Loader::Unsqueeze() {
  Attributes attrs;
  attrs.Set("shape", UnsqueezedShape(InShape(0)));
  Define(0, Emit1(NodeBase(), op_types::kReshape, {Tensor(0)}, std::move(attrs), OutputName(0)));
}

void Loader::Transpose() {
  std::vector<int64_t> perm = AttrInts("perm").value_or(std::vector<int64_t>{});
  if (perm.empty()) {
    for (size_t d = InShape(0).size(); d-- > 0;) perm.push_back(static_cast<int64_t>(d));
  }
  Attributes attrs;
  attrs.Set("perm", perm);
  Define(0, Emit1(NodeBase(), op_types::kTranspose, {Tensor(0)}, std::move(attrs), OutputName(0)));
}

void Loader::Softmax() {
  const Shape x = InShape(0);
  const int64_t axis = NormalizeAxis(AttrInt("axis", opset_ >= 13 ? -1 : 1), x.size());
  Attributes attrs;
  // Before opset 13, Softmax treats the input as a matrix: [prod(dims before axis), rest].
  if (opset_ >= 13 || axis == static_cast<int64_t>(x.size()) - 1) {
    attrs.Set("axis", axis);
    Define(0, Emit1(NodeBase(), op_types::kSoftmax, {Tensor(0)}, std::move(attrs), OutputName(0)));
    return;
  }
  const auto a = static_cast<size_t>(axis);
  TensorId flat = ReshapeTo("as_matrix", Tensor(0), {Product(x, 0, a), Product(x, a, x.size())});
  attrs.Set("axis", int64_t{1});
  TensorId y = Sub("softmax", op_types::kSoftmax, {flat}, std::move(attrs));
  Define(0, ReshapeTo("reshape", y, x, OutputName(0)));
}

void Loader::LayerNormalization() {
  const Shape x = InShape(0);
  const int64_t axis = NormalizeAxis(AttrInt("axis", -1), x.size());
  const double epsilon = AttrFloat("epsilon", 1e-5);
  Attributes attrs;
  attrs.Set("axis", axis);
  attrs.Set("epsilon", epsilon);
  std::vector<TensorId> inputs = {Tensor(0), Tensor(1, Role::kScale)};
  if (HasInput(2)) inputs.push_back(Tensor(2));
  if (OutputLive(0)) {
    Define(0, Emit1(NodeBase(), op_types::kLayerNorm, inputs, std::move(attrs), OutputName(0)));
  }
  if (!OutputLive(1) && !OutputLive(2)) return;
  // The optional statistics outputs (kept dimensions of extent 1), computed by their definition:
  // mean, and 1 / sqrt(variance + epsilon).
  std::vector<int64_t> axes;
  for (auto d = static_cast<size_t>(axis); d < x.size(); ++d)
    axes.push_back(static_cast<int64_t>(d));
  Attributes reduce;
  reduce.Set("axes", axes);
  reduce.Set("keepdims", int64_t{1});
  TensorId mean = Emit1(NodeBase() + "/mean", op_types::kReduceMean, {inputs[0]}, reduce,
                        OutputLive(1) ? OutputName(1) : NodeBase() + "/mean");
  if (OutputLive(1)) Define(1, mean);
  if (!OutputLive(2)) return;
  TensorId centred = Sub("centred", op_types::kSub, {inputs[0], mean});
  TensorId variance =
      Emit1(NodeBase() + "/variance", op_types::kReduceMean,
            {Sub("squared", op_types::kMul, {centred, centred})}, reduce, NodeBase() + "/variance");
  TensorId shifted =
      Sub("shifted", op_types::kAdd,
          {variance, ConstantOp(NodeBase() + "/epsilon", {}, {static_cast<float>(epsilon)})});
  TensorId deviation = Sub("deviation", op_types::kSqrt, {shifted});
  Define(2, Emit1(NodeBase() + "/inverse", op_types::kDiv,
                  {ConstantOp(NodeBase() + "/one", {}, {1.0f}), deviation}, {}, OutputName(2)));
}

void Loader::ReduceMean() {
  const Shape x = InShape(0);
  std::optional<std::vector<int64_t>> axes;
  if (opset_ >= 18) {
    if (HasInput(1)) axes = KnownInts(1, "axes");
  } else {
    axes = AttrInts("axes");
  }
  if (!axes || axes->empty()) {
    if (AttrInt("noop_with_empty_axes", 0) != 0) {
      Define(0, Emit1(NodeBase(), op_types::kIdentity, {Tensor(0)}, {}, OutputName(0)));
      return;
    }
    axes = std::vector<int64_t>();
    for (size_t d = 0; d < x.size(); ++d) axes->push_back(static_cast<int64_t>(d));
  }
  Attributes attrs;
  attrs.Set("axes", *axes);
  attrs.Set("keepdims", AttrInt("keepdims", 1));
  Define(0, Emit1(NodeBase(), op_types::kReduceMean, {Tensor(0)}, std::move(attrs), OutputName(0)));
}

void Loader::Gather() {
  const Value& indices = In(1);
  const Shape data = InShape(0);
  const int64_t axis = NormalizeAxis(AttrInt("axis", 0), data.size());
  if (!indices.known) {
    if (axis != 0) {
      throw GraphError(
          fmt::format("Gather along axis {} needs indices computable at load time", axis));
    }
    if (graph_.tensor(*indices.tensor).dtype != DType::kInt64) {
      throw GraphError(fmt::format("indices '{}' must be integers", InputName(1)));
    }
    // An embedding lookup: the table is a weight (or a constant).
    Define(0,
           Emit1(NodeBase(), op_types::kGather, {Tensor(0), *indices.tensor}, {}, OutputName(0)));
    return;
  }
  // Constant indices select slices of a runtime tensor (a time step, one of q/k/v): slices along
  // the axis, concatenated, reshaped to Gather's output shape.
  const std::vector<int64_t> which = KnownInts(1, "indices");
  const Shape& index_shape = indices.known->shape;
  const auto a = static_cast<size_t>(axis);
  Shape out(data.begin(), data.begin() + axis);
  out.insert(out.end(), index_shape.begin(), index_shape.end());
  out.insert(out.end(), data.begin() + axis + 1, data.end());
  if (which.empty()) Unsupported("Gather with no indices");
  if (which.size() > 4096) Unsupported("Gather of more than 4096 constant indices");
  TensorId x = Tensor(0);
  std::vector<TensorId> pieces;
  for (size_t j = 0; j < which.size();) {
    int64_t i = which[j] < 0 ? which[j] + data[a] : which[j];
    if (i < 0 || i >= data[a]) throw GraphError(fmt::format("index {} out of range", which[j]));
    // Runs of consecutive indices become one slice.
    size_t run = 1;
    while (j + run < which.size() &&
           (which[j + run] < 0 ? which[j + run] + data[a] : which[j + run]) ==
               i + static_cast<int64_t>(run)) {
      ++run;
    }
    pieces.push_back(
        SliceAxis(fmt::format("slice{}", j), x, axis, i, i + static_cast<int64_t>(run)));
    j += run;
  }
  TensorId joined = pieces[0];
  if (pieces.size() > 1) {
    Attributes attrs;
    attrs.Set("axis", axis);
    joined = Sub("concat", op_types::kConcat, pieces, std::move(attrs));
  }
  Define(0, ReshapeTo("reshape", joined, out, OutputName(0)));
}

std::vector<int64_t> Loader::SplitSizes(int64_t extent, size_t outputs) const {
  std::optional<std::vector<int64_t>> sizes;
  if (opset_ >= 13) {
    if (HasInput(1)) sizes = KnownInts(1, "split");
  } else {
    sizes = AttrInts("split");
  }
  std::vector<int64_t> out;
  if (sizes && !sizes->empty()) {
    out = *sizes;
  } else {
    const int64_t parts = AttrInt("num_outputs", static_cast<int64_t>(outputs));
    if (parts <= 0) throw GraphError("Split into no parts");
    // Opset 18: the last part may be smaller.
    const int64_t each = (extent + parts - 1) / parts;
    for (int64_t p = 0, left = extent; p < parts; ++p, left -= each) {
      out.push_back(std::max<int64_t>(0, std::min(each, left)));
    }
  }
  int64_t total = 0;
  for (int64_t size : out) {
    if (size < 0 || __builtin_add_overflow(total, size, &total)) {
      throw GraphError(fmt::format("split sizes [{}] are invalid", fmt::join(out, ", ")));
    }
  }
  if (total != extent || out.size() != outputs) {
    throw GraphError(fmt::format("split sizes [{}] do not cut an extent of {} into {} outputs",
                                 fmt::join(out, ", "), extent, outputs));
  }
  return out;
}

void Loader::Split() {
  const Shape x = InShape(0);
  const int64_t axis = NormalizeAxis(AttrInt("axis", 0), x.size());
  Attributes attrs;
  attrs.Set("axis", axis);
  attrs.Set("sizes",
            SplitSizes(x[static_cast<size_t>(axis)], static_cast<size_t>(node_->output_size())));
  std::vector<std::string> names;
  for (int k = 0; k < node_->output_size(); ++k) {
    names.push_back(OutputName(static_cast<size_t>(k)).empty()
                        ? fmt::format("{}/unused{}", NodeBase(), k)
                        : OutputName(static_cast<size_t>(k)));
  }
  std::vector<TensorId> out =
      Emit(NodeBase(), op_types::kSplit, {Tensor(0)}, std::move(attrs), names);
  for (size_t k = 0; k < out.size(); ++k) {
    if (!OutputName(k).empty()) Define(k, out[k]);
  }
}

Loader::SliceSpec Loader::SliceInputs() const {
  SliceSpec spec;
  if (opset_ < 10) {
    spec.starts = AttrInts("starts").value_or(std::vector<int64_t>{});
    spec.ends = AttrInts("ends").value_or(std::vector<int64_t>{});
    if (auto axes = AttrInts("axes")) spec.axes = *axes;
  } else {
    spec.starts = KnownInts(1, "starts");
    spec.ends = KnownInts(2, "ends");
    if (HasInput(3)) spec.axes = KnownInts(3, "axes");
    if (HasInput(4)) spec.steps = KnownInts(4, "steps");
  }
  if (spec.axes.empty()) {
    for (size_t j = 0; j < spec.starts.size(); ++j) spec.axes.push_back(static_cast<int64_t>(j));
  }
  if (spec.steps.empty()) spec.steps.assign(spec.starts.size(), 1);
  if (spec.ends.size() != spec.starts.size() || spec.axes.size() != spec.starts.size() ||
      spec.steps.size() != spec.starts.size()) {
    throw GraphError("starts, ends, axes and steps differ in length");
  }
  return spec;
}

void Loader::Slice() {
  const Shape x = InShape(0);
  const SliceSpec spec = SliceInputs();
  TensorId y = Tensor(0);
  std::vector<std::pair<int64_t, SliceRange>> cuts;
  for (size_t j = 0; j < spec.axes.size(); ++j) {
    const int64_t axis = NormalizeAxis(spec.axes[j], x.size());
    const SliceRange r =
        ResolveSlice(spec.starts[j], spec.ends[j], spec.steps[j], x[static_cast<size_t>(axis)]);
    if (r.step < 0) Unsupported("Slice with a negative step on a runtime tensor");
    if (r.count == 0) Unsupported("an empty Slice");
    if (r.start == 0 && r.step == 1 && r.count == x[static_cast<size_t>(axis)]) continue;  // all
    cuts.emplace_back(axis, r);
  }
  if (cuts.empty()) {
    Define(0, Emit1(NodeBase(), op_types::kIdentity, {y}, {}, OutputName(0)));
    return;
  }
  for (size_t j = 0; j < cuts.size(); ++j) {
    const auto& [axis, r] = cuts[j];
    Attributes attrs;
    attrs.Set("axis", axis);
    attrs.Set("start", r.start);
    attrs.Set("end", r.end);
    if (r.step != 1) attrs.Set("step", r.step);
    const bool last = j + 1 == cuts.size();
    const std::string name = last ? NodeBase() : fmt::format("{}/axis{}", NodeBase(), axis);
    y = Emit1(name, op_types::kSlice, {y}, std::move(attrs), last ? OutputName(0) : name);
  }
  Define(0, y);
}

void Loader::Expand() {
  const Shape x = InShape(0);
  const std::vector<int64_t> target = KnownInts(1, "shape");
  const Shape out = BroadcastShapes(x, Shape(target.begin(), target.end()));
  if (out == x) {
    Define(0, Emit1(NodeBase(), op_types::kIdentity, {Tensor(0)}, {}, OutputName(0)));
    return;
  }
  // Broadcasting against zeros of the target shape: an IR op type of its own is not worth it.
  TensorId zeros = ZerosOp(NodeBase() + "/zeros", out);
  Define(0, Emit1(NodeBase(), op_types::kAdd, {Tensor(0), zeros}, {}, OutputName(0)));
}

// ONNX LSTM weights [directions, 4 * hidden, columns] in gate order i, o, f, c, as one tensor per
// direction [4 * hidden, columns] in PyTorch's order i, f, g, o. A weight initializer is
// reordered at load time (the parameter then holds PyTorch's layout); a runtime tensor is
// reordered by Split and Concat ops. `bias`: the input is B [directions, 8 * hidden], whose two
// halves (input and recurrent biases) are added.
std::vector<TensorId> Loader::LstmWeights(size_t input, int64_t directions, int64_t hidden,
                                          bool bias) {
  const Value& v = In(input);
  const Shape shape = InShape(input);
  const int64_t rows = bias ? 8 * hidden : 4 * hidden;
  if (shape.size() != (bias ? 2u : 3u) || shape[0] != directions || shape[1] != rows) {
    throw GraphError(fmt::format("LSTM input '{}' has shape {}, expected [{}, {}{}]",
                                 InputName(input), ToString(shape), directions, rows,
                                 bias ? "" : ", ..."));
  }
  const int64_t columns = bias ? 1 : shape[2];
  static constexpr int64_t kFromOnnx[4] = {0, 2, 3, 1};  // PyTorch gate g <- ONNX gate
  const char* direction_names[2] = {"forward", "reverse"};
  std::vector<TensorId> out;
  if (v.known && v.known->trainable) {
    const Known& k = *v.known;
    for (int64_t d = 0; d < directions; ++d) {
      // Biases: two parameters per direction (input and recurrent), as PyTorch has, added by an
      // IR op so that each gets its own gradient.
      for (int half = 0; half < (bias ? 2 : 1); ++half) {
        const std::string suffix = bias ? (half == 0 ? ".input" : ".recurrent") : "";
        const std::string name = directions == 1
                                     ? k.name + suffix
                                     : fmt::format("{}.{}{}", k.name, direction_names[d], suffix);
        Initializer init;
        Shape param_shape = bias ? Shape{4 * hidden} : Shape{4 * hidden, columns};
        if (k.has_data) {
          auto values = std::make_shared<std::vector<float>>();
          for (int64_t g = 0; g < 4; ++g) {
            const int64_t row0 = d * rows + half * 4 * hidden + kFromOnnx[g] * hidden;
            for (int64_t e = row0 * columns; e < (row0 + hidden) * columns; ++e) {
              values->push_back(static_cast<float>(k.f[static_cast<size_t>(e)]));
            }
          }
          init.kind = Initializer::Kind::kValues;
          init.values = std::move(values);
        } else if (bias) {
          init.kind = Initializer::Kind::kZeros;
        } else {
          init.kind = Initializer::Kind::kNormal;
          init.stddev = options_.init_stddev;
        }
        out.push_back(
            graph_.AddTensor({.name = graph_.FindTensor(name) ? UniqueTensorName(name) : name,
                              .shape = param_shape,
                              .kind = TensorKind::kParameter,
                              .init = init}));
      }
      if (bias) {
        TensorId sum =
            Sub(fmt::format("bias{}", d), op_types::kAdd, {out[out.size() - 2], out.back()});
        out.resize(out.size() - 2);
        out.push_back(sum);
      }
    }
    return out;
  }
  // Runtime (or constant) weights: reorder with ops.
  TensorId w = Tensor(input, Role::kConstant);
  const std::string tag = bias ? "B" : (input == 1 ? "W" : "R");
  if (bias) {
    TensorId wb = SliceAxis(tag + "/input", w, 1, 0, 4 * hidden);
    TensorId rb = SliceAxis(tag + "/recurrent", w, 1, 4 * hidden, 8 * hidden);
    w = Sub(tag + "/sum", op_types::kAdd, {wb, rb});
  }
  Attributes split;
  split.Set("axis", int64_t{1});
  split.Set("sizes", std::vector<int64_t>(4, hidden));
  std::vector<std::string> names;
  for (int g = 0; g < 4; ++g) names.push_back(fmt::format("{}/{}/gate{}", NodeBase(), tag, g));
  std::vector<TensorId> gates =
      Emit(NodeBase() + "/" + tag + "/split", op_types::kSplit, {w}, std::move(split), names);
  Attributes concat;
  concat.Set("axis", int64_t{1});
  TensorId reordered = Sub(tag + "/reorder", op_types::kConcat,
                           {gates[0], gates[2], gates[3], gates[1]}, std::move(concat));
  for (int64_t d = 0; d < directions; ++d) {
    TensorId one = directions == 1
                       ? reordered
                       : SliceAxis(fmt::format("{}/dir{}", tag, d), reordered, 0, d, d + 1);
    out.push_back(ReshapeTo(fmt::format("{}/dir{}/matrix", tag, d), one,
                            bias ? Shape{4 * hidden} : Shape{4 * hidden, columns}));
  }
  return out;
}

void Loader::Lstm() {
  const std::string direction = AttrString("direction", "forward");
  if (direction != "forward" && direction != "reverse" && direction != "bidirectional") {
    throw GraphError(fmt::format("unknown direction '{}'", direction));
  }
  const int64_t directions = direction == "bidirectional" ? 2 : 1;
  if (HasInput(7)) Unsupported("LSTM peepholes (input P)");
  if (Attr("clip")) Unsupported("LSTM cell clipping");
  if (AttrInt("input_forget", 0) != 0) Unsupported("LSTM input_forget");
  if (const pb::AttributeProto* a = Attr("activations")) {
    const std::vector<std::string> standard = {"Sigmoid", "Tanh", "Tanh"};
    for (int k = 0; k < a->strings_size(); ++k) {
      if (a->strings(k) != standard[static_cast<size_t>(k % 3)]) {
        Unsupported("LSTM activations other than Sigmoid, Tanh, Tanh");
      }
    }
  }
  const bool batch_major = AttrInt("layout", 0) != 0;
  const Shape x = InShape(0);
  if (x.size() != 3) throw GraphError(fmt::format("LSTM input X has shape {}", ToString(x)));
  const int64_t steps = batch_major ? x[1] : x[0], batch = batch_major ? x[0] : x[1],
                features = x[2];
  const int64_t hidden = AttrInt("hidden_size", InShape(2).size() == 3 ? InShape(2)[2] : 0);
  if (hidden <= 0 || hidden > (int64_t{1} << 30)) {
    throw GraphError(fmt::format("LSTM hidden_size {} is missing or out of range", hidden));
  }
  if (steps * directions > kMaxUnrolledCells) {
    throw GraphError(fmt::format("an LSTM of {} steps is too long to unroll", steps));
  }
  if (HasInput(4)) {
    for (int64_t length : KnownInts(4, "sequence_lens")) {
      if (length != steps) Unsupported("LSTM sequences of different lengths (sequence_lens)");
    }
  }
  const std::vector<TensorId> w = LstmWeights(1, directions, hidden, false);
  const std::vector<TensorId> r = LstmWeights(2, directions, hidden, false);
  const std::vector<TensorId> b =
      HasInput(3) ? LstmWeights(3, directions, hidden, true) : std::vector<TensorId>();

  // Initial states per direction: given [directions, batch, hidden] (or [batch, directions,
  // hidden] batch-major), or zeros.
  auto initial = [&](size_t input, const char* what) {
    std::vector<TensorId> out;
    if (!HasInput(input)) {
      TensorId zeros = ZerosOp(fmt::format("{}/{}0", NodeBase(), what), {batch, hidden});
      return std::vector<TensorId>(static_cast<size_t>(directions), zeros);
    }
    TensorId all = Tensor(input, Role::kConstant);
    for (int64_t d = 0; d < directions; ++d) {
      TensorId one = directions == 1 ? all
                                     : SliceAxis(fmt::format("{}0/dir{}", what, d), all,
                                                 batch_major ? 1 : 0, d, d + 1);
      out.push_back(ReshapeTo(fmt::format("{}0/dir{}/matrix", what, d), one, {batch, hidden}));
    }
    return out;
  };
  const std::vector<TensorId> h0 = initial(5, "h"), c0 = initial(6, "c");

  // x_t [batch, features] for every step.
  std::vector<TensorId> xs;
  TensorId xin = Tensor(0);
  const int64_t time_axis = batch_major ? 1 : 0;
  std::vector<TensorId> pieces;
  if (steps == 1) {
    pieces = {xin};
  } else {
    Attributes split;
    split.Set("axis", time_axis);
    split.Set("sizes", std::vector<int64_t>(static_cast<size_t>(steps), 1));
    std::vector<std::string> names;
    for (int64_t t = 0; t < steps; ++t) names.push_back(fmt::format("{}/x{}", NodeBase(), t));
    pieces = Emit(NodeBase() + "/split_time", op_types::kSplit, {xin}, std::move(split), names);
  }
  for (int64_t t = 0; t < steps; ++t) {
    xs.push_back(
        ReshapeTo(fmt::format("x{}/matrix", t), pieces[static_cast<size_t>(t)], {batch, features}));
  }

  // Unrolled: one LstmCell per direction and step.
  std::vector<std::vector<TensorId>> hs(static_cast<size_t>(directions),
                                        std::vector<TensorId>(static_cast<size_t>(steps)));
  std::vector<TensorId> h_last(static_cast<size_t>(directions)),
      c_last(static_cast<size_t>(directions));
  for (int64_t d = 0; d < directions; ++d) {
    const bool reverse = direction == "reverse" || d == 1;
    TensorId h = h0[static_cast<size_t>(d)], c = c0[static_cast<size_t>(d)];
    for (int64_t s = 0; s < steps; ++s) {
      const int64_t t = reverse ? steps - 1 - s : s;
      std::vector<TensorId> inputs = {xs[static_cast<size_t>(t)], h, c, w[static_cast<size_t>(d)],
                                      r[static_cast<size_t>(d)]};
      if (!b.empty()) inputs.push_back(b[static_cast<size_t>(d)]);
      const std::string name = fmt::format("{}/d{}/t{}", NodeBase(), d, t);
      std::vector<TensorId> hc =
          Emit(name, op_types::kLstmCell, inputs, {}, {name + "/h", name + "/c"});
      h = hc[0];
      c = hc[1];
      hs[static_cast<size_t>(d)][static_cast<size_t>(t)] = h;
    }
    h_last[static_cast<size_t>(d)] = h;
    c_last[static_cast<size_t>(d)] = c;
  }

  // Y: [steps, directions, batch, hidden] (batch-major: [batch, steps, directions, hidden]).
  if (OutputLive(0)) {
    std::vector<TensorId> per_direction;
    for (int64_t d = 0; d < directions; ++d) {
      Attributes attrs;
      attrs.Set("axis", int64_t{batch_major ? 1 : 0});
      TensorId joined = steps == 1 ? hs[static_cast<size_t>(d)][0]
                                   : Sub(fmt::format("Y/dir{}/concat", d), op_types::kConcat,
                                         hs[static_cast<size_t>(d)], std::move(attrs));
      const Shape shape =
          batch_major ? Shape{batch, steps, 1, hidden} : Shape{steps, 1, batch, hidden};
      per_direction.push_back(directions == 1
                                  ? ReshapeTo("Y", joined, shape, OutputName(0))
                                  : ReshapeTo(fmt::format("Y/dir{}", d), joined, shape));
    }
    if (directions == 1) {
      Define(0, per_direction[0]);
    } else {
      Attributes attrs;
      attrs.Set("axis", int64_t{batch_major ? 2 : 1});
      Define(0, Emit1(NodeBase() + "/Y", op_types::kConcat, per_direction, std::move(attrs),
                      OutputName(0)));
    }
  }
  // Y_h, Y_c: [directions, batch, hidden] (batch-major: [batch, directions, hidden]).
  auto final_state = [&](size_t output, const std::vector<TensorId>& last, const char* what) {
    if (!OutputLive(output)) return;
    TensorId joined = last[0];
    if (directions > 1) {
      Attributes attrs;
      attrs.Set("axis", int64_t{batch_major ? 1 : 0});
      joined = Sub(fmt::format("{}/concat", what), op_types::kConcat, last, std::move(attrs));
    }
    const Shape shape =
        batch_major ? Shape{batch, directions, hidden} : Shape{directions, batch, hidden};
    Define(output, ReshapeTo(what, joined, shape, OutputName(output)));
  };
  final_state(1, h_last, "Y_h");
  final_state(2, c_last, "Y_c");
}

void Loader::AttachOutputsAndLoss() {
  const pb::GraphProto& g = model_.graph();
  const int outputs = options_.loss ? 1 : g.output_size();
  std::vector<TensorId> ids;
  for (int k = 0; k < outputs; ++k) {
    const std::string& name = g.output(k).name();
    auto it = values_.find(name);
    if (it == values_.end()) {
      throw GraphError(fmt::format("graph output '{}' is produced by no node", name));
    }
    TensorId id = Materialize(it->second, name, Role::kConstant);
    // Every output is an IR tensor of its own name (callers look outputs up by it).
    if (graph_.tensor(id).name != name) {
      id = Emit1(name, op_types::kIdentity, {id}, {}, name, true);
    }
    ids.push_back(id);
  }
  if (!options_.loss) return;
  TensorId logits = ids[0];
  const Shape shape = graph_.tensor(logits).shape;
  if (shape.size() < 2) {
    throw GraphError(fmt::format("output '{}' has shape {}; a loss needs [batch, classes]",
                                 graph_.tensor(logits).name, ToString(shape)));
  }
  const int64_t batch = shape[0];
  if (shape.size() > 2) {
    Attributes attrs;
    attrs.Set("shape", Shape{batch, Product(shape, 1, shape.size())});
    logits = Emit1(UniqueOpName("loss/flatten"), op_types::kReshape, {logits}, std::move(attrs),
                   "loss/flatten");
  }
  TensorId labels = graph_.AddTensor({.name = UniqueTensorName("labels"),
                                      .shape = {batch},
                                      .dtype = DType::kInt64,
                                      .kind = TensorKind::kLabel});
  Attributes attrs;
  attrs.Set("normalizer", options_.loss_normalizer > 0 ? options_.loss_normalizer : batch);
  Emit1(UniqueOpName("loss"), op_types::kSoftmaxCrossEntropy, {logits, labels}, std::move(attrs),
        "loss");
}

}  // namespace

Graph LoadOnnx(const std::filesystem::path& file, const OnnxOptions& options) {
  if (options.batch_size && *options.batch_size < 1) {
    throw GraphError(fmt::format("batch size must be at least 1, is {}", *options.batch_size));
  }
  return Loader(file, options).Load();
}

OnnxTensor ReadOnnxTensor(const std::filesystem::path& file) {
  const std::string bytes = ReadFile(file);
  pb::TensorProto proto;
  if (!proto.ParseFromString(bytes)) {
    throw GraphError(fmt::format("{}: not a serialised ONNX TensorProto", file.string()));
  }
  Known k;
  try {
    k = FromTensorProto(proto, proto.name());
  } catch (const GraphError& error) {
    throw GraphError(fmt::format("{}: {}", file.string(), error.what()));
  }
  if (!k.has_data) throw GraphError(fmt::format("{}: the tensor has no data", file.string()));
  OnnxTensor t;
  t.name = proto.name();
  t.shape = k.shape;
  if (k.is_float()) {
    t.dtype = DType::kFloat32;
    t.floats.assign(k.f.begin(), k.f.end());
  } else {
    t.dtype = DType::kInt64;
    t.ints = k.i;
  }
  return t;
}

OnnxSignature ReadOnnxSignature(const std::filesystem::path& file) {
  const pb::ModelProto model = ParseModel(file);
  std::unordered_set<std::string> initializers;
  for (const pb::TensorProto& t : model.graph().initializer()) initializers.insert(t.name());
  OnnxSignature signature;
  for (const pb::ValueInfoProto& v : model.graph().input()) {
    if (initializers.count(v.name()) == 0) signature.inputs.push_back(v.name());
  }
  for (const pb::ValueInfoProto& v : model.graph().output()) signature.outputs.push_back(v.name());
  return signature;
}

}  // namespace placer::graph
