// Kernels of the data-movement op types (graph/ops_tensor.cc).
#include <ATen/ATen.h>
#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "graph/ops.h"
#include "runtime/kernel_table.h"

namespace placer::runtime {
namespace {

namespace ops = graph::op_types;
using graph::Attributes;
using Inputs = std::vector<at::Tensor>;

at::Tensor Constant(const Attributes& a, at::Device device) {
  const std::vector<int64_t>& shape = a.GetInts("shape");
  const std::string& bytes = a.GetString("values");
  const bool ints = a.Has("dtype") && a.GetString("dtype") == "int64";
  at::Tensor value = at::empty(shape, ints ? at::kLong : at::kFloat);
  if (!bytes.empty()) std::memcpy(value.data_ptr(), bytes.data(), bytes.size());
  return value.to(device);
}

// Indices 0..extent-1 along one axis, as a CPU int64 tensor moved to `device`.
at::Tensor IndexTensor(const std::vector<int64_t>& indices, at::Device device) {
  return at::tensor(indices, at::kLong).to(device);
}

at::Tensor Slice(const at::Tensor& x, const Attributes& a) {
  const int64_t axis = Axis(a.GetInt("axis"), x.dim());
  const int64_t extent = x.size(axis);
  const int64_t step = IntOr(a, "step", 1);
  if (step > 0) {
    auto clamp = [extent](int64_t i) {
      return std::clamp(i < 0 ? i + extent : i, int64_t{0}, extent);
    };
    return x.slice(axis, clamp(a.GetInt("start")), clamp(a.GetInt("end")), step);
  }
  std::vector<int64_t> picked;
  for (int64_t i = a.GetInt("start"); i > a.GetInt("end"); i += step) picked.push_back(i);
  return x.index_select(axis, IndexTensor(picked, x.device()));
}

// Reflect and edge padding, one axis at a time, as an index_select of the source positions.
at::Tensor Pad(const at::Tensor& x, const Attributes& a) {
  const std::vector<int64_t>& pads = a.GetInts("pads");
  const std::string& mode = a.GetString("mode");
  const int64_t rank = x.dim();
  if (mode == "constant") {
    std::vector<int64_t> torch_pads;  // last axis first, as at::constant_pad_nd wants them
    for (int64_t d = rank - 1; d >= 0; --d) {
      torch_pads.push_back(pads[static_cast<size_t>(d)]);
      torch_pads.push_back(pads[static_cast<size_t>(d + rank)]);
    }
    return at::constant_pad_nd(x, torch_pads, FloatOr(a, "value", 0.0));
  }
  at::Tensor y = x;
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t before = pads[static_cast<size_t>(d)],
                  after = pads[static_cast<size_t>(d + rank)];
    if (before == 0 && after == 0) continue;
    const int64_t n = x.size(d);
    std::vector<int64_t> source;
    for (int64_t i = -before; i < n + after; ++i) {
      if (mode == "edge") {
        source.push_back(std::clamp<int64_t>(i, 0, n - 1));
      } else {  // reflect: mirror without repeating the edge
        int64_t j = i < 0 ? -i : i;
        if (j >= n) j = 2 * (n - 1) - j;
        source.push_back(j);
      }
    }
    y = y.index_select(d, IndexTensor(source, x.device()));
  }
  return y;
}

at::Tensor CumSum(const at::Tensor& x, const Attributes& a) {
  const int64_t axis = Axis(a.GetInt("axis"), x.dim());
  const bool reverse = IntOr(a, "reverse", 0) != 0, exclusive = IntOr(a, "exclusive", 0) != 0;
  at::Tensor y = reverse ? x.flip(axis) : x;
  at::Tensor sum = at::cumsum(y, axis);
  if (exclusive) sum = sum - y;
  return reverse ? sum.flip(axis) : sum;
}

at::Tensor DepthToSpace(const at::Tensor& x, const Attributes& a) {
  const int64_t b = a.GetInt("blocksize");
  const int64_t n = x.size(0), c = x.size(1) / (b * b), h = x.size(2), w = x.size(3);
  const bool crd = a.Has("mode") && a.GetString("mode") == "CRD";
  at::Tensor y = crd ? x.reshape({n, c, b, b, h, w}).permute({0, 1, 4, 2, 5, 3})
                     : x.reshape({n, b, b, c, h, w}).permute({0, 3, 4, 1, 5, 2});
  return y.reshape({n, c, h * b, w * b});
}

at::Tensor SpaceToDepth(const at::Tensor& x, const Attributes& a) {
  const int64_t b = a.GetInt("blocksize");
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2) / b, w = x.size(3) / b;
  return x.reshape({n, c, h, b, w, b}).permute({0, 3, 5, 1, 2, 4}).reshape({n, c * b * b, h, w});
}

