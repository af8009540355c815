// Kernels of the reductions and of the ops that pick along an axis (graph/ops_reduce.cc).
#include <ATen/ATen.h>

#include <algorithm>

#include "graph/ops.h"
#include "runtime/kernel_table.h"

namespace placer::runtime {
namespace {

namespace ops = graph::op_types;
using graph::Attributes;
using Inputs = std::vector<at::Tensor>;

std::vector<int64_t> Axes(const Attributes& a, int64_t rank) {
  std::vector<int64_t> axes;
  for (int64_t axis : a.GetInts("axes")) axes.push_back(Axis(axis, rank));
  return axes;
}

bool Keep(const Attributes& a) { return IntOr(a, "keepdims", 1) != 0; }

// f(x, axes, keepdims) for a reduction LibTorch takes over several axes at once.
template <typename F>
Kernel Reduction(F f) {
  return Unary(
      [f](const Attributes& a, const at::Tensor& x) { return f(x, Axes(a, x.dim()), Keep(a)); });
}

at::Tensor Prod(const at::Tensor& x, const std::vector<int64_t>& axes, bool keep) {
  at::Tensor y = x;
  for (int64_t axis : axes) y = at::prod(y, axis, /*keepdim=*/true);
  if (keep) return y;
  std::vector<int64_t> descending = axes;
  std::sort(descending.rbegin(), descending.rend());
  for (int64_t axis : descending) y = y.squeeze(axis);
  return y;
}

at::Tensor Arg(const Attributes& a, const at::Tensor& x, bool max) {
  const int64_t axis = Axis(a.GetInt("axis"), x.dim());
  const bool keep = Keep(a);
  if (IntOr(a, "select_last_index", 0) == 0) {
    return max ? at::argmax(x, axis, keep) : at::argmin(x, axis, keep);
  }
  // The last of equal extremes: the first one of the reversed axis, counted from the end.
  at::Tensor reversed = x.flip(axis);
  at::Tensor first = max ? at::argmax(reversed, axis, keep) : at::argmin(reversed, axis, keep);
  return x.size(axis) - 1 - first;
}

}  // namespace

void AddReduceKernels(KernelTable& t) {
  t[ops::kReduceMean] = Reduction([](const at::Tensor& x, const std::vector<int64_t>& axes,
                                     bool keep) { return x.mean(axes, keep); });
  t[ops::kReduceSum] = Reduction([](const at::Tensor& x, const std::vector<int64_t>& axes,
                                    bool keep) { return x.sum(axes, keep); });
  t[ops::kReduceMax] = Reduction([](const at::Tensor& x, const std::vector<int64_t>& axes,
                                    bool keep) { return at::amax(x, axes, keep); });
  t[ops::kReduceMin] = Reduction([](const at::Tensor& x, const std::vector<int64_t>& axes,
                                    bool keep) { return at::amin(x, axes, keep); });
  t[ops::kReduceProd] = Reduction(Prod);
  t[ops::kReduceL1] = Reduction([](const at::Tensor& x, const std::vector<int64_t>& axes,
                                   bool keep) { return at::linalg_vector_norm(x, 1, axes, keep); });
  t[ops::kReduceL2] = Reduction([](const at::Tensor& x, const std::vector<int64_t>& axes,
                                   bool keep) { return at::linalg_vector_norm(x, 2, axes, keep); });
  t[ops::kReduceSumSquare] = Reduction([](const at::Tensor& x, const std::vector<int64_t>& axes,
                                          bool keep) { return (x * x).sum(axes, keep); });
  t[ops::kReduceLogSum] = Reduction([](const at::Tensor& x, const std::vector<int64_t>& axes,
                                       bool keep) { return at::log(x.sum(axes, keep)); });
  t[ops::kReduceLogSumExp] = Reduction([](const at::Tensor& x, const std::vector<int64_t>& axes,
                                          bool keep) { return at::logsumexp(x, axes, keep); });
  t[ops::kArgMax] = Unary([](const Attributes& a, const at::Tensor& x) { return Arg(a, x, true); });
  t[ops::kArgMin] =
      Unary([](const Attributes& a, const at::Tensor& x) { return Arg(a, x, false); });
  t[ops::kTopK] = [](const graph::Op& op, const Inputs& in, const KernelContext&) {
    const graph::Attributes& a = op.attrs;
    auto [values, indices] = at::topk(in[0], a.GetInt("k"), Axis(a.GetInt("axis"), in[0].dim()),
                                      IntOr(a, "largest", 1) != 0, /*sorted=*/true);
    return Inputs{values, indices};
  };
  t[ops::kSoftmax] = Unary([](const Attributes& a, const at::Tensor& x) {
    return at::softmax(x, Axis(a.GetInt("axis"), x.dim()));
  });
  t[ops::kLogSoftmax] = Unary([](const Attributes& a, const at::Tensor& x) {
    return at::log_softmax(x, Axis(a.GetInt("axis"), x.dim()));
  });
  // Piecewise constant: no gradient reaches x.
  t[ops::kHardmax] = Unary([](const Attributes& a, const at::Tensor& x) {
    const int64_t axis = Axis(a.GetInt("axis"), x.dim());
    return at::zeros_like(x).scatter(axis, at::argmax(x, axis, /*keepdim=*/true), 1.0);
  });
}

}  // namespace placer::runtime
