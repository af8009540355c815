#include "graph/ops.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "graph/op_rules.h"

namespace placer::graph {

// ---- helpers of the shape rules (op_rules.h) ----

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

void ExpectInt(const Graph& graph, const Op& op, size_t index) {
  const Tensor& t = graph.tensor(op.inputs[index]);
  if (t.dtype != DType::kInt64) {
    throw GraphError(fmt::format("input '{}' must be int64, is {}", t.name, ToString(t.dtype)));
  }
}

void ExpectSameDType(const Graph& graph, const Op& op, size_t first, size_t second) {
  const Tensor& a = graph.tensor(op.inputs[first]);
  const Tensor& b = graph.tensor(op.inputs[second]);
  if (a.dtype != b.dtype) {
    throw GraphError(fmt::format("inputs '{}' ({}) and '{}' ({}) differ in type", a.name,
                                 ToString(a.dtype), b.name, ToString(b.dtype)));
  }
}

std::pair<int64_t, int64_t> Pair(const Op& op, const std::string& name) {
  const auto& values = op.attrs.GetInts(name);
  if (values.size() != 2 || values[0] < 0 || values[1] < 0) {
    throw GraphError(fmt::format("attribute '{}' must be two non-negative integers", name));
  }
  return {values[0], values[1]};
}

std::vector<int64_t> Ints(const Op& op, const std::string& name, size_t count, int64_t minimum,
                          std::vector<int64_t> fallback) {
  if (!op.attrs.Has(name) && fallback.empty()) {
    throw GraphError(fmt::format("attribute '{}' is missing", name));
  }
  std::vector<int64_t> values = op.attrs.Has(name) ? op.attrs.GetInts(name) : std::move(fallback);
  if (values.size() != count) {
    throw GraphError(fmt::format("attribute '{}' must have {} entries", name, count));
  }
  for (int64_t v : values) {
    if (v < minimum) {
      throw GraphError(fmt::format("attribute '{}' must be at least {}", name, minimum));
    }
  }
  return values;
}

size_t Axis(int64_t axis, size_t rank) {
  const auto r = static_cast<int64_t>(rank);
  if (axis < -r || axis >= r) {
    throw GraphError(fmt::format("axis {} is out of range for rank {}", axis, rank));
  }
  return static_cast<size_t>(axis < 0 ? axis + r : axis);
}

Shape BroadcastShapes(const Shape& a, const Shape& b) {
  Shape out(std::max(a.size(), b.size()));
  for (size_t i = 0; i < out.size(); ++i) {
    int64_t da = i < out.size() - a.size() ? 1 : a[i - (out.size() - a.size())];
    int64_t db = i < out.size() - b.size() ? 1 : b[i - (out.size() - b.size())];
    if (da != db && da != 1 && db != 1) {
      throw GraphError(fmt::format("shapes {} and {} do not broadcast", ToString(a), ToString(b)));
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Shape Broadcast(const Graph& g, const Op& op, size_t left, size_t right) {
  try {
    return BroadcastShapes(InputShape(g, op, left), InputShape(g, op, right));
  } catch (const GraphError&) {
    throw GraphError(fmt::format("inputs '{}' {} and '{}' {} do not broadcast",
                                 g.tensor(op.inputs[left]).name, ToString(InputShape(g, op, left)),
                                 g.tensor(op.inputs[right]).name,
                                 ToString(InputShape(g, op, right))));
  }
}

double Numel(const Shape& shape) { return static_cast<double>(NumElements(shape)); }

double OutputNumelOf(const Graph& g, const Op& op) { return Numel(g.tensor(op.outputs[0]).shape); }

void ExpectBias(const Graph& g, const Op& op, size_t index, int64_t outputs) {
  if (op.inputs.size() > index && InputShape(g, op, index) != Shape{outputs}) {
    throw GraphError(
        fmt::format("bias '{}' must have shape [{}]", g.tensor(op.inputs[index]).name, outputs));
  }
}

int64_t WindowExtent(int64_t size, int64_t kernel, int64_t stride, int64_t pad_before,
                     int64_t pad_after, int64_t dilation, bool ceil_mode) {
  if (stride <= 0) throw GraphError("stride must be positive");
  if (dilation <= 0) throw GraphError("dilation must be positive");
  if (kernel <= 0) throw GraphError("kernel must be positive");
  // In 128 bits: the attributes come from files, and their products must not wrap.
  const __int128 wide = static_cast<__int128>(size) + pad_before + pad_after -
                        static_cast<__int128>(dilation) * (kernel - 1) - 1;
  if (wide > (int64_t{1} << 62) || wide < -(int64_t{1} << 62)) {
    throw GraphError("window arithmetic out of range");
  }
  const auto span = static_cast<int64_t>(wide);
  if (span < 0) {
    throw GraphError(
        fmt::format("window {} (dilation {}) does not fit input extent {} (padding {})", kernel,
                    dilation, size, pad_before));
  }
  int64_t out = (ceil_mode ? (span + stride - 1) / stride : span / stride) + 1;
  // PyTorch's rule: the last window must start inside the input or its leading padding.
  if (ceil_mode && (out - 1) * stride >= size + pad_before) --out;
  return out;
}

void ExpectPositiveEpsilon(const Op& op) {
  if (op.attrs.Has("epsilon") && !(op.attrs.GetFloat("epsilon") > 0)) {
    throw GraphError("epsilon must be positive");
  }
}

std::vector<Shape> SameShape(const Graph& g, const Op& op) {
  ExpectInputs(op, 1, 1);
  return {InputShape(g, op, 0)};
}

FlopRule PerOutput(double flops) {
  return [flops](const Graph& g, const Op& op) { return flops * OutputNumelOf(g, op); };
}

FlopRule PerInput(double flops) {
  return [flops](const Graph& g, const Op& op) { return flops * Numel(InputShape(g, op, 0)); };
}

double Free(const Graph&, const Op&) { return 0.0; }

// ---- the registry ----

namespace {

const OpTable& Registry() {
  static const OpTable* registry = [] {
    auto* table = new OpTable;
    AddElementwiseTypes(*table);
    AddTensorTypes(*table);
    AddReduceTypes(*table);
    AddNnTypes(*table);
    AddTrainingTypes(*table);
    return table;
  }();
  return *registry;
}

const OpTypeInfo& Lookup(const std::string& type) {
  auto it = Registry().find(type);
  if (it == Registry().end()) throw GraphError(fmt::format("unknown op type '{}'", type));
  return it->second;
}

DType ParseDType(const Op& op, const std::string& attr) {
  const std::string& name = op.attrs.GetString(attr);
  if (name == "float32") return DType::kFloat32;
  if (name == "int64") return DType::kInt64;
  throw GraphError(
      fmt::format("attribute '{}' is '{}'; expected 'float32' or 'int64'", attr, name));
}

}  // namespace

bool IsKnownOpType(const std::string& type) { return Registry().count(type) != 0; }

bool IsElementwise(const std::string& type) {
  const auto it = Registry().find(type);
  return it != Registry().end() && it->second.elementwise;
}

std::vector<std::string> KnownOpTypes() {
  std::vector<std::string> types;
  for (const auto& [name, info] : Registry()) types.push_back(name);
  std::sort(types.begin(), types.end());
  return types;
}

std::vector<Shape> InferOutputShapes(const Graph& graph, const Op& op) {
  return Lookup(op.type).shapes(graph, op);
}

InferredOutputs InferOutputs(const Graph& graph, const Op& op) {
  try {
    return {InferOutputShapes(graph, op), InferOutputDTypes(graph, op)};
  } catch (const GraphError& error) {
    throw GraphError(fmt::format("op '{}' ({}): {}", op.name, op.type, error.what()));
  }
}

std::vector<DType> InferOutputDTypes(const Graph& graph, const Op& op) {
  const OpTypeInfo& info = Lookup(op.type);
  const size_t outputs = InferOutputShapes(graph, op).size();
  switch (info.dtype) {
    case OutputDType::kFloat:
      return std::vector<DType>(outputs, DType::kFloat32);
    case OutputDType::kLikeInput0:
      return std::vector<DType>(
          outputs, op.inputs.empty() ? DType::kFloat32 : graph.tensor(op.inputs[0]).dtype);
    case OutputDType::kLikeInput1:
      return std::vector<DType>(outputs, graph.tensor(op.inputs.at(1)).dtype);
    case OutputDType::kInt64:
      return std::vector<DType>(outputs, DType::kInt64);
    case OutputDType::kCastTo:
      return std::vector<DType>(outputs, ParseDType(op, "to"));
    case OutputDType::kDTypeAttr:
      return std::vector<DType>(outputs,
                                op.attrs.Has("dtype") ? ParseDType(op, "dtype") : DType::kFloat32);
    case OutputDType::kTopK:
      return {graph.tensor(op.inputs[0]).dtype, DType::kInt64};
  }
  return {};
}

double OpFlops(const Graph& graph, const Op& op) { return Lookup(op.type).flops(graph, op); }

int64_t OpOutputBytes(const Graph& graph, const Op& op) {
  if (op.type == op_types::kSgdUpdate) return graph.tensor(op.inputs[0]).bytes();
  int64_t bytes = 0;
  for (TensorId id : op.outputs) bytes += graph.tensor(id).bytes();
  return bytes;
}

}  // namespace placer::graph
