// ONNX ops that broadcast (Expand, Tile), pad (Pad), mask or accumulate (Trilu, CumSum) or
// rearrange and resample (DepthToSpace, SpaceToDepth, Resize, Upsample) a tensor.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include "graph/onnx/loader.h"
#include "graph/ops.h"

namespace placer::graph::onnx {
namespace {

namespace t = op_types;

std::vector<Known> FoldExpand(Loader& l, const std::vector<KnownPtr>& in) {
  const Known& x = Arg(in, 0);
  const Shape out = BroadcastShapes(x.shape, l.KnownInts(1, "shape"));
  const auto strides = BroadcastStrides(x.shape, out);
  return One(
      Rearrange(x, out, [&](const std::vector<int64_t>& index) { return Dot(index, strides); }));
}

void ConvertExpand(Loader& l) {
  const Shape x = l.InShape(0);
  const Shape out = BroadcastShapes(x, l.KnownInts(1, "shape"));
  if (out == x) {
    l.EmitOutput(t::kIdentity, {l.Tensor(0)});
    return;
  }
  Attributes attrs;
  attrs.Set("shape", out);
  l.EmitOutput(t::kExpand, {l.Tensor(0)}, std::move(attrs));
}

void ConvertTile(Loader& l) {
  Attributes attrs;
  attrs.Set("repeats", l.KnownInts(1, "repeats"));
  l.EmitOutput(t::kTile, {l.Tensor(0)}, std::move(attrs));
}

// Pad: attributes before opset 11, then inputs (pads, constant_value, and from opset 18 axes).
// Negative pads crop: a Slice first, then the padding that is left.
void ConvertPad(Loader& l) {
  const Shape x = l.InShape(0);
  const size_t rank = x.size();
  std::vector<int64_t> pads;
  double value = 0;
  std::string mode = l.AttrString("mode", "constant");
  if (l.opset() < 11) {
    pads = l.AttrInts(l.opset() < 2 ? "paddings" : "pads").value_or(std::vector<int64_t>{});
    value = l.AttrFloat("value", 0.0);
  } else {
    pads = l.KnownInts(1, "pads");
    if (l.HasInput(2)) value = l.KnownFloats(2, "constant_value").at(0);
    if (l.HasInput(3)) {
      const std::vector<int64_t> axes = l.KnownInts(3, "axes");
      if (pads.size() != 2 * axes.size()) throw GraphError("pads must have two entries per axis");
      std::vector<int64_t> all(2 * rank, 0);
      for (size_t j = 0; j < axes.size(); ++j) {
        const auto d = static_cast<size_t>(NormalizeAxis(axes[j], rank));
        all[d] = pads[j];
        all[d + rank] = pads[j + axes.size()];
      }
      pads = all;
    }
  }
  if (pads.size() != 2 * rank) {
    throw GraphError(fmt::format("pads [{}] need two entries per axis of {}", fmt::join(pads, ", "),
                                 ToString(x)));
  }
  if (mode != "constant" && mode != "reflect" && mode != "edge") {
    l.Unsupported(fmt::format("Pad mode '{}'", mode));
  }
  TensorId y = l.Tensor(0);
  for (size_t d = 0; d < rank; ++d) {
    const int64_t before = pads[d], after = pads[d + rank];
    if (before >= 0 && after >= 0) continue;
    y = l.SliceAxis(fmt::format("crop{}", d), y, static_cast<int64_t>(d),
                    std::max<int64_t>(0, -before), x[d] - std::max<int64_t>(0, -after));
    pads[d] = std::max<int64_t>(0, before);
    pads[d + rank] = std::max<int64_t>(0, after);
  }
  Attributes attrs;
  attrs.Set("pads", pads);
  attrs.Set("mode", mode);
  if (mode == "constant") attrs.Set("value", value);
  l.EmitOutput(t::kPad, {y}, std::move(attrs));
}

void ConvertTrilu(Loader& l) {
  Attributes attrs;
  attrs.Set("upper", l.AttrInt("upper", 1));
  attrs.Set("k", l.HasInput(1) ? l.KnownInts(1, "k").at(0) : int64_t{0});
  l.EmitOutput(t::kTrilu, {l.Tensor(0)}, std::move(attrs));
}

void ConvertCumSum(Loader& l) {
  Attributes attrs;
  attrs.Set("axis", l.KnownInts(1, "axis").at(0));
  attrs.Set("exclusive", l.AttrInt("exclusive", 0));
  attrs.Set("reverse", l.AttrInt("reverse", 0));
  l.EmitOutput(t::kCumSum, {l.Tensor(0)}, std::move(attrs));
}

// Resize (opset 10 on) and Upsample (before): the output shape from sizes or scales, and the
// scale each axis' coordinate transformation uses.
void ConvertResize(Loader& l) {
  const Shape x = l.InShape(0);
  const size_t rank = x.size();
  const bool upsample = l.type() == "Upsample";
  std::vector<double> scales;
  std::optional<std::vector<int64_t>> sizes;
  std::vector<int64_t> axes;
  if (upsample) {
    scales = l.opset() >= 9 ? l.KnownFloats(1, "scales")
                            : l.AttrFloats("scales").value_or(std::vector<double>{});
  } else if (l.opset() < 11) {
    scales = l.KnownFloats(1, "scales");
  } else {
    if (l.HasInput(2) && NumElements(l.InShape(2)) > 0) scales = l.KnownFloats(2, "scales");
    if (l.HasInput(3) && NumElements(l.InShape(3)) > 0) sizes = l.KnownInts(3, "sizes");
    if (auto given = l.AttrInts("axes")) axes = *given;
  }
  if (l.AttrInt("antialias", 0) != 0) l.Unsupported("Resize with antialias");
  if (l.AttrString("keep_aspect_ratio_policy", "stretch") != "stretch") {
    l.Unsupported("Resize keep_aspect_ratio_policy other than stretch");
  }
  if (axes.empty()) {
    for (size_t d = 0; d < rank; ++d) axes.push_back(static_cast<int64_t>(d));
  }
  std::vector<double> all_scales(rank, 1.0);
  Shape out = x;
  const size_t given = sizes ? sizes->size() : scales.size();
  if (given != axes.size()) {
    throw GraphError(
        fmt::format("{} {} given for {} axes", given, sizes ? "sizes" : "scales", axes.size()));
  }
  for (size_t j = 0; j < axes.size(); ++j) {
    const auto d = static_cast<size_t>(NormalizeAxis(axes[j], rank));
    if (sizes) {
      out[d] = (*sizes)[j];
      all_scales[d] = static_cast<double>(out[d]) / static_cast<double>(x[d]);
    } else {
      all_scales[d] = scales[j];
      const double extent = std::floor(static_cast<double>(x[d]) * scales[j]);
      if (!(scales[j] > 0) || !(extent >= 1 && extent <= 1e12)) {
        throw GraphError(
            fmt::format("scale {} of axis {} leaves an output extent of {}", scales[j], d, extent));
      }
      out[d] = static_cast<int64_t>(extent);
    }
  }
  std::string mode = l.AttrString("mode", "nearest");
  if (mode == "bilinear" || mode == "trilinear") mode = "linear";  // Upsample's names
  std::string coordinate = upsample || l.opset() < 11
                               ? "asymmetric"
                               : l.AttrString("coordinate_transformation_mode", "half_pixel");
  if (coordinate != "half_pixel" && coordinate != "pytorch_half_pixel" &&
      coordinate != "align_corners" && coordinate != "asymmetric") {
    l.Unsupported(fmt::format("Resize coordinate_transformation_mode '{}'", coordinate));
  }
  Attributes attrs;
  attrs.Set("shape", out);
  attrs.Set("scales", all_scales);
  attrs.Set("mode", mode);
  attrs.Set("coordinate", coordinate);
  // Before opset 11 nearest rounds down (PyTorch's nearest); from then on the attribute says.
  attrs.Set("nearest_mode", upsample || l.opset() < 11
                                ? std::string("floor")
                                : l.AttrString("nearest_mode", "round_prefer_floor"));
  attrs.Set("cubic_coeff_a", l.AttrFloat("cubic_coeff_a", -0.75));
  attrs.Set("exclude_outside", l.AttrInt("exclude_outside", 0));
  l.EmitOutput(t::kResize, {l.Tensor(0)}, std::move(attrs));
}

void ConvertBlocks(Loader& l, const char* ir) {
  Attributes attrs;
  attrs.Set("blocksize", l.AttrInt("blocksize", 0));
  if (ir == std::string(t::kDepthToSpace)) attrs.Set("mode", l.AttrString("mode", "DCR"));
  l.EmitOutput(ir, {l.Tensor(0)}, std::move(attrs));
}

}  // namespace

void AddLayoutOps(OpTable& table) {
  table["Expand"] = {FoldExpand, ConvertExpand};
  table["Tile"] = {nullptr, ConvertTile};
  table["Pad"] = {nullptr, ConvertPad};
  table["Trilu"] = {nullptr, ConvertTrilu};
  table["CumSum"] = {nullptr, ConvertCumSum};
  table["DepthToSpace"] = {nullptr, [](Loader& l) { ConvertBlocks(l, t::kDepthToSpace); }};
  table["SpaceToDepth"] = {nullptr, [](Loader& l) { ConvertBlocks(l, t::kSpaceToDepth); }};
  table["Resize"] = {nullptr, ConvertResize};
  table["Upsample"] = {nullptr, ConvertResize};
}

}  // namespace placer::graph::onnx
