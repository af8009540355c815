// ONNX neural-network ops: Conv, ConvTranspose, pooling (MaxPool, AveragePool, global pooling),
// normalisations (BatchNormalization, InstanceNormalization, GroupNormalization,
// LayerNormalization, LRN, MeanVarianceNormalization), Gemm, MatMul and Einsum.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <limits>

#include "graph/onnx/loader.h"
#include "graph/ops.h"

namespace placer::graph::onnx {
namespace {

namespace t = op_types;

// Bounds that keep the window arithmetic and the IR's shape rules from overflowing.
constexpr int64_t kLimit = int64_t{1} << 31;

// Attribute `name` of a 2-D window (or of a 1-D one, `one_d`, widened by a leading 1 to the 2-D
// window of height 1 it runs as).
std::vector<int64_t> Pairs(Loader& l, const std::string& name, std::vector<int64_t> fallback,
                           bool one_d = false) {
  std::optional<std::vector<int64_t>> given = l.AttrInts(name);
  if (one_d && given) {
    if (given->size() != 1) throw GraphError(fmt::format("{} must have 1 entry", name));
    given->insert(given->begin(), 1);
  }
  std::vector<int64_t> values = given.value_or(fallback);
  if (values.size() != 2) throw GraphError(fmt::format("{} must have 2 entries", name));
  for (int64_t v : values) {
    if (v < 1 || v > kLimit) {
      throw GraphError(fmt::format("{} [{}] must be positive", name, fmt::join(values, ", ")));
    }
  }
  return values;
}

// ONNX's "pads" of a 1-D window ([begin, end]) as those of the 2-D window of height 1 it runs as;
// 2-D pads as they are, and absent ones as zeros.
std::vector<int64_t> GivenPads(Loader& l, bool one_d) {
  std::vector<int64_t> pads = l.AttrInts("pads").value_or(std::vector<int64_t>(one_d ? 2 : 4, 0));
  if (one_d && pads.size() == 2) return {0, pads[0], 0, pads[1]};
  if (one_d) throw GraphError(fmt::format("pads [{}] must have 2 entries", fmt::join(pads, ", ")));
  return pads;
}

// ONNX's 2-D window padding from the given pads (GivenPads) and "auto_pad": [begin h, begin w,
// end h, end w].
std::vector<int64_t> WindowPads(Loader& l, const Shape& x, const std::vector<int64_t>& kernel,
                                const std::vector<int64_t>& strides,
                                const std::vector<int64_t>& dilations, std::vector<int64_t> pads) {
  const std::string auto_pad = l.AttrString("auto_pad", "NOTSET");
  if (pads.size() != 4)
    throw GraphError(fmt::format("pads [{}] must have 4 entries", fmt::join(pads, ", ")));
  for (int64_t p : pads) {
    if (p < 0 || p > kLimit) {
      throw GraphError(fmt::format("pads [{}] must be non-negative", fmt::join(pads, ", ")));
    }
  }
  if (auto_pad == "VALID") return {0, 0, 0, 0};
  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    for (size_t d = 0; d < 2; ++d) {
      const int64_t in = x[2 + d], out = (in + strides[d] - 1) / strides[d];
      const int64_t span = (kernel[d] - 1) * dilations[d] + 1;
      const int64_t total = std::max<int64_t>((out - 1) * strides[d] + span - in, 0);
      pads[d] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      pads[d + 2] = total - pads[d];
    }
  } else if (auto_pad != "NOTSET") {
    throw GraphError(fmt::format("unknown auto_pad '{}'", auto_pad));
  }
  return pads;
}

bool Symmetric(const std::vector<int64_t>& pads) {
  return pads[0] == pads[2] && pads[1] == pads[3];
}

// x padded explicitly on its two spatial axes with `value`.
TensorId PadSpatial(Loader& l, TensorId x, const std::vector<int64_t>& pads, double value) {
  Attributes attrs;
  attrs.Set("pads", std::vector<int64_t>{0, 0, pads[0], pads[1], 0, 0, pads[2], pads[3]});
  attrs.Set("mode", std::string("constant"));
  attrs.Set("value", value);
  return l.Sub("pad", t::kPad, {x}, std::move(attrs));
}

// The input and weight of a 1-D convolution ([N, C, L], [O, C/groups, k]) run as a 2-D one of
// height 1, as pooling does: the IR, its kernels, derived backward and cost model are 2-D. The
// weight stays a parameter of the file's shape; a Reshape views it as 2-D.
struct ConvOperands {
  bool one_d = false;
  Shape x, w;  // as 2-D
  TensorId input, weight;
};

ConvOperands ConvInputs(Loader& l, const char* what) {
  ConvOperands c{.x = l.InShape(0), .w = l.InShape(1)};
  c.one_d = c.x.size() == 3 && c.w.size() == 3;
  if (!c.one_d && (c.x.size() != 4 || c.w.size() != 4)) {
    l.Unsupported(fmt::format("{} other than 1-D and 2-D", what));
  }
  c.input = l.Tensor(0);
  c.weight = l.Tensor(1);
  if (c.one_d) {
    c.x.insert(c.x.begin() + 2, 1);
    c.w.insert(c.w.begin() + 2, 1);
    c.input = l.ReshapeTo("as_2d", c.input, c.x);
    c.weight = l.ReshapeTo("weight_as_2d", c.weight, c.w);
  }
  return c;
}

// The node's output from the 2-D op's result `y`: as it is, or back to 1-D.
void DefineConvOutput(Loader& l, const ConvOperands& c, TensorId y) {
  if (c.one_d) {
    Shape out = l.graph().tensor(y).shape;
    out.erase(out.begin() + 2);
    l.Define(0, l.ReshapeTo("as_1d", y, out, l.OutputName(0)));
  } else {
    l.EmitOutput(t::kIdentity, {y});
  }
}

void ConvertConv(Loader& l) {
  const ConvOperands c = ConvInputs(l, "convolutions");
  const std::vector<int64_t> kernel = {c.w[2], c.w[3]};
  const auto strides = Pairs(l, "strides", {1, 1}, c.one_d);
  const auto dilations = Pairs(l, "dilations", {1, 1}, c.one_d);
  std::vector<int64_t> pads = WindowPads(l, c.x, kernel, strides, dilations, GivenPads(l, c.one_d));
  TensorId input = c.input;
  if (!Symmetric(pads)) {
    input = PadSpatial(l, input, pads, 0.0);
    pads.assign(4, 0);
  }
  Attributes attrs;
  attrs.Set("stride", strides);
  attrs.Set("padding", std::vector<int64_t>{pads[0], pads[1]});
  if (dilations != std::vector<int64_t>{1, 1}) attrs.Set("dilation", dilations);
  attrs.Set("groups", l.AttrInt("group", 1));
  std::vector<TensorId> inputs = {input, c.weight};
  if (l.HasInput(2)) inputs.push_back(l.Tensor(2));
  if (!c.one_d) {
    l.EmitOutput(t::kConv2d, inputs, std::move(attrs));
    return;
  }
  DefineConvOutput(l, c, l.Sub("conv", t::kConv2d, inputs, std::move(attrs)));
}

// ConvTranspose: the padding either given or derived from output_shape (ONNX's equations), the
// symmetric part done by the IR op, the rest cropped. 1-D as 2-D of height 1, as Conv.
void ConvertConvTranspose(Loader& l) {
  const ConvOperands c = ConvInputs(l, "transposed convolutions");
  const Shape& x = c.x;
  const Shape& w = c.w;
  const auto strides = Pairs(l, "strides", {1, 1}, c.one_d);
  const auto dilations = Pairs(l, "dilations", {1, 1}, c.one_d);
  std::vector<int64_t> output_padding =
      l.AttrInts("output_padding").value_or(std::vector<int64_t>(c.one_d ? 1 : 2, 0));
  if (c.one_d && output_padding.size() == 1) output_padding.insert(output_padding.begin(), 0);
  if (output_padding.size() != 2) throw GraphError("output_padding must have 2 entries");
  for (int64_t p : output_padding) {
    if (p < 0 || p > kLimit) throw GraphError("output_padding must be non-negative");
  }
  const std::string auto_pad = l.AttrString("auto_pad", "NOTSET");
  std::vector<int64_t> pads = GivenPads(l, c.one_d);
  if (pads.size() != 4) throw GraphError("pads must have 4 entries");
  std::optional<std::vector<int64_t>> output_shape = l.AttrInts("output_shape");
  if (!output_shape && (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER")) {
    output_shape = std::vector<int64_t>{x[2] * strides[0], x[3] * strides[1]};
  }
  if (output_shape) {
    const size_t spatial = c.one_d ? 1 : 2;
    if (output_shape->size() == spatial + 2)
      output_shape->erase(output_shape->begin(), output_shape->begin() + 2);
    if (c.one_d && output_shape->size() == 1) output_shape->insert(output_shape->begin(), 1);
    if (output_shape->size() != 2) {
      throw GraphError(fmt::format("output_shape must have {} spatial entries", spatial));
    }
    for (size_t d = 0; d < 2; ++d) {
      // In 128 bits: the attributes come from the file, and their products must not wrap.
      const __int128 wide = static_cast<__int128>(strides[d]) * (x[2 + d] - 1) + output_padding[d] +
                            static_cast<__int128>(w[2 + d] - 1) * dilations[d] + 1 -
                            (*output_shape)[d];
      if (wide > kLimit || wide < -kLimit) throw GraphError("output_shape out of range");
      const auto total = static_cast<int64_t>(wide);
      if (total < 0) {
        // A larger output than the padding-free one: output_padding supplies the difference.
        output_padding[d] -= total;
        pads[d] = pads[d + 2] = 0;
        continue;
      }
      const bool upper = auto_pad == "SAME_UPPER";
      pads[d] = upper ? total / 2 : total - total / 2;
      pads[d + 2] = total - pads[d];
    }
  } else if (auto_pad == "VALID") {
    pads.assign(4, 0);
  }
  for (int64_t p : pads) {
    if (p < 0 || p > kLimit) throw GraphError("pads must be non-negative");
  }
  Attributes attrs;
  attrs.Set("stride", strides);
  attrs.Set("padding",
            std::vector<int64_t>{std::min(pads[0], pads[2]), std::min(pads[1], pads[3])});
  attrs.Set("output_padding", output_padding);
  if (dilations != std::vector<int64_t>{1, 1}) attrs.Set("dilation", dilations);
  attrs.Set("groups", l.AttrInt("group", 1));
  std::vector<TensorId> inputs = {c.input, c.weight};
  if (l.HasInput(2)) inputs.push_back(l.Tensor(2));
  if (Symmetric(pads) && !c.one_d) {
    l.EmitOutput(t::kConvTranspose2d, inputs, std::move(attrs));
    return;
  }
  TensorId y = l.Sub("full", t::kConvTranspose2d, inputs, std::move(attrs));
  for (size_t d = 0; d < 2; ++d) {
    const int64_t extent = l.graph().tensor(y).shape[2 + d];
    const int64_t extra_begin = pads[d] - std::min(pads[d], pads[d + 2]);
    const int64_t extra_end = pads[d + 2] - std::min(pads[d], pads[d + 2]);
    if (extra_begin == 0 && extra_end == 0) continue;
    y = l.SliceAxis(fmt::format("crop{}", d), y, static_cast<int64_t>(2 + d), extra_begin,
                    extent - extra_end);
  }
  DefineConvOutput(l, c, y);
}

// MaxPool and AveragePool, 2-D (1-D as 2-D of height 1). Padding PyTorch's pooling cannot take
// (asymmetric, or beyond half the window) is made explicit: -inf for max; for average, zeros, and
// without count_include_pad the sum is divided by a pooled mask of ones instead.
void ConvertPool(Loader& l) {
  const bool max = l.type() == "MaxPool";
  if (max && l.OutputLive(1)) l.Unsupported("MaxPool's indices output");
  Shape x = l.InShape(0);
  const bool one_d = x.size() == 3;
  if (x.size() != 4 && !one_d) l.Unsupported("pooling other than 1-D and 2-D");
  auto widen = [one_d](std::vector<int64_t> v, int64_t fill) {
    if (one_d) v.insert(v.begin(), fill);
    return v;
  };
  auto widen_pads = [one_d](std::vector<int64_t> v) {
    if (one_d && v.size() == 2) return std::vector<int64_t>{0, v[0], 0, v[1]};
    return v;
  };
  TensorId input = l.Tensor(0);
  if (one_d) {
    x = {x[0], x[1], 1, x[2]};
    input = l.ReshapeTo("as_2d", input, x);
  }
  const auto kernel = widen(l.AttrInts("kernel_shape").value_or(std::vector<int64_t>{}), 1);
  if (kernel.size() != 2) throw GraphError("kernel_shape must have 2 entries");
  for (int64_t k : kernel) {
    if (k < 1 || k > kLimit) throw GraphError("kernel_shape must be positive");
  }
  const auto strides =
      widen(l.AttrInts("strides").value_or(std::vector<int64_t>(one_d ? 1 : 2, 1)), 1);
  const auto dilations =
      widen(l.AttrInts("dilations").value_or(std::vector<int64_t>(one_d ? 1 : 2, 1)), 1);
  if (strides.size() != 2 || dilations.size() != 2) {
    throw GraphError("strides and dilations must have one entry per spatial axis");
  }
  for (int64_t v : {strides[0], strides[1], dilations[0], dilations[1]}) {
    if (v < 1 || v > kLimit) throw GraphError("strides and dilations must be positive");
  }
  if (!max && dilations != std::vector<int64_t>{1, 1}) l.Unsupported("dilated average pooling");
  if (l.AttrInt("storage_order", 0) != 0) l.Unsupported("column-major storage_order");
  std::vector<int64_t> pads;
  {
    // 1-D pads are widened to 2-D here.
    std::vector<int64_t> given = widen_pads(l.AttrInts("pads").value_or(std::vector<int64_t>{}));
    const std::string auto_pad = l.AttrString("auto_pad", "NOTSET");
    if (auto_pad == "NOTSET" || auto_pad.empty()) {
      pads = given.empty() ? std::vector<int64_t>(4, 0) : given;
      if (pads.size() != 4) throw GraphError("pads must have one pair per spatial axis");
      for (int64_t p : pads) {
        if (p < 0 || p > kLimit) throw GraphError("pads must be non-negative");
      }
    } else {
      pads = WindowPads(l, x, kernel, strides, dilations,
                        given.empty() ? std::vector<int64_t>(4, 0) : given);
    }
  }
  const bool ceil = l.AttrInt("ceil_mode", 0) != 0;
  const bool include_pad = l.AttrInt("count_include_pad", 0) != 0;
  bool explicit_pads = !Symmetric(pads);
  for (size_t d = 0; d < 2; ++d) {
    if (2 * pads[d] > (kernel[d] - 1) * dilations[d] + 1) explicit_pads = true;
  }
  Attributes attrs;
  attrs.Set("kernel", kernel);
  attrs.Set("stride", strides);
  if (max && dilations != std::vector<int64_t>{1, 1}) attrs.Set("dilation", dilations);
  if (ceil) attrs.Set("ceil_mode", int64_t{1});
  TensorId y;
  const char* ir = max ? t::kMaxPool2d : t::kAvgPool2d;
  if (!explicit_pads && !one_d) {
    attrs.Set("padding", std::vector<int64_t>{pads[0], pads[1]});
    if (!max) attrs.Set("count_include_pad", int64_t{include_pad ? 1 : 0});
    l.EmitOutput(ir, {input}, std::move(attrs));
    return;
  }
  if (!explicit_pads) {
    attrs.Set("padding", std::vector<int64_t>{pads[0], pads[1]});
    if (!max) attrs.Set("count_include_pad", int64_t{include_pad ? 1 : 0});
    y = l.Sub("pool", ir, {input}, std::move(attrs));
  } else if (max) {
    y = l.Sub("pool", ir, {PadSpatial(l, input, pads, -std::numeric_limits<double>::infinity())},
              std::move(attrs));
  } else {
    attrs.Set("count_include_pad", int64_t{1});
    y = l.Sub("pool", ir, {PadSpatial(l, input, pads, 0.0)}, attrs);
    if (!include_pad) {
      Known ones = Empty(kFloat, {1, 1, x[2], x[3]});
      for (double& v : ones.f) v = 1;
      const TensorId mask = l.ConstantOp(l.NodeBase() + "/ones", ones.shape,
                                         std::vector<float>(ones.f.begin(), ones.f.end()));
      const TensorId count = l.Sub("count", ir, {PadSpatial(l, mask, pads, 0.0)}, attrs);
      y = l.Sub("mean", t::kDiv, {y, count});
    }
  }
  if (one_d) {
    Shape out = l.graph().tensor(y).shape;
    out.erase(out.begin() + 2);
    l.Define(0, l.ReshapeTo("as_1d", y, out, l.OutputName(0)));
  } else {
    l.EmitOutput(t::kIdentity, {y});
  }
}

void ConvertGlobalPool(Loader& l, const char* ir_2d, const char* reduce) {
  const Shape x = l.InShape(0);
  if (x.size() < 3) throw GraphError("global pooling needs spatial axes");
  if (x.size() == 4) {
    l.EmitOutput(ir_2d, {l.Tensor(0)});
    return;
  }
  std::vector<int64_t> axes;
  for (size_t d = 2; d < x.size(); ++d) axes.push_back(static_cast<int64_t>(d));
  Attributes attrs;
  attrs.Set("axes", axes);
  attrs.Set("keepdims", int64_t{1});
  l.EmitOutput(reduce, {l.Tensor(0)}, std::move(attrs));
}

// x with a per-channel vector v broadcast as [1, C, 1, ...].
TensorId PerChannel(Loader& l, const std::string& suffix, TensorId v, size_t rank) {
  Shape shape(rank, 1);
  shape[1] = l.graph().tensor(v).shape.at(0);
  return l.ReshapeTo(suffix, v, shape);
}

// BatchNormalization. A load with a loss (training) normalises with the minibatch's statistics,
// as PyTorch's training mode; a load without one computes what the node says: its running
// statistics in inference mode, the minibatch's in training mode, and then, when asked for, the
// updated running statistics.
void ConvertBatchNormalization(Loader& l) {
  const bool training_mode = l.opset() >= 14 ? l.AttrInt("training_mode", 0) != 0 : false;
  const bool batch_statistics = l.options().loss || training_mode;
  Attributes attrs;
  const double epsilon = l.AttrFloat("epsilon", 1e-5);
  attrs.Set("epsilon", epsilon);
  const TensorId x = l.Tensor(0);
  std::vector<TensorId> inputs = {x, l.Tensor(1, Role::kScale), l.Tensor(2)};
  if (!batch_statistics) {
    inputs.push_back(l.Tensor(3, Role::kConstant));
    inputs.push_back(l.Tensor(4, Role::kConstant));
  }
  if (l.OutputLive(0)) l.EmitOutput(t::kBatchNorm, inputs, attrs);
  if (!l.OutputLive(1) && !l.OutputLive(2)) return;
  if (!training_mode || l.options().loss) {
    l.Unsupported("BatchNormalization's running statistics outputs outside training mode");
  }
  // running = input * momentum + current * (1 - momentum), the variance the population's.
  const size_t rank = l.InShape(0).size();
  const double momentum = l.AttrFloat("momentum", 0.9);
  std::vector<int64_t> axes = {0};
  for (size_t d = 2; d < rank; ++d) axes.push_back(static_cast<int64_t>(d));
  Attributes reduce;
  reduce.Set("axes", axes);
  reduce.Set("keepdims", int64_t{0});
  const TensorId mean = l.Sub("batch_mean", t::kReduceMean, {x}, reduce);
  const TensorId centred = l.Sub("centred", t::kSub, {x, PerChannel(l, "mean_c", mean, rank)});
  const TensorId var =
      l.Sub("batch_var", t::kReduceMean, {l.Sub("squared", t::kMul, {centred, centred})}, reduce);
  const TensorId keep = l.ConstantOp(l.NodeBase() + "/momentum", {}, Floats(1, momentum));
  const TensorId take =
      l.ConstantOp(l.NodeBase() + "/one_minus_momentum", {}, Floats(1, 1 - momentum));
  for (size_t k = 1; k <= 2; ++k) {
    if (!l.OutputLive(k)) continue;
    const TensorId old =
        l.Sub(fmt::format("old{}", k), t::kMul, {l.Tensor(2 + k, Role::kConstant), keep});
    const TensorId now = l.Sub(fmt::format("new{}", k), t::kMul, {k == 1 ? mean : var, take});
    l.Define(k, l.Emit1(fmt::format("{}/running{}", l.NodeBase(), k), t::kAdd, {old, now}, {},
                        l.OutputName(k)));
  }
}

void ConvertInstanceNormalization(Loader& l) {
  Attributes attrs;
  attrs.Set("epsilon", l.AttrFloat("epsilon", 1e-5));
  l.EmitOutput(t::kInstanceNorm, {l.Tensor(0), l.Tensor(1, Role::kScale), l.Tensor(2)},
               std::move(attrs));
}

// GroupNormalization: opset 18's scale and bias have one entry per group (expanded here to every
// channel of the group), later opsets one per channel.
void ConvertGroupNormalization(Loader& l) {
  const Shape x = l.InShape(0);
  const int64_t groups = l.AttrInt("num_groups", 0);
  if (x.size() < 2 || groups < 1 || x[1] % groups != 0) {
    throw GraphError(
        fmt::format("{} groups do not divide the channels of {}", groups, ToString(x)));
  }
  auto per_channel = [&](size_t k, Role role) {
    TensorId v = l.Tensor(k, role);
    const Shape shape = l.graph().tensor(v).shape;
    if (shape == Shape{x[1]}) return v;
    if (shape != Shape{groups}) {
      throw GraphError(fmt::format("'{}' {} has neither one entry per group nor per channel",
                                   l.InputName(k), ToString(shape)));
    }
    const std::string tag = k == 1 ? "scale" : "bias";
    Attributes expand;
    expand.Set("shape", Shape{groups, x[1] / groups});
    TensorId column = l.ReshapeTo(tag + "/column", v, {groups, 1});
    return l.ReshapeTo(tag + "/channels", l.Sub(tag + "/expand", t::kExpand, {column}, expand),
                       {x[1]});
  };
  Attributes attrs;
  attrs.Set("groups", groups);
  attrs.Set("epsilon", l.AttrFloat("epsilon", 1e-5));
  l.EmitOutput(t::kGroupNorm,
               {l.Tensor(0), per_channel(1, Role::kScale), per_channel(2, Role::kWeight)},
               std::move(attrs));
}

void ConvertLayerNormalization(Loader& l) {
  const Shape x = l.InShape(0);
  const int64_t axis = NormalizeAxis(l.AttrInt("axis", -1), x.size());
  const double epsilon = l.AttrFloat("epsilon", 1e-5);
  Attributes attrs;
  attrs.Set("axis", axis);
  attrs.Set("epsilon", epsilon);
  std::vector<TensorId> inputs = {l.Tensor(0), l.Tensor(1, Role::kScale)};
  if (l.HasInput(2)) inputs.push_back(l.Tensor(2));
  if (l.OutputLive(0)) l.EmitOutput(t::kLayerNorm, inputs, std::move(attrs));
  if (!l.OutputLive(1) && !l.OutputLive(2)) return;
  // The optional statistics outputs (kept dimensions of extent 1), computed by their definition:
  // mean, and 1 / sqrt(variance + epsilon).
  std::vector<int64_t> axes;
  for (auto d = static_cast<size_t>(axis); d < x.size(); ++d)
    axes.push_back(static_cast<int64_t>(d));
  Attributes reduce;
  reduce.Set("axes", axes);
  reduce.Set("keepdims", int64_t{1});
  const std::string base = l.NodeBase();
  TensorId mean = l.Emit1(base + "/mean", t::kReduceMean, {inputs[0]}, reduce,
                          l.OutputLive(1) ? l.OutputName(1) : base + "/mean");
  if (l.OutputLive(1)) l.Define(1, mean);
  if (!l.OutputLive(2)) return;
  TensorId centred = l.Sub("centred", t::kSub, {inputs[0], mean});
  TensorId variance =
      l.Emit1(base + "/variance", t::kReduceMean, {l.Sub("squared", t::kMul, {centred, centred})},
              reduce, base + "/variance");
  TensorId shifted = l.Sub("shifted", t::kAdd,
                           {variance, l.ConstantOp(base + "/epsilon", {}, Floats(1, epsilon))});
  TensorId deviation = l.Sub("deviation", t::kSqrt, {shifted});
  l.Define(2, l.Emit1(base + "/inverse", t::kDiv,
                      {l.ConstantOp(base + "/one", {}, {1.0f}), deviation}, {}, l.OutputName(2)));
}

void ConvertLrn(Loader& l) {
  Attributes attrs;
  attrs.Set("size", l.AttrInt("size", 0));
  attrs.Set("alpha", l.AttrFloat("alpha", 1e-4));
  attrs.Set("beta", l.AttrFloat("beta", 0.75));
  attrs.Set("bias", l.AttrFloat("bias", 1.0));
  l.EmitOutput(t::kLrn, {l.Tensor(0)}, std::move(attrs));
}

// (x - mean) / sqrt(variance) over "axes" ([0, 2, 3]), as ONNX's function body defines it.
void ConvertMeanVarianceNormalization(Loader& l) {
  const Shape x = l.InShape(0);
  std::vector<int64_t> axes = l.AttrInts("axes").value_or(std::vector<int64_t>{0, 2, 3});
  for (int64_t& a : axes) a = NormalizeAxis(a, x.size());
  Attributes reduce;
  reduce.Set("axes", axes);
  reduce.Set("keepdims", int64_t{1});
  const TensorId input = l.Tensor(0);
  const TensorId mean = l.Sub("mean", t::kReduceMean, {input}, reduce);
  const TensorId centred = l.Sub("centred", t::kSub, {input, mean});
  const TensorId variance =
      l.Sub("variance", t::kReduceMean, {l.Sub("squared", t::kMul, {centred, centred})}, reduce);
  const TensorId deviation = l.Sub("deviation", t::kSqrt, {variance});
  l.EmitOutput(t::kDiv, {centred, deviation});
}

void ConvertGemm(Loader& l) {
  const double alpha = l.AttrFloat("alpha", 1.0), beta = l.AttrFloat("beta", 1.0);
  const bool trans_a = l.AttrInt("transA", 0) != 0, trans_b = l.AttrInt("transB", 0) != 0;
  const Shape a = l.InShape(0), b = l.InShape(1);
  if (a.size() != 2 || b.size() != 2) throw GraphError("Gemm operands must be matrices");
  const int64_t n = trans_b ? b[0] : b[1];
  const bool has_c = l.HasInput(2) && beta != 0;
  // x W^T + b: the Linear layer, as PyTorch exports nn.Linear.
  if (!trans_a && trans_b && alpha == 1.0 &&
      (!has_c || (beta == 1.0 && l.InShape(2) == Shape{n}))) {
    std::vector<TensorId> inputs = {l.Tensor(0), l.Tensor(1)};
    if (has_c) inputs.push_back(l.Tensor(2));
    l.EmitOutput(t::kLinear, inputs);
    return;
  }
  auto transpose = [&](const std::string& suffix, TensorId x) {
    Attributes attrs;
    attrs.Set("perm", std::vector<int64_t>{1, 0});
    return l.Sub(suffix, t::kTranspose, {x}, std::move(attrs));
  };
  const std::string base = l.NodeBase();
  TensorId lhs = trans_a ? transpose("transpose_a", l.Tensor(0)) : l.Tensor(0);
  TensorId rhs = trans_b ? transpose("transpose_b", l.Tensor(1)) : l.Tensor(1);
  const bool scaled = alpha != 1.0;
  TensorId y = has_c || scaled ? l.Sub("matmul", t::kMatMul, {lhs, rhs})
                               : l.Emit1(base, t::kMatMul, {lhs, rhs}, {}, l.OutputName(0));
  if (scaled) {
    TensorId s = l.ConstantOp(base + "/alpha", {}, Floats(1, alpha));
    y = has_c ? l.Sub("scale", t::kMul, {y, s})
              : l.Emit1(base, t::kMul, {y, s}, {}, l.OutputName(0));
  }
  if (has_c) {
    TensorId c = l.Tensor(2);
    if (beta != 1.0) {
      c = l.Sub("beta_c", t::kMul, {c, l.ConstantOp(base + "/beta", {}, Floats(1, beta))});
    }
    y = l.Emit1(base, t::kAdd, {y, c}, {}, l.OutputName(0));
  }
  l.Define(0, y);
}

}  // namespace

void AddNnOps(OpTable& table) {
  table["Conv"] = {nullptr, ConvertConv};
  table["ConvTranspose"] = {nullptr, ConvertConvTranspose};
  table["MaxPool"] = {nullptr, ConvertPool};
  table["AveragePool"] = {nullptr, ConvertPool};
  table["GlobalAveragePool"] = {
      nullptr, [](Loader& l) { ConvertGlobalPool(l, t::kGlobalAvgPool2d, t::kReduceMean); }};
  table["GlobalMaxPool"] = {
      nullptr, [](Loader& l) { ConvertGlobalPool(l, t::kGlobalMaxPool2d, t::kReduceMax); }};
  table["BatchNormalization"] = {nullptr, ConvertBatchNormalization};
  table["InstanceNormalization"] = {nullptr, ConvertInstanceNormalization};
  table["GroupNormalization"] = {nullptr, ConvertGroupNormalization};
  table["LayerNormalization"] = {nullptr, ConvertLayerNormalization};
  table["LRN"] = {nullptr, ConvertLrn};
  table["MeanVarianceNormalization"] = {nullptr, ConvertMeanVarianceNormalization};
  table["Gemm"] = {nullptr, ConvertGemm};
  table["MatMul"] = {nullptr, [](Loader& l) {
                       l.EmitOutput(t::kMatMul, {l.Tensor(0), l.Tensor(1)});
                     }};
  table["Einsum"] = {nullptr, [](Loader& l) {
                       std::vector<TensorId> inputs;
                       for (size_t k = 0; k < l.NumInputs(); ++k) inputs.push_back(l.Tensor(k));
                       Attributes attrs;
                       attrs.Set("equation", l.AttrString("equation", ""));
                       l.EmitOutput(t::kEinsum, inputs, std::move(attrs));
                     }};
}

}  // namespace placer::graph::onnx
