#include "runtime/kernels.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "graph/ops.h"

namespace placer::runtime {

namespace ops = graph::op_types;

namespace {

// Mirrors the shape rule's axis handling (graph/ops.cc), so kernels and shapes cannot disagree.
int64_t Axis(int64_t axis, int64_t rank) { return axis < 0 ? axis + rank : axis; }

at::Tensor Constant(const graph::Attributes& a, at::Device device) {
  const std::vector<int64_t>& shape = a.GetInts("shape");
  const std::string& bytes = a.GetString("values");
  at::Tensor value = at::empty(shape, at::kFloat);
  std::memcpy(value.data_ptr<float>(), bytes.data(), bytes.size());
  return value.to(device);
}

at::Tensor Slice(const at::Tensor& x, const graph::Attributes& a) {
  const int64_t axis = Axis(a.GetInt("axis"), x.dim());
  const int64_t extent = x.size(axis);
  auto clamp = [extent](int64_t i) {
    return std::clamp(i < 0 ? i + extent : i, int64_t{0}, extent);
  };
  const int64_t step = a.Has("step") ? a.GetInt("step") : 1;
  return x.slice(axis, clamp(a.GetInt("start")), clamp(a.GetInt("end")), step);
}

at::Tensor ReduceMean(const at::Tensor& x, const graph::Attributes& a) {
  std::vector<int64_t> axes;
  for (int64_t axis : a.GetInts("axes")) axes.push_back(Axis(axis, x.dim()));
  const bool keep = !a.Has("keepdims") || a.GetInt("keepdims") != 0;
  return x.mean(axes, keep);
}

double Epsilon(const graph::Attributes& a) {
  return a.Has("epsilon") ? a.GetFloat("epsilon") : 1e-5;
}

}  // namespace

std::vector<at::Tensor> RunForwardKernel(const graph::Op& op, const std::vector<at::Tensor>& in,
                                         at::Device device) {
  const graph::Attributes& a = op.attrs;
  auto optional = [&](size_t index) { return in.size() > index ? in[index] : at::Tensor(); };
  const std::string& type = op.type;
  if (type == ops::kConv2d) {
    const int64_t groups = a.Has("groups") ? a.GetInt("groups") : 1;
    return {at::conv2d(in[0], in[1], optional(2), a.GetInts("stride"), a.GetInts("padding"),
                       /*dilation=*/{1, 1}, groups)};
  }
  // Unary elementwise.
  if (type == ops::kRelu) return {at::relu(in[0])};
  if (type == ops::kSigmoid) return {at::sigmoid(in[0])};
  if (type == ops::kTanh) return {at::tanh(in[0])};
  if (type == ops::kGelu) return {at::gelu(in[0])};
  if (type == ops::kErf) return {at::erf(in[0])};
  if (type == ops::kSqrt) return {at::sqrt(in[0])};
  if (type == ops::kExp) return {at::exp(in[0])};
  if (type == ops::kNeg) return {at::neg(in[0])};
  // A view, not the input itself: autograd needs a node between the op's input and output.
  if (type == ops::kIdentity) return {in[0].view_as(in[0])};
  // Pooling.
  const std::vector<int64_t> no_padding = {0, 0};
  if (type == ops::kAvgPool2d) {
    const bool include_pad = !a.Has("count_include_pad") || a.GetInt("count_include_pad") != 0;
    return {at::avg_pool2d(in[0], a.GetInts("kernel"), a.GetInts("stride"),
                           a.Has("padding") ? a.GetInts("padding") : no_padding,
                           /*ceil_mode=*/false, include_pad)};
  }
  if (type == ops::kMaxPool2d) {
    return {at::max_pool2d(in[0], a.GetInts("kernel"), a.GetInts("stride"),
                           a.Has("padding") ? a.GetInts("padding") : no_padding)};
  }
  if (type == ops::kGlobalAvgPool2d) return {in[0].mean({2, 3}, /*keepdim=*/true)};
  // Dense algebra.
  if (type == ops::kFlatten) return {in[0].flatten(1)};
  if (type == ops::kLinear) return {at::linear(in[0], in[1], optional(2))};
  if (type == ops::kMatMul) return {at::matmul(in[0], in[1])};
  if (type == ops::kAdd) return {at::add(in[0], in[1])};
  if (type == ops::kSub) return {at::sub(in[0], in[1])};
  if (type == ops::kMul) return {at::mul(in[0], in[1])};
  if (type == ops::kDiv) return {at::div(in[0], in[1])};
  if (type == ops::kPow) return {at::pow(in[0], in[1])};
  if (type == ops::kAddN) {
    at::Tensor sum = in[0];
    for (size_t i = 1; i < in.size(); ++i) sum = sum + in[i];
    return {sum};
  }
  // Data movement.
  if (type == ops::kConstant) return {Constant(a, device)};
  if (type == ops::kReshape) return {in[0].reshape(a.GetInts("shape"))};
  if (type == ops::kTranspose) return {in[0].permute(a.GetInts("perm"))};
  if (type == ops::kConcat) return {at::cat(in, Axis(a.GetInt("axis"), in[0].dim()))};
  if (type == ops::kSplit) {
    return at::split_with_sizes(in[0], a.GetInts("sizes"), Axis(a.GetInt("axis"), in[0].dim()));
  }
  if (type == ops::kSlice) return {Slice(in[0], a)};
  if (type == ops::kGather) {
    // index_select on the flattened indices serves tables of any rank (at::embedding wants 2).
    std::vector<int64_t> shape = in[1].sizes().vec();
    for (int64_t d = 1; d < in[0].dim(); ++d) shape.push_back(in[0].size(d));
    return {in[0].index_select(0, in[1].reshape({-1})).reshape(shape)};
  }
  // Normalisation and reductions.
  if (type == ops::kSoftmax) return {at::softmax(in[0], Axis(a.GetInt("axis"), in[0].dim()))};
  if (type == ops::kReduceMean) return {ReduceMean(in[0], a)};
  if (type == ops::kLayerNorm) {
    const int64_t axis = Axis(a.Has("axis") ? a.GetInt("axis") : -1, in[0].dim());
    std::vector<int64_t> normalized(in[0].sizes().begin() + axis, in[0].sizes().end());
    return {at::layer_norm(in[0], normalized, in[1], optional(2), Epsilon(a))};
  }
  if (type == ops::kBatchNorm) {
    // Training mode: the minibatch's statistics; running statistics are not part of the step.
    return {at::batch_norm(in[0], in[1], in[2], /*running_mean=*/{}, /*running_var=*/{},
                           /*training=*/true, /*momentum=*/0.1, Epsilon(a),
                           /*cudnn_enabled=*/true)};
  }
  if (type == ops::kLstmCell) {
    auto [h, c] = at::lstm_cell(in[0], {in[1], in[2]}, in[3], in[4], optional(5), {});
    return {h, c};
  }
  if (type == ops::kSoftmaxCrossEntropy) {
    // Summed over the rows this op sees, divided by the global batch: data-parallel shards then
    // add up to the single-device mean.
    at::Tensor sum = at::cross_entropy_loss(in[0], in[1], {}, at::Reduction::Sum);
    return {sum / static_cast<double>(a.GetInt("normalizer"))};
  }
  throw graph::GraphError(fmt::format("op '{}': no kernel for op type '{}'", op.name, op.type));
}

}  // namespace placer::runtime