Inputs Gather(const graph::Op& op, const Inputs& in, const KernelContext&) {
  const int64_t axis = Axis(IntOr(op.attrs, "axis", 0), in[0].dim());
  std::vector<int64_t> shape(in[0].sizes().begin(), in[0].sizes().begin() + axis);
  for (int64_t d : in[1].sizes()) shape.push_back(d);
  for (int64_t d = axis + 1; d < in[0].dim(); ++d) shape.push_back(in[0].size(d));
  at::Tensor indices = WrapIndices(in[1].reshape({-1}), in[0].size(axis));
  return {in[0].index_select(axis, indices).reshape(shape)};
}

Inputs GatherElements(const graph::Op& op, const Inputs& in, const KernelContext&) {
  const int64_t axis = Axis(op.attrs.GetInt("axis"), in[0].dim());
  return {at::gather(in[0], axis, WrapIndices(in[1], in[0].size(axis)))};
}

// Index tuples [..., k] (negative entries wrapped against data's axes from `first`) as the k index
// tensors of advanced indexing.
std::vector<at::Tensor> TupleIndices(const at::Tensor& data, const at::Tensor& tuples,
                                     int64_t first) {
  std::vector<at::Tensor> indices;
  for (int64_t j = 0; j < tuples.size(-1); ++j) {
    indices.push_back(WrapIndices(tuples.select(-1, j), data.size(first + j)));
  }
  return indices;
}

c10::List<std::optional<at::Tensor>> IndexList(const std::vector<at::Tensor>& indices) {
  c10::List<std::optional<at::Tensor>> list;
  for (const at::Tensor& index : indices) list.push_back(index);
  return list;
}

Inputs GatherNd(const graph::Op& op, const Inputs& in, const KernelContext&) {
  const at::Tensor& data = in[0];
  const at::Tensor& indices = in[1];
  const int64_t b = IntOr(op.attrs, "batch_dims", 0), k = indices.size(-1);
  int64_t batch = 1;
  for (int64_t d = 0; d < b; ++d) batch *= data.size(d);
  std::vector<int64_t> flat_shape = {batch};
  for (int64_t d = b; d < data.dim(); ++d) flat_shape.push_back(data.size(d));
  at::Tensor flat = data.reshape(flat_shape);
  at::Tensor tuples = indices.reshape({batch, -1, k});
  std::vector<at::Tensor> list = {
      at::arange(batch, tuples.options()).view({batch, 1}).expand({batch, tuples.size(1)})};
  for (const at::Tensor& index : TupleIndices(data, tuples, b)) list.push_back(index);
  std::vector<int64_t> shape(indices.sizes().begin(), indices.sizes().end() - 1);
  for (int64_t d = b + k; d < data.dim(); ++d) shape.push_back(data.size(d));
  return {at::index(flat, IndexList(list)).reshape(shape)};
}

Inputs ScatterElements(const graph::Op& op, const Inputs& in, const KernelContext&) {
  const int64_t axis = Axis(op.attrs.GetInt("axis"), in[0].dim());
  const at::Tensor indices = WrapIndices(in[1], in[0].size(axis));
  const std::string reduction =
      op.attrs.Has("reduction") ? op.attrs.GetString("reduction") : "none";
  if (reduction == "add") return {at::scatter_add(in[0], axis, indices, in[2])};
  if (reduction == "mul") return {at::scatter_reduce(in[0], axis, indices, in[2], "prod")};
  return {at::scatter(in[0], axis, indices, in[2])};
}

