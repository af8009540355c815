// Internal to graph/: the registry of IR op types (ops.h) and the helpers their shape rules share.
// Each op family registers its types in its own file (ops_elementwise.cc, ops_tensor.cc,
// ops_reduce.cc, ops_nn.cc, ops_training.cc); ops.cc assembles the table and answers ops.h.
#pragma once

#include <functional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "graph/ir.h"

namespace placer::graph {

using ShapeRule = std::function<std::vector<Shape>(const Graph&, const Op&)>;
using FlopRule = std::function<double(const Graph&, const Op&)>;

// The element type of an op's outputs.
enum class OutputDType : uint8_t {
  kFloat,       // every output float32 (the default: arithmetic)
  kLikeInput0,  // every output has input 0's type (data movement, int-capable arithmetic)
  kLikeInput1,  // every output has input 1's type (Where: its branches')
  kInt64,       // every output int64 (comparisons, logic, indices; bool is 0/1)
  kCastTo,      // the attribute "to": "float32" or "int64"
  kDTypeAttr,   // the attribute "dtype" when given, else float32 (Constant)
  kTopK,        // values like input 0, indices int64
};

struct OpTypeInfo {
  ShapeRule shapes;
  FlopRule flops;
  OutputDType dtype = OutputDType::kFloat;
  // Each output element depends only on the inputs' elements at its own (broadcast) index, so the
  // op can run on any slice of its inputs (graph/tensor_parallel.h). Dropout is not: its mask is
  // drawn over the whole tensor.
  bool elementwise = false;
};

using OpTable = std::unordered_map<std::string, OpTypeInfo>;

// One per family file.
void AddElementwiseTypes(OpTable& table);
void AddTensorTypes(OpTable& table);
void AddReduceTypes(OpTable& table);
void AddNnTypes(OpTable& table);
void AddTrainingTypes(OpTable& table);

// ---- helpers of the shape rules ----
const Shape& InputShape(const Graph& graph, const Op& op, size_t index);
void ExpectInputs(const Op& op, size_t min_count, size_t max_count);
void ExpectRank(const Graph& graph, const Op& op, size_t index, size_t rank);
void ExpectFloat(const Graph& graph, const Op& op, size_t index);
void ExpectInt(const Graph& graph, const Op& op, size_t index);
// Inputs `first` and `second` have one element type.
void ExpectSameDType(const Graph& graph, const Op& op, size_t first, size_t second);
// Two non-negative integers (a [height, width] pair).
std::pair<int64_t, int64_t> Pair(const Op& op, const std::string& name);
// Attribute `name` as `count` integers of at least `minimum`; `fallback` when absent (or an
// error when it is empty too).
std::vector<int64_t> Ints(const Op& op, const std::string& name, size_t count, int64_t minimum,
                          std::vector<int64_t> fallback = {});
// An axis in [-rank, rank) made non-negative.
size_t Axis(int64_t axis, size_t rank);
// Numpy broadcasting of inputs `left` and `right`, or an error naming both.
Shape Broadcast(const Graph& g, const Op& op, size_t left, size_t right);
Shape BroadcastShapes(const Shape& a, const Shape& b);
double Numel(const Shape& shape);
double OutputNumelOf(const Graph& g, const Op& op);
// An optional input `index` is a vector with one entry per output channel or feature.
void ExpectBias(const Graph& g, const Op& op, size_t index, int64_t outputs);
// Output extent of a sliding window (dilated kernel, padding before and after, floor or ceil as
// PyTorch computes it); throws when the window does not fit.
int64_t WindowExtent(int64_t size, int64_t kernel, int64_t stride, int64_t pad_before,
                     int64_t pad_after, int64_t dilation = 1, bool ceil_mode = false);
void ExpectPositiveEpsilon(const Op& op);
// Elements a Slice op takes (ops.h): positive steps wrap and clamp start and end as numpy does,
// negative steps take resolved bounds (start in [0, extent), end in [-1, start]).
int64_t SliceCount(int64_t extent, int64_t start, int64_t end, int64_t step);

std::vector<Shape> SameShape(const Graph& g, const Op& op);  // one input, its shape out
FlopRule PerOutput(double flops);
FlopRule PerInput(double flops);
double Free(const Graph&, const Op&);

}  // namespace placer::graph
