// ONNX data-movement ops: reshaping (Reshape, Flatten, Squeeze, Unsqueeze, Transpose), joining
// and cutting (Concat, Split, Slice) and indexing (Gather, GatherElements, GatherND, Scatter*);
// the ops that broadcast, pad or rearrange are in ops_layout.cc.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include "graph/onnx/loader.h"
#include "graph/ops.h"

namespace placer::graph::onnx {
namespace {

namespace t = op_types;

// ---- reshaping ----

std::vector<int64_t> ReshapeTarget(Loader& l) {
  return l.opset() < 5 ? l.AttrInts("shape").value_or(std::vector<int64_t>{})
                       : l.KnownInts(1, "shape");
}

Shape FlattenShape(Loader& l, const Shape& x) {
  const auto rank = static_cast<int64_t>(x.size());
  int64_t axis = l.AttrInt("axis", 1);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis > rank) throw GraphError(fmt::format("axis {} out of range", axis));
  return {Product(x, 0, static_cast<size_t>(axis)),
          Product(x, static_cast<size_t>(axis), x.size())};
}

std::vector<int64_t> SqueezeAxes(Loader& l, const Shape& x) {
  std::optional<std::vector<int64_t>> axes;
  if (l.opset() >= 13) {
    if (l.HasInput(1)) axes = l.KnownInts(1, "axes");
  } else {
    axes = l.AttrInts("axes");
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

Shape SqueezedShape(Loader& l, const Shape& x) {
  const std::vector<int64_t> axes = SqueezeAxes(l, x);
  Shape out;
  for (size_t d = 0; d < x.size(); ++d) {
    if (std::find(axes.begin(), axes.end(), static_cast<int64_t>(d)) == axes.end()) {
      out.push_back(x[d]);
    }
  }
  return out;
}

Shape UnsqueezedShape(Loader& l, const Shape& x) {
  std::vector<int64_t> axes = l.opset() >= 13 ? l.KnownInts(1, "axes")
                                              : l.AttrInts("axes").value_or(std::vector<int64_t>{});
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

// A reshaping op: `shape(l, x)` gives the output shape; folded by reinterpreting the elements,
// run as an IR Reshape.
void AddReshaping(OpTable& table, const char* onnx,
                  std::function<Shape(Loader&, const Shape&)> shape) {
  table[onnx] = {[shape](Loader& l, const std::vector<KnownPtr>& in) {
                   return One(Reshaped(Arg(in, 0), shape(l, Arg(in, 0).shape)));
                 },
                 [shape](Loader& l) {
                   Attributes attrs;
                   attrs.Set("shape", shape(l, l.InShape(0)));
                   l.EmitOutput(t::kReshape, {l.Tensor(0)}, std::move(attrs));
                 }};
}

std::vector<int64_t> Perm(Loader& l, size_t rank) {
  std::vector<int64_t> perm = l.AttrInts("perm").value_or(std::vector<int64_t>{});
  if (perm.empty()) {
    for (size_t d = rank; d-- > 0;) perm.push_back(static_cast<int64_t>(d));
  }
  return perm;
}

std::vector<Known> FoldTranspose(Loader& l, const std::vector<KnownPtr>& in) {
  const Known& x = Arg(in, 0);
  const std::vector<int64_t> perm = Perm(l, x.shape.size());
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
  return One(Rearrange(x, out, [&](const std::vector<int64_t>& index) {
    int64_t at = 0;
    for (size_t d = 0; d < perm.size(); ++d) at += index[d] * strides[static_cast<size_t>(perm[d])];
    return at;
  }));
}

// ---- joining and cutting ----

std::vector<Known> FoldConcat(Loader& l, const std::vector<KnownPtr>& in) {
  const Known& x = Arg(in, 0);
  const int64_t axis = NormalizeAxis(l.AttrInt("axis", 0), x.shape.size());
  Shape out = x.shape;
  out[static_cast<size_t>(axis)] = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const Known& k = Arg(in, i);
    bool fits = k.shape.size() == x.shape.size();
    for (size_t d = 0; fits && d < x.shape.size(); ++d) {
      fits = d == static_cast<size_t>(axis) || k.shape[d] == x.shape[d];
    }
    if (!fits) {
      throw GraphError(fmt::format("shapes {} and {} do not concatenate along axis {}",
                                   ToString(x.shape), ToString(k.shape), axis));
    }
    out[static_cast<size_t>(axis)] += k.shape[static_cast<size_t>(axis)];
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
  return One(std::move(r));
}

void ConvertConcat(Loader& l) {
  std::vector<TensorId> inputs;
  for (size_t k = 0; k < l.NumInputs(); ++k) {
    // Empty inputs (an exporter's placeholder) add nothing.
    if (NumElements(l.InShape(k)) == 0 && l.NumInputs() > 1) continue;
    inputs.push_back(l.Tensor(k));
  }
  if (inputs.empty()) inputs.push_back(l.Tensor(0));
  Attributes attrs;
  attrs.Set("axis", l.AttrInt("axis", 0));
  l.EmitOutput(t::kConcat, inputs, std::move(attrs));
}

std::vector<int64_t> SplitSizes(Loader& l, int64_t extent) {
  const size_t outputs = l.NumOutputs();
  std::optional<std::vector<int64_t>> sizes;
  if (l.opset() >= 13) {
    if (l.HasInput(1)) sizes = l.KnownInts(1, "split");
  } else {
    sizes = l.AttrInts("split");
  }
  std::vector<int64_t> out;
  if (sizes && !sizes->empty()) {
    out = *sizes;
  } else {
    const int64_t parts = l.AttrInt("num_outputs", static_cast<int64_t>(outputs));
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

std::vector<Known> FoldSplit(Loader& l, const std::vector<KnownPtr>& in) {
  const Known& x = Arg(in, 0);
  const int64_t axis = NormalizeAxis(l.AttrInt("axis", 0), x.shape.size());
  const auto a = static_cast<size_t>(axis);
  std::vector<Known> out;
  int64_t offset = 0;
  const auto strides = Strides(x.shape);
  for (int64_t size : SplitSizes(l, x.shape[a])) {
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

void ConvertSplit(Loader& l) {
  const Shape x = l.InShape(0);
  const int64_t axis = NormalizeAxis(l.AttrInt("axis", 0), x.size());
  Attributes attrs;
  attrs.Set("axis", axis);
  attrs.Set("sizes", SplitSizes(l, x[static_cast<size_t>(axis)]));
  std::vector<std::string> names;
  for (size_t k = 0; k < l.NumOutputs(); ++k) {
    names.push_back(l.OutputName(k).empty() ? fmt::format("{}/unused{}", l.NodeBase(), k)
                                            : l.OutputName(k));
  }
  std::vector<TensorId> out =
      l.Emit(l.NodeBase(), t::kSplit, {l.Tensor(0)}, std::move(attrs), names);
  for (size_t k = 0; k < out.size(); ++k) {
    if (!l.OutputName(k).empty()) l.Define(k, out[k]);
  }
}

struct SliceSpec {
  std::vector<int64_t> starts, ends, axes, steps;
};

SliceSpec SliceInputs(Loader& l) {
  SliceSpec spec;
  if (l.opset() < 10) {
    spec.starts = l.AttrInts("starts").value_or(std::vector<int64_t>{});
    spec.ends = l.AttrInts("ends").value_or(std::vector<int64_t>{});
    if (auto axes = l.AttrInts("axes")) spec.axes = *axes;
  } else {
    spec.starts = l.KnownInts(1, "starts");
    spec.ends = l.KnownInts(2, "ends");
    if (l.HasInput(3)) spec.axes = l.KnownInts(3, "axes");
    if (l.HasInput(4)) spec.steps = l.KnownInts(4, "steps");
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

std::vector<Known> FoldSlice(Loader& l, const std::vector<KnownPtr>& in) {
  const Known& x = Arg(in, 0);
  const SliceSpec spec = SliceInputs(l);
  Shape out = x.shape;
  std::vector<SliceRange> ranges(x.shape.size());
  for (size_t d = 0; d < x.shape.size(); ++d) ranges[d] = {0, x.shape[d], 1, x.shape[d]};
  for (size_t j = 0; j < spec.axes.size(); ++j) {
    const auto d = static_cast<size_t>(NormalizeAxis(spec.axes[j], x.shape.size()));
    ranges[d] = ResolveSlice(spec.starts[j], spec.ends[j], spec.steps[j], x.shape[d]);
    out[d] = ranges[d].count;
  }
  const auto strides = Strides(x.shape);
  return One(Rearrange(x, out, [&](const std::vector<int64_t>& index) {
    int64_t at = 0;
    for (size_t d = 0; d < index.size(); ++d) {
      at += (ranges[d].start + index[d] * ranges[d].step) * strides[d];
    }
    return at;
  }));
}

void ConvertSlice(Loader& l) {
  const Shape x = l.InShape(0);
  const SliceSpec spec = SliceInputs(l);
  TensorId y = l.Tensor(0);
  std::vector<std::pair<int64_t, SliceRange>> cuts;
  for (size_t j = 0; j < spec.axes.size(); ++j) {
    const int64_t axis = NormalizeAxis(spec.axes[j], x.size());
    const SliceRange r =
        ResolveSlice(spec.starts[j], spec.ends[j], spec.steps[j], x[static_cast<size_t>(axis)]);
    if (r.start == 0 && r.step == 1 && r.count == x[static_cast<size_t>(axis)]) continue;  // all
    cuts.emplace_back(axis, r);
  }
  if (cuts.empty()) {
    l.EmitOutput(t::kIdentity, {y});
    return;
  }
  for (size_t j = 0; j < cuts.size(); ++j) {
    const auto& [axis, r] = cuts[j];
    Attributes attrs;
    attrs.Set("axis", axis);
    // An empty range of a negative step is "from 0 to 0" (SliceCount's resolved form).
    attrs.Set("start", r.count == 0 ? int64_t{0} : r.start);
    attrs.Set("end", r.count == 0 ? int64_t{0} : r.end);
    if (r.step != 1 && r.count > 0) attrs.Set("step", r.step);
    const bool last = j + 1 == cuts.size();
    const std::string name = last ? l.NodeBase() : fmt::format("{}/axis{}", l.NodeBase(), axis);
    y = l.Emit1(name, t::kSlice, {y}, std::move(attrs), last ? l.OutputName(0) : name);
  }
  l.Define(0, y);
}

// ---- indexing ----

std::vector<Known> FoldGather(Loader& l, const std::vector<KnownPtr>& in) {
  const Known& x = Arg(in, 0);
  const Known& indices = Arg(in, 1);
  const int64_t axis = NormalizeAxis(l.AttrInt("axis", 0), x.shape.size());
  const auto a = static_cast<size_t>(axis);
  Shape out(x.shape.begin(), x.shape.begin() + axis);
  out.insert(out.end(), indices.shape.begin(), indices.shape.end());
  out.insert(out.end(), x.shape.begin() + axis + 1, x.shape.end());
  const auto strides = Strides(x.shape);
  const auto index_strides = Strides(indices.shape);
  return One(Rearrange(x, out, [&](const std::vector<int64_t>& index) {
    int64_t at = 0;
    for (size_t d = 0; d < a; ++d) at += index[d] * strides[d];
    int64_t which = 0;
    for (size_t d = 0; d < indices.shape.size(); ++d) which += index[a + d] * index_strides[d];
    int64_t i = indices.I(which);
    if (i < 0) i += x.shape[a];
    if (i < 0 || i >= x.shape[a]) throw GraphError(fmt::format("gather index {} out of range", i));
    at += i * strides[a];
    for (size_t d = a + 1; d < x.shape.size(); ++d) {
      at += index[d - 1 + indices.shape.size()] * strides[d];
    }
    return at;
  }));
}

void ConvertGather(Loader& l) {
  const Shape data = l.InShape(0);
  const int64_t axis = NormalizeAxis(l.AttrInt("axis", 0), data.size());
  Attributes gather;
  gather.Set("axis", axis);
  if (!l.IsKnown(1)) {
    if (l.InDType(1) != DType::kInt64) {
      throw GraphError(fmt::format("indices '{}' must be integers", l.InputName(1)));
    }
    // An embedding lookup when the table is a weight and the axis 0.
    l.EmitOutput(t::kGather, {l.Tensor(0), l.Tensor(1)}, std::move(gather));
    return;
  }
  // Constant indices select slices of a runtime tensor (a time step, one of q/k/v): runs of
  // consecutive indices become slices, concatenated and reshaped to Gather's output shape.
  const std::vector<int64_t> which = l.KnownInts(1, "indices");
  const Shape& index_shape = l.In(1).known->shape;
  const auto a = static_cast<size_t>(axis);
  Shape out(data.begin(), data.begin() + axis);
  out.insert(out.end(), index_shape.begin(), index_shape.end());
  out.insert(out.end(), data.begin() + axis + 1, data.end());
  for (int64_t i : which) {
    if (i < -data[a] || i >= data[a]) throw GraphError(fmt::format("index {} out of range", i));
  }
  std::vector<std::pair<int64_t, int64_t>> runs;  // [start, end)
  for (int64_t raw : which) {
    const int64_t i = raw < 0 ? raw + data[a] : raw;
    if (!runs.empty() && runs.back().second == i) {
      ++runs.back().second;
    } else {
      runs.emplace_back(i, i + 1);
    }
  }
  if (which.empty() || runs.size() > 64) {
    l.EmitOutput(t::kGather, {l.Tensor(0), l.Tensor(1)}, std::move(gather));
    return;
  }
  TensorId x = l.Tensor(0);
  std::vector<TensorId> pieces;
  for (size_t j = 0; j < runs.size(); ++j) {
    pieces.push_back(
        l.SliceAxis(fmt::format("slice{}", j), x, axis, runs[j].first, runs[j].second));
  }
  TensorId joined = pieces[0];
  if (pieces.size() > 1) {
    Attributes attrs;
    attrs.Set("axis", axis);
    joined = l.Sub("concat", t::kConcat, pieces, std::move(attrs));
  }
  l.Define(0, l.ReshapeTo("reshape", joined, out, l.OutputName(0)));
}

// Ops that take data (any type), integer indices and, for Scatter, updates, all as IR tensors.
void AddIndexing(OpTable& table, const char* onnx, const char* ir,
                 std::function<void(Loader&, Attributes&)> attrs) {
  table[onnx] = {nullptr, [ir, attrs](Loader& l) {
                   Attributes a;
                   attrs(l, a);
                   // Tensor(1) names the node and the input when the indices are missing.
                   std::vector<TensorId> inputs = {l.Tensor(0), l.Tensor(1)};
                   for (size_t k = 2; k < l.NumInputs(); ++k) {
                     inputs.push_back(l.Tensor(k));
                   }
                   if (l.graph().tensor(inputs[1]).dtype != DType::kInt64) {
                     throw GraphError(fmt::format("indices '{}' must be integers", l.InputName(1)));
                   }
                   l.EmitOutput(ir, inputs, std::move(a));
                 }};
}

void ScatterReduction(Loader& l, Attributes& a) {
  const std::string reduction = l.AttrString("reduction", "none");
  if (reduction != "none" && reduction != "add" && reduction != "mul") {
    l.Unsupported(fmt::format("Scatter reduction '{}'", reduction));
  }
  a.Set("reduction", reduction);
}

}  // namespace

void AddTensorOps(OpTable& table) {
  AddReshaping(table, "Reshape", [](Loader& l, const Shape& x) {
    return ResolveReshape(x, ReshapeTarget(l), l.AttrInt("allowzero", 0) != 0);
  });
  AddReshaping(table, "Squeeze", SqueezedShape);
  AddReshaping(table, "Unsqueeze", UnsqueezedShape);
  table["Flatten"] = {[](Loader& l, const std::vector<KnownPtr>& in) {
                        return One(Reshaped(Arg(in, 0), FlattenShape(l, Arg(in, 0).shape)));
                      },
                      [](Loader& l) {
                        const Shape x = l.InShape(0);
                        if (l.AttrInt("axis", 1) == 1 && x.size() >= 1) {
                          l.EmitOutput(t::kFlatten, {l.Tensor(0)});
                          return;
                        }
                        Attributes attrs;
                        attrs.Set("shape", FlattenShape(l, x));
                        l.EmitOutput(t::kReshape, {l.Tensor(0)}, std::move(attrs));
                      }};
  table["Transpose"] = {FoldTranspose, [](Loader& l) {
                          Attributes attrs;
                          attrs.Set("perm", Perm(l, l.InShape(0).size()));
                          l.EmitOutput(t::kTranspose, {l.Tensor(0)}, std::move(attrs));
                        }};
  table["Concat"] = {FoldConcat, ConvertConcat};
  table["Split"] = {FoldSplit, ConvertSplit};
  table["Slice"] = {FoldSlice, ConvertSlice};
  table["Gather"] = {FoldGather, ConvertGather};
  AddIndexing(table, "GatherElements", t::kGatherElements,
              [](Loader& l, Attributes& a) { a.Set("axis", l.AttrInt("axis", 0)); });
  AddIndexing(table, "GatherND", t::kGatherND,
              [](Loader& l, Attributes& a) { a.Set("batch_dims", l.AttrInt("batch_dims", 0)); });
  for (const char* scatter : {"ScatterElements", "Scatter"}) {
    AddIndexing(table, scatter, t::kScatterElements, [](Loader& l, Attributes& a) {
      a.Set("axis", l.AttrInt("axis", 0));
      ScatterReduction(l, a);
    });
  }
  AddIndexing(table, "ScatterND", t::kScatterND, ScatterReduction);
}

}  // namespace placer::graph::onnx
