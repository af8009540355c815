#include "runtime/kernels.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "graph/ops.h"

namespace placer::runtime {

namespace ops = graph::op_types;

std::vector<at::Tensor> RunForwardKernel(const graph::Op& op, const std::vector<at::Tensor>& in) {
  const graph::Attributes& a = op.attrs;
  auto bias = [&](size_t index) { return in.size() > index ? in[index] : at::Tensor(); };
  if (op.type == ops::kConv2d) {
    return {at::conv2d(in[0], in[1], bias(2), a.GetInts("stride"), a.GetInts("padding"))};
  }
  if (op.type == ops::kRelu) return {at::relu(in[0])};
  if (op.type == ops::kAvgPool2d) {
    return {at::avg_pool2d(in[0], a.GetInts("kernel"), a.GetInts("stride"))};
  }
  if (op.type == ops::kFlatten) return {in[0].flatten(1)};
  if (op.type == ops::kLinear) return {at::linear(in[0], in[1], bias(2))};
  if (op.type == ops::kAdd) return {at::add(in[0], in[1])};
  if (op.type == ops::kSoftmaxCrossEntropy) {
    // Summed over the rows this op sees, divided by the global batch: data-parallel shards then
    // add up to the single-device mean.
    at::Tensor sum = at::cross_entropy_loss(in[0], in[1], {}, at::Reduction::Sum);
    return {sum / static_cast<double>(a.GetInt("normalizer"))};
  }
  throw graph::GraphError(fmt::format("op '{}': no kernel for op type '{}'", op.name, op.type));
}

}  // namespace placer::runtime