Inputs ScatterNd(const graph::Op& op, const Inputs& in, const KernelContext&) {
  const std::string reduction =
      op.attrs.Has("reduction") ? op.attrs.GetString("reduction") : "none";
  const at::Tensor tuples = in[1].reshape({-1, in[1].size(-1)});
  const int64_t k = in[1].size(-1);
  std::vector<int64_t> update_shape = {tuples.size(0)};
  for (int64_t d = k; d < in[0].dim(); ++d) update_shape.push_back(in[0].size(d));
  const at::Tensor updates = in[2].reshape(update_shape);
  const auto list = TupleIndices(in[0], tuples, 0);
  if (reduction == "mul") {
    // Products of repeated indices multiply up: one index_put per tuple, in order.
    at::Tensor out = in[0].clone();
    for (int64_t m = 0; m < tuples.size(0); ++m) {
      std::vector<at::Tensor> one;
      for (const at::Tensor& index : list) one.push_back(index.narrow(0, m, 1));
      out = at::index_put(out, IndexList(one),
                          at::index(out, IndexList(one)) * updates.narrow(0, m, 1));
    }
    return {out};
  }
  return {at::index_put(in[0], IndexList(list), updates, /*accumulate=*/reduction == "add")};
}

// ONNX Resize along one axis: every output position reads `taps` input positions (clamped to the
// axis: ONNX pads with the edge values) with weights, computed on the host from the coordinate
// transformation; the kernel is then a weighted sum of index_selects, which autograd follows.
at::Tensor ResizeAxis(const at::Tensor& x, int64_t axis, int64_t out, double scale,
                      const Attributes& a) {
  const int64_t in = x.size(axis);
  const std::string& mode = a.GetString("mode");
  const std::string& coordinate = a.GetString("coordinate");
  const int taps = mode == "nearest" ? 1 : mode == "linear" ? 2 : 4;
  std::vector<std::vector<int64_t>> index(static_cast<size_t>(taps));
  std::vector<std::vector<float>> weight(static_cast<size_t>(taps));
  const double cubic_a = FloatOr(a, "cubic_coeff_a", -0.75);
  const bool exclude_outside = IntOr(a, "exclude_outside", 0) != 0;
  const std::string nearest =
      a.Has("nearest_mode") ? a.GetString("nearest_mode") : "round_prefer_floor";
  // ONNX's reference takes the output extent as scale * input extent, unrounded.
  const double out_extent = scale * static_cast<double>(in);
  for (int64_t o = 0; o < out; ++o) {
    double x_in;
    if (coordinate == "align_corners") {
      x_in = out_extent == 1
                 ? 0
                 : static_cast<double>(o) * static_cast<double>(in - 1) / (out_extent - 1);
    } else if (coordinate == "asymmetric") {
      x_in = static_cast<double>(o) / scale;
    } else if (coordinate == "pytorch_half_pixel" && out_extent == 1) {
      x_in = -0.5;
    } else {  // half_pixel, pytorch_half_pixel
      x_in = (static_cast<double>(o) + 0.5) / scale - 0.5;
    }
    // ONNX's reference: the left neighbour is floor(x), or x - 1 with weight 1 on x when x is an
    // integer.
    auto left = static_cast<int64_t>(std::floor(x_in));
    double ratio = x_in - static_cast<double>(left);
    if (ratio == 0) {
      ratio = 1;
      --left;
    }
    auto clamp = [in](int64_t i) { return std::clamp<int64_t>(i, 0, in - 1); };
    if (mode == "nearest") {
      bool up;
      if (ratio == 1) {
        up = true;
      } else if (nearest == "round_prefer_ceil") {
        up = ratio >= 0.5;
      } else if (nearest == "floor") {
        up = false;
      } else if (nearest == "ceil") {
        up = true;
      } else {
        up = ratio > 0.5;
      }
      index[0].push_back(clamp(left + (up ? 1 : 0)));
      weight[0].push_back(1);
      continue;
    }
    std::vector<double> w;
    std::vector<int64_t> at;
    if (mode == "linear") {
      w = {1 - ratio, ratio};
      at = {left, left + 1};
    } else {
      const double A = cubic_a, r = ratio, s = 1 - ratio;
      w = {((A * (r + 1) - 5 * A) * (r + 1) + 8 * A) * (r + 1) - 4 * A,
           ((A + 2) * r - (A + 3)) * r * r + 1, ((A + 2) * s - (A + 3)) * s * s + 1,
           ((A * (s + 1) - 5 * A) * (s + 1) + 8 * A) * (s + 1) - 4 * A};
      at = {left - 1, left, left + 1, left + 2};
    }
    if (exclude_outside) {
      double sum = 0;
      for (size_t j = 0; j < w.size(); ++j) {
        if (at[j] < 0 || at[j] >= in) w[j] = 0;
        sum += w[j];
      }
      for (double& v : w) v = sum != 0 ? v / sum : 0;
    }
    for (size_t j = 0; j < w.size(); ++j) {
      index[j].push_back(clamp(at[j]));
      weight[j].push_back(static_cast<float>(w[j]));
    }
  }
  std::vector<int64_t> weight_shape(static_cast<size_t>(x.dim()), 1);
  weight_shape[static_cast<size_t>(axis)] = out;
  at::Tensor y;
  for (size_t j = 0; j < index.size(); ++j) {
    at::Tensor picked = x.index_select(axis, IndexTensor(index[j], x.device()));
    if (mode != "nearest") {
      picked = picked * at::tensor(weight[j], x.options()).view(weight_shape);
    }
    y = j == 0 ? picked : y + picked;
  }
  return y;
}

