// Data-movement op types: constants, reshaping, slicing, joining, padding, indexing (Gather and
// Scatter) and resizing. No arithmetic: their cost is the bytes they write.
#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "graph/op_rules.h"
#include "graph/ops.h"

namespace placer::graph {
namespace {

std::vector<Shape> ConstantShapes(const Graph&, const Op& op) {
  ExpectInputs(op, 0, 0);
  Shape shape = op.attrs.GetInts("shape");
  const std::string& values = op.attrs.GetString("values");
  const bool ints = op.attrs.Has("dtype") && op.attrs.GetString("dtype") == "int64";
  if (op.attrs.Has("dtype") && !ints && op.attrs.GetString("dtype") != "float32") {
    throw GraphError(
        fmt::format("dtype '{}' is neither float32 nor int64", op.attrs.GetString("dtype")));
  }
  const int64_t elements = NumElements(shape);
  const int64_t size = ints ? 8 : 4;
  if (static_cast<int64_t>(values.size()) != elements * size) {
    throw GraphError(fmt::format("values hold {} bytes, shape {} needs {}", values.size(),
                                 ToString(shape), elements * size));
  }
  return {shape};
}

std::vector<Shape> FlattenShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 1, 1);
  const Shape& x = InputShape(g, op, 0);
  if (x.empty()) throw GraphError("cannot flatten a scalar");
  return {{x[0], NumElements(Shape(x.begin() + 1, x.end()))}};
}

std::vector<Shape> ReshapeShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 1, 1);
  Shape shape = op.attrs.GetInts("shape");
  for (int64_t d : shape) {
    if (d < 0) throw GraphError(fmt::format("shape {} has a negative extent", ToString(shape)));
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
    ExpectSameDType(g, op, 0, i);
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
    if (size < 0) throw GraphError("split sizes must not be negative");
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
  out[axis] = SliceCount(out[axis], op.attrs.GetInt("start"), op.attrs.GetInt("end"), step);
  return {out};
}

std::vector<Shape> ExpandShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 1, 1);
  const Shape& target = op.attrs.GetInts("shape");
  const Shape out = BroadcastShapes(InputShape(g, op, 0), target);
  if (out != target) {
    throw GraphError(
        fmt::format("{} does not expand to {}", ToString(InputShape(g, op, 0)), ToString(target)));
  }
  return {out};
}

std::vector<Shape> TileShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 1, 1);
  Shape out = InputShape(g, op, 0);
  const std::vector<int64_t> repeats = Ints(op, "repeats", out.size(), 1);
  for (size_t d = 0; d < out.size(); ++d) {
    if (__builtin_mul_overflow(out[d], repeats[d], &out[d])) throw GraphError("tile too large");
  }
  NumElements(out);
  return {out};
}

std::vector<Shape> PadShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 1, 1);
  Shape out = InputShape(g, op, 0);
  const std::vector<int64_t> pads = Ints(op, "pads", 2 * out.size(), 0);
  const std::string& mode = op.attrs.GetString("mode");
  if (mode != "constant" && mode != "reflect" && mode != "edge") {
    throw GraphError(fmt::format("unknown pad mode '{}'", mode));
  }
  for (size_t d = 0; d < out.size(); ++d) {
    const int64_t before = pads[d], after = pads[d + out.size()];
    if (mode == "reflect" && (before >= out[d] || after >= out[d]) && (before || after)) {
      throw GraphError(fmt::format("reflect padding {} exceeds axis {} of extent {}",
                                   std::max(before, after), d, out[d]));
    }
    if (mode == "edge" && out[d] == 0 && (before || after)) {
      throw GraphError(fmt::format("edge padding of the empty axis {}", d));
    }
    if (__builtin_add_overflow(out[d], before, &out[d]) ||
        __builtin_add_overflow(out[d], after, &out[d])) {
      throw GraphError("padding too large");
    }
  }
  NumElements(out);
  return {out};
}

std::vector<Shape> TriluShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 1, 1);
  if (InputShape(g, op, 0).size() < 2) throw GraphError("needs an input of rank 2 or more");
  op.attrs.GetInt("upper");
  op.attrs.GetInt("k");
  return {InputShape(g, op, 0)};
}

std::vector<Shape> CumSumShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 1, 1);
  Axis(op.attrs.GetInt("axis"), InputShape(g, op, 0).size());
  return {InputShape(g, op, 0)};
}

