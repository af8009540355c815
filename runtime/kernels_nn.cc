// Kernels of the neural-network op types (graph/ops_nn.cc) and of the training step's loss and
// gradient sums (graph/ops_training.cc).
#include <ATen/ATen.h>

#include "graph/ops.h"
#include "runtime/kernel_table.h"

namespace placer::runtime {
namespace {

namespace ops = graph::op_types;
using graph::Attributes;
using Inputs = std::vector<at::Tensor>;

at::Tensor Optional(const Inputs& in, size_t index) {
  return in.size() > index ? in[index] : at::Tensor();
}

std::vector<int64_t> IntsOr(const Attributes& a, const std::string& name,
                            std::vector<int64_t> fallback) {
  return a.Has(name) ? a.GetInts(name) : std::move(fallback);
}

double Epsilon(const Attributes& a) { return FloatOr(a, "epsilon", 1e-5); }

// ONNX LRN: the window over channels c - floor((size - 1) / 2) .. c + ceil((size - 1) / 2).
at::Tensor Lrn(const Attributes& a, const at::Tensor& x) {
  const int64_t size = a.GetInt("size");
  std::vector<int64_t> pads(static_cast<size_t>(2 * (x.dim() - 1)), 0);
  // constant_pad_nd lists the last axis first: axis 1's pair comes last.
  pads[pads.size() - 2] = (size - 1) / 2;
  pads[pads.size() - 1] = size / 2;
  at::Tensor sums = at::constant_pad_nd(x * x, pads).unfold(1, size, 1).sum(-1);
  return x / at::pow(a.GetFloat("bias") + a.GetFloat("alpha") / static_cast<double>(size) * sums,
                     a.GetFloat("beta"));
}

// PyTorch's gate order r, z, n. With linear_before_reset (PyTorch's GRU) the reset gate scales
// W_hn h + b_hn; without (ONNX's default) it scales h before W_hn.
at::Tensor GruCell(const graph::Op& op, const Inputs& in) {
  const at::Tensor &x = in[0], &h = in[1], &w_ih = in[2], &w_hh = in[3];
  const at::Tensor b_ih = Optional(in, 4), b_hh = Optional(in, 5);
  if (IntOr(op.attrs, "linear_before_reset", 1) != 0) {
    return at::gru_cell(x, h, w_ih, w_hh, b_ih, b_hh);
  }
  std::vector<at::Tensor> gi = at::linear(x, w_ih, b_ih).chunk(3, 1);
  std::vector<at::Tensor> w = w_hh.chunk(3, 0);
  std::vector<at::Tensor> b = b_hh.defined() ? b_hh.chunk(3, 0) : std::vector<at::Tensor>(3);
  at::Tensor r = at::sigmoid(gi[0] + at::linear(h, w[0], b[0]));
  at::Tensor z = at::sigmoid(gi[1] + at::linear(h, w[1], b[1]));
  at::Tensor n = at::tanh(gi[2] + at::linear(r * h, w[2], b[2]));
  return (1 - z) * n + z * h;
}

// ONNX's NegativeLogLikelihoodLoss, written out (at::nll_loss takes no gradient for the class
// weights, which a model may train): -w[t] * input[t] per element, targets equal to ignore_index
// weighing 0, the mean divided by the weights' sum.
at::Tensor NllLoss(const Attributes& a, const Inputs& in) {
  const at::Tensor& input = in[0];
  const at::Tensor& target = in[1];
  at::Tensor valid =
      a.Has("ignore_index") ? target != a.GetInt("ignore_index") : at::ones_like(target, at::kBool);
  const at::Tensor safe = at::where(valid, target, at::zeros_like(target));
  const at::Tensor picked = input.gather(1, safe.unsqueeze(1)).squeeze(1);
  at::Tensor weight = valid.to(input.scalar_type());
  if (in.size() > 2) weight = weight * in[2].index_select(0, safe.reshape({-1})).view_as(safe);
  const at::Tensor losses = -picked * weight;
  const std::string& reduction = a.GetString("reduction");
  if (reduction == "none") return losses;
  if (reduction == "sum") return losses.sum();
  return losses.sum() / weight.sum();
}

}  // namespace

void AddNnKernels(KernelTable& t) {
  t[ops::kConv2d] = [](const graph::Op& op, const Inputs& in, const KernelContext&) {
    const Attributes& a = op.attrs;
    return Inputs{at::conv2d(in[0], in[1], Optional(in, 2), a.GetInts("stride"),
                             a.GetInts("padding"), IntsOr(a, "dilation", {1, 1}),
                             IntOr(a, "groups", 1))};
  };
  t[ops::kConvTranspose2d] = [](const graph::Op& op, const Inputs& in, const KernelContext&) {
    const Attributes& a = op.attrs;
    return Inputs{at::conv_transpose2d(in[0], in[1], Optional(in, 2), a.GetInts("stride"),
                                       a.GetInts("padding"), IntsOr(a, "output_padding", {0, 0}),
                                       IntOr(a, "groups", 1), IntsOr(a, "dilation", {1, 1}))};
  };
  t[ops::kMaxPool2d] = Unary([](const Attributes& a, const at::Tensor& x) {
    return at::max_pool2d(x, a.GetInts("kernel"), a.GetInts("stride"), IntsOr(a, "padding", {0, 0}),
                          IntsOr(a, "dilation", {1, 1}), IntOr(a, "ceil_mode", 0) != 0);
  });
  t[ops::kAvgPool2d] = Unary([](const Attributes& a, const at::Tensor& x) {
    return at::avg_pool2d(x, a.GetInts("kernel"), a.GetInts("stride"), IntsOr(a, "padding", {0, 0}),
                          IntOr(a, "ceil_mode", 0) != 0, IntOr(a, "count_include_pad", 1) != 0);
  });
  t[ops::kGlobalAvgPool2d] = Unary([](const Attributes&, const at::Tensor& x) {
    return x.mean({2, 3}, true);
  });
  t[ops::kGlobalMaxPool2d] = Unary([](const Attributes&, const at::Tensor& x) {
    return at::amax(x, {2, 3}, true);
  });
  t[ops::kLinear] = [](const graph::Op&, const Inputs& in, const KernelContext&) {
    return Inputs{at::linear(in[0], in[1], Optional(in, 2))};
  };
  t[ops::kMatMul] = [](const graph::Op&, const Inputs& in, const KernelContext&) {
    return Inputs{at::matmul(in[0], in[1])};
  };
  t[ops::kEinsum] = [](const graph::Op& op, const Inputs& in, const KernelContext&) {
    return Inputs{at::einsum(op.attrs.GetString("equation"), in)};
  };
  t[ops::kLayerNorm] = [](const graph::Op& op, const Inputs& in, const KernelContext&) {
    const int64_t axis = Axis(IntOr(op.attrs, "axis", -1), in[0].dim());
    std::vector<int64_t> normalized(in[0].sizes().begin() + axis, in[0].sizes().end());
    return Inputs{at::layer_norm(in[0], normalized, in[1], Optional(in, 2), Epsilon(op.attrs))};
  };
  t[ops::kBatchNorm] = [](const graph::Op& op, const Inputs& in, const KernelContext&) {
    // Three inputs: training mode, the minibatch's statistics (running statistics are not part of
    // the step). Five: the given mean and variance.
    const bool training = in.size() == 3;
    return Inputs{at::batch_norm(in[0], in[1], in[2], Optional(in, 3), Optional(in, 4), training,
                                 /*momentum=*/0.1, Epsilon(op.attrs), /*cudnn_enabled=*/true)};
  };
  t[ops::kInstanceNorm] = [](const graph::Op& op, const Inputs& in, const KernelContext&) {
    return Inputs{at::instance_norm(in[0], in[1], in[2], {}, {}, /*use_input_stats=*/true,
                                    /*momentum=*/0.1, Epsilon(op.attrs), /*cudnn_enabled=*/true)};
  };
  t[ops::kGroupNorm] = [](const graph::Op& op, const Inputs& in, const KernelContext&) {
    return Inputs{
        at::group_norm(in[0], op.attrs.GetInt("groups"), in[1], in[2], Epsilon(op.attrs))};
  };
  t[ops::kLrn] = Unary(Lrn);
  t[ops::kLstmCell] = [](const graph::Op&, const Inputs& in, const KernelContext&) {
    auto [h, c] = at::lstm_cell(in[0], {in[1], in[2]}, in[3], in[4], Optional(in, 5), {});
    return Inputs{h, c};
  };
  t[ops::kGruCell] = [](const graph::Op& op, const Inputs& in, const KernelContext&) {
    return Inputs{GruCell(op, in)};
  };
  t[ops::kRnnCell] = [](const graph::Op& op, const Inputs& in, const KernelContext&) {
    const bool relu = op.attrs.Has("activation") && op.attrs.GetString("activation") == "relu";
    return Inputs{
        relu ? at::rnn_relu_cell(in[0], in[1], in[2], in[3], Optional(in, 4), Optional(in, 5))
             : at::rnn_tanh_cell(in[0], in[1], in[2], in[3], Optional(in, 4), Optional(in, 5))};
  };
  t[ops::kNllLoss] = [](const graph::Op& op, const Inputs& in, const KernelContext&) {
    return Inputs{NllLoss(op.attrs, in)};
  };
  t[ops::kSoftmaxCrossEntropy] = [](const graph::Op& op, const Inputs& in, const KernelContext&) {
    // Summed over the rows this op sees, divided by the global batch: data-parallel shards then
    // add up to the single-device mean.
    at::Tensor sum = at::cross_entropy_loss(in[0], in[1], {}, at::Reduction::Sum);
    return Inputs{sum / static_cast<double>(op.attrs.GetInt("normalizer"))};
  };
  t[ops::kAddN] = [](const graph::Op&, const Inputs& in, const KernelContext&) {
    at::Tensor sum = in[0];
    for (size_t i = 1; i < in.size(); ++i) sum = sum + in[i];
    return Inputs{sum};
  };
}

}  // namespace placer::runtime