at::Tensor Resize(const at::Tensor& x, const Attributes& a) {
  const std::vector<int64_t>& shape = a.GetInts("shape");
  const std::vector<double>& scales = a.GetFloats("scales");
  at::Tensor y = x;
  bool changed = false;
  for (int64_t d = 0; d < x.dim(); ++d) {
    const auto u = static_cast<size_t>(d);
    // An axis kept at its extent with scale 1 maps every position onto itself.
    if (shape[u] == x.size(d) && scales[u] == 1.0) continue;
    y = ResizeAxis(y, d, shape[u], scales[u], a);
    changed = true;
  }
  return changed ? y : x.view_as(x);
}

}  // namespace

void AddTensorKernels(KernelTable& t) {
  t[ops::kConstant] = [](const graph::Op& op, const Inputs&, const KernelContext& context) {
    return Inputs{Constant(op.attrs, context.device)};
  };
  t[ops::kFlatten] = Unary([](const Attributes&, const at::Tensor& x) { return x.flatten(1); });
  t[ops::kReshape] =
      Unary([](const Attributes& a, const at::Tensor& x) { return x.reshape(a.GetInts("shape")); });
  t[ops::kTranspose] =
      Unary([](const Attributes& a, const at::Tensor& x) { return x.permute(a.GetInts("perm")); });
  t[ops::kConcat] = [](const graph::Op& op, const Inputs& in, const KernelContext&) {
    return Inputs{at::cat(in, Axis(op.attrs.GetInt("axis"), in[0].dim()))};
  };
  t[ops::kSplit] = [](const graph::Op& op, const Inputs& in, const KernelContext&) {
    return at::split_with_sizes(in[0], op.attrs.GetInts("sizes"),
                                Axis(op.attrs.GetInt("axis"), in[0].dim()));
  };
  t[ops::kSlice] = Unary([](const Attributes& a, const at::Tensor& x) { return Slice(x, a); });
  t[ops::kExpand] =
      Unary([](const Attributes& a, const at::Tensor& x) { return x.expand(a.GetInts("shape")); });
  t[ops::kTile] = Unary(
      [](const Attributes& a, const at::Tensor& x) { return x.repeat(a.GetInts("repeats")); });
  t[ops::kPad] = Unary([](const Attributes& a, const at::Tensor& x) { return Pad(x, a); });
  t[ops::kTrilu] = Unary([](const Attributes& a, const at::Tensor& x) {
    return a.GetInt("upper") != 0 ? at::triu(x, a.GetInt("k")) : at::tril(x, a.GetInt("k"));
  });
  t[ops::kCumSum] = Unary([](const Attributes& a, const at::Tensor& x) { return CumSum(x, a); });
  t[ops::kDepthToSpace] =
      Unary([](const Attributes& a, const at::Tensor& x) { return DepthToSpace(x, a); });
  t[ops::kSpaceToDepth] =
      Unary([](const Attributes& a, const at::Tensor& x) { return SpaceToDepth(x, a); });
  t[ops::kGather] = Gather;
  t[ops::kGatherElements] = GatherElements;
  t[ops::kGatherND] = GatherNd;
  t[ops::kScatterElements] = ScatterElements;
  t[ops::kScatterND] = ScatterNd;
  t[ops::kResize] = Unary([](const Attributes& a, const at::Tensor& x) { return Resize(x, a); });
}

}  // namespace placer::runtime