std::vector<Shape> DepthToSpaceShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 1, 1);
  ExpectRank(g, op, 0, 4);
  const Shape& x = InputShape(g, op, 0);
  const int64_t b = op.attrs.GetInt("blocksize");
  if (b < 1 || b > (int64_t{1} << 31) || x[1] % (b * b) != 0) {
    throw GraphError(fmt::format("blocksize {} squared must divide the {} channels", b, x[1]));
  }
  const std::string mode = op.attrs.Has("mode") ? op.attrs.GetString("mode") : "DCR";
  if (mode != "DCR" && mode != "CRD") throw GraphError(fmt::format("unknown mode '{}'", mode));
  Shape out = {x[0], x[1] / (b * b), 0, 0};
  if (__builtin_mul_overflow(x[2], b, &out[2]) || __builtin_mul_overflow(x[3], b, &out[3])) {
    throw GraphError("blocksize too large");
  }
  return {out};
}

std::vector<Shape> SpaceToDepthShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 1, 1);
  ExpectRank(g, op, 0, 4);
  const Shape& x = InputShape(g, op, 0);
  const int64_t b = op.attrs.GetInt("blocksize");
  if (b < 1 || b > (int64_t{1} << 31) || x[2] % b != 0 || x[3] % b != 0) {
    throw GraphError(fmt::format("blocksize {} must divide height {} and width {}", b, x[2], x[3]));
  }
  return {{x[0], x[1] * b * b, x[2] / b, x[3] / b}};
}

std::vector<Shape> GatherShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 2, 2);
  ExpectInt(g, op, 1);
  const Shape& data = InputShape(g, op, 0);
  if (data.empty()) throw GraphError("cannot gather from a scalar");
  const size_t axis = Axis(op.attrs.Has("axis") ? op.attrs.GetInt("axis") : 0, data.size());
  Shape out(data.begin(), data.begin() + static_cast<std::ptrdiff_t>(axis));
  const Shape& indices = InputShape(g, op, 1);
  out.insert(out.end(), indices.begin(), indices.end());
  out.insert(out.end(), data.begin() + static_cast<std::ptrdiff_t>(axis) + 1, data.end());
  return {out};
}

std::vector<Shape> GatherElementsShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 2, 2);
  ExpectInt(g, op, 1);
  const Shape& data = InputShape(g, op, 0);
  const Shape& indices = InputShape(g, op, 1);
  if (data.size() != indices.size() || data.empty()) {
    throw GraphError("data and indices must have one rank");
  }
  const size_t axis = Axis(op.attrs.GetInt("axis"), data.size());
  for (size_t d = 0; d < data.size(); ++d) {
    if (d != axis && indices[d] > data[d]) {
      throw GraphError(fmt::format("indices {} exceed data {} on axis {}", ToString(indices),
                                   ToString(data), d));
    }
  }
  return {indices};
}

// ONNX GatherND: indices [..., k] pick slices data[b..., i0, ..., ik-1, :].
std::vector<Shape> GatherNdShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 2, 2);
  ExpectInt(g, op, 1);
  const Shape& data = InputShape(g, op, 0);
  const Shape& indices = InputShape(g, op, 1);
  const auto batch =
      static_cast<size_t>(op.attrs.Has("batch_dims") ? op.attrs.GetInt("batch_dims") : 0);
  if (indices.empty() || batch >= indices.size() || batch >= data.size()) {
    throw GraphError("indices need a last axis and batch_dims below both ranks");
  }
  const auto k = static_cast<size_t>(indices.back());
  if (k < 1 || batch + k > data.size()) {
    throw GraphError(fmt::format("index tuples of {} do not fit data of rank {}", k, data.size()));
  }
  for (size_t d = 0; d < batch; ++d) {
    if (data[d] != indices[d]) throw GraphError("batch axes of data and indices differ");
  }
  Shape out(indices.begin(), indices.end() - 1);
  out.insert(out.end(), data.begin() + static_cast<std::ptrdiff_t>(batch + k), data.end());
  return {out};
}

void ExpectReduction(const Op& op) {
  if (!op.attrs.Has("reduction")) return;
  const std::string& r = op.attrs.GetString("reduction");
  if (r != "none" && r != "add" && r != "mul") {
    throw GraphError(fmt::format("unknown reduction '{}'", r));
  }
}

std::vector<Shape> ScatterElementsShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 3, 3);
  ExpectInt(g, op, 1);
  ExpectSameDType(g, op, 0, 2);
  const Shape& data = InputShape(g, op, 0);
  if (InputShape(g, op, 1) != InputShape(g, op, 2) || InputShape(g, op, 1).size() != data.size()) {
    throw GraphError("indices and updates must have one shape, of data's rank");
  }
  Axis(op.attrs.GetInt("axis"), data.size());
  ExpectReduction(op);
  return {data};
}

std::vector<Shape> ScatterNdShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 3, 3);
  ExpectInt(g, op, 1);
  ExpectSameDType(g, op, 0, 2);
  const Shape& data = InputShape(g, op, 0);
  const Shape& indices = InputShape(g, op, 1);
  if (indices.empty() || indices.back() < 1 || indices.back() > static_cast<int64_t>(data.size())) {
    throw GraphError("index tuples do not fit data");
  }
  Shape updates(indices.begin(), indices.end() - 1);
  updates.insert(updates.end(), data.begin() + indices.back(), data.end());
  if (InputShape(g, op, 2) != updates) {
    throw GraphError(fmt::format("updates must have shape {}", ToString(updates)));
  }
  ExpectReduction(op);
  return {data};
}

std::vector<Shape> ResizeShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 1, 1);
  ExpectFloat(g, op, 0);
  const Shape& out = op.attrs.GetInts("shape");
  if (out.size() != InputShape(g, op, 0).size()) {
    throw GraphError("the output shape must have the input's rank");
  }
  for (int64_t d : out) {
    if (d < 1) throw GraphError(fmt::format("output shape {} is empty", ToString(out)));
  }
  const std::vector<double>& scales = op.attrs.GetFloats("scales");
  if (scales.size() != out.size()) throw GraphError("scales must have one entry per axis");
  for (double scale : scales) {
    if (!(scale > 0)) throw GraphError("scales must be positive");
  }
  const std::string& mode = op.attrs.GetString("mode");
  if (mode != "nearest" && mode != "linear" && mode != "cubic") {
    throw GraphError(fmt::format("unknown mode '{}'", mode));
  }
  const std::string& coordinate = op.attrs.GetString("coordinate");
  if (coordinate != "half_pixel" && coordinate != "pytorch_half_pixel" &&
      coordinate != "align_corners" && coordinate != "asymmetric") {
    throw GraphError(fmt::format("unknown coordinate transformation '{}'", coordinate));
  }
  NumElements(out);
  return {out};
}

double ResizeFlops(const Graph& g, const Op& op) {
  const std::string& mode = op.attrs.GetString("mode");
  return OutputNumelOf(g, op) * (mode == "nearest" ? 0 : mode == "linear" ? 4 : 12);
}

}  // namespace

int64_t SliceCount(int64_t extent, int64_t start, int64_t end, int64_t step) {
  if (step == 0) throw GraphError("slice step is 0");
  if (step > 0) {
    auto clamp = [extent](int64_t i) {
      return std::clamp(i < 0 ? i + extent : i, int64_t{0}, extent);
    };
    start = clamp(start);
    end = clamp(end);
    return end > start ? (end - start - 1) / step + 1 : 0;
  }
  // Negative steps take resolved bounds: start in [0, extent), end in [-1, start].
  if (start < 0 || start >= extent || end < -1 || end > start) {
    throw GraphError(fmt::format("slice from {} to {} by {} is not resolved for extent {}", start,
                                 end, step, extent));
  }
  if (step == std::numeric_limits<int64_t>::min()) return 1;
  return (start - end - 1) / -step + 1;
}

void AddTensorTypes(OpTable& table) {
  namespace t = op_types;
  const auto any = OutputDType::kLikeInput0;
  table[t::kConstant] = {ConstantShapes, Free, OutputDType::kDTypeAttr};
  table[t::kFlatten] = {FlattenShapes, Free, any};
  table[t::kReshape] = {ReshapeShapes, Free, any};
  table[t::kTranspose] = {TransposeShapes, Free, any};
  table[t::kConcat] = {ConcatShapes, Free, any};
  table[t::kSplit] = {SplitShapes, Free, any};
  table[t::kSlice] = {SliceShapes, Free, any};
  table[t::kExpand] = {ExpandShapes, Free, any};
  table[t::kTile] = {TileShapes, Free, any};
  table[t::kPad] = {PadShapes, Free, any};
  table[t::kTrilu] = {TriluShapes, PerOutput(1), any};
  table[t::kCumSum] = {CumSumShapes, PerOutput(1), any};
  table[t::kDepthToSpace] = {DepthToSpaceShapes, Free, any};
  table[t::kSpaceToDepth] = {SpaceToDepthShapes, Free, any};
  table[t::kGather] = {GatherShapes, Free, any};
  table[t::kGatherElements] = {GatherElementsShapes, Free, any};
  table[t::kGatherND] = {GatherNdShapes, Free, any};
  table[t::kScatterElements] = {ScatterElementsShapes, PerInput(1), any};
  table[t::kScatterND] = {ScatterNdShapes, PerInput(1), any};
  table[t::kResize] = {ResizeShapes, ResizeFlops};
}

}  // namespace placer::graph
