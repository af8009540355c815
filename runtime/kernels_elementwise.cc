// Kernels of the elementwise op types (graph/ops_elementwise.cc).
#include <ATen/ATen.h>
#include <fmt/format.h>

#include <functional>

#include "graph/ops.h"
#include "runtime/kernel_table.h"

namespace placer::runtime {
namespace {

namespace ops = graph::op_types;
using graph::Attributes;

template <typename F>
Kernel Binary(F f) {
  return [f](const graph::Op&, const std::vector<at::Tensor>& in, const KernelContext&) {
    return std::vector<at::Tensor>{f(in[0], in[1])};
  };
}

// Comparisons and logic give int64 0/1 (the IR's bool).
template <typename F>
Kernel Predicate(F f) {
  return [f](const graph::Op&, const std::vector<at::Tensor>& in, const KernelContext&) {
    return std::vector<at::Tensor>{f(in[0], in[1]).to(at::kLong)};
  };
}

at::Tensor Clip(const Attributes& a, const at::Tensor& x) {
  std::optional<at::Scalar> low, high;
  // On integers the bounds are integers: a float bound would promote the result to float.
  auto bound = [&](const char* name) -> std::optional<at::Scalar> {
    if (!a.Has(name)) return std::nullopt;
    const double v = a.GetFloat(name);
    if (x.is_floating_point()) return at::Scalar(v);
    return at::Scalar(static_cast<int64_t>(std::llround(v)));
  };
  low = bound("min");
  high = bound("max");
  if (!low && !high) return x.view_as(x);
  return at::clamp(x, low, high);
}

// Training-mode dropout with a mask that depends only on the op's seed and the step: drawn on the
// CPU from a generator of its own, then moved, so every device and placement draws the same one.
std::vector<at::Tensor> Dropout(const graph::Op& op, const std::vector<at::Tensor>& in,
                                const KernelContext& context) {
  const double ratio = op.attrs.GetFloat("ratio");
  if (ratio == 0) return {in[0].view_as(in[0])};
  const auto seed = static_cast<uint64_t>(op.attrs.GetInt("seed"));
  // splitmix64's mixing of (seed, step): neighbouring seeds and steps give unrelated streams.
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (context.step + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  at::Generator generator = at::detail::createCPUGenerator(z ^ (z >> 31));
  at::Tensor keep = at::empty(in[0].sizes(), at::kFloat).bernoulli_(1.0 - ratio, generator);
  at::Tensor scale = (keep / (1.0 - ratio)).to(in[0].device());
  return {in[0] * scale};
}

at::Tensor Shrink(const Attributes& a, const at::Tensor& x) {
  const double bias = FloatOr(a, "bias", 0.0), lambd = FloatOr(a, "lambd", 0.5);
  return at::where(x < -lambd, x + bias, at::where(x > lambd, x - bias, at::zeros_like(x)));
}

at::Tensor IsInf(const Attributes& a, const at::Tensor& x) {
  const bool negative = IntOr(a, "detect_negative", 1) != 0;
  const bool positive = IntOr(a, "detect_positive", 1) != 0;
  at::Tensor inf = at::isinf(x);
  if (!negative) inf = inf & (x > 0);
  if (!positive) inf = inf & (x < 0);
  return inf.to(at::kLong);
}

}  // namespace

void AddElementwiseKernels(KernelTable& t) {
  auto unary = [&t](const char* type, at::Tensor (*f)(const at::Tensor&)) {
    t[type] = Unary([f](const Attributes&, const at::Tensor& x) { return f(x); });
  };
  unary(ops::kRelu, at::relu);
  unary(ops::kSigmoid, at::sigmoid);
  unary(ops::kTanh, at::tanh);
  unary(ops::kErf, at::erf);
  unary(ops::kSqrt, at::sqrt);
  unary(ops::kExp, at::exp);
  unary(ops::kLog, at::log);
  unary(ops::kReciprocal, at::reciprocal);
  unary(ops::kSin, at::sin);
  unary(ops::kCos, at::cos);
  unary(ops::kTan, at::tan);
  unary(ops::kAsin, at::asin);
  unary(ops::kAcos, at::acos);
  unary(ops::kAtan, at::atan);
  unary(ops::kSinh, at::sinh);
  unary(ops::kCosh, at::cosh);
  unary(ops::kAsinh, at::asinh);
  unary(ops::kAcosh, at::acosh);
  unary(ops::kAtanh, at::atanh);
  unary(ops::kFloor, at::floor);
  unary(ops::kCeil, at::ceil);
  unary(ops::kRound, at::round);  // half to even, as ONNX
  unary(ops::kMish, at::mish);
  unary(ops::kHardSwish, at::hardswish);
  unary(ops::kNeg, at::neg);
  unary(ops::kAbs, at::abs);
  unary(ops::kSign, at::sign);
  t[ops::kGelu] = Unary([](const Attributes& a, const at::Tensor& x) {
    return at::gelu(x, a.Has("approximate") ? a.GetString("approximate") : "none");
  });
  // A view, not the input itself: autograd needs a node between the op's input and output.
  t[ops::kIdentity] = Unary([](const Attributes&, const at::Tensor& x) { return x.view_as(x); });
  t[ops::kSoftplus] = Unary([](const Attributes&, const at::Tensor& x) {
    return at::softplus(x, /*beta=*/1, /*threshold=*/20);  // PyTorch's default
  });
  t[ops::kSoftsign] =
      Unary([](const Attributes&, const at::Tensor& x) { return x / (1 + at::abs(x)); });
  t[ops::kHardSigmoid] = Unary([](const Attributes& a, const at::Tensor& x) {
    return at::clamp(x * FloatOr(a, "alpha", 0.2) + FloatOr(a, "beta", 0.5), 0.0, 1.0);
  });
  t[ops::kLeakyRelu] = Unary([](const Attributes& a, const at::Tensor& x) {
    return at::leaky_relu(x, FloatOr(a, "alpha", 0.01));
  });
  t[ops::kElu] = Unary(
      [](const Attributes& a, const at::Tensor& x) { return at::elu(x, FloatOr(a, "alpha", 1)); });
  t[ops::kSelu] = Unary([](const Attributes& a, const at::Tensor& x) {
    return at::elu(x, FloatOr(a, "alpha", 1.67326319217681884765625),
                   FloatOr(a, "gamma", 1.05070102214813232421875), 1.0);
  });
  t[ops::kCelu] = Unary([](const Attributes& a, const at::Tensor& x) {
    return at::celu(x, FloatOr(a, "alpha", 1.0));
  });
  t[ops::kThresholdedRelu] = Unary([](const Attributes& a, const at::Tensor& x) {
    return x * (x > FloatOr(a, "alpha", 1.0)).to(x.scalar_type());
  });
  t[ops::kShrink] = Unary(Shrink);
  t[ops::kClip] = Unary(Clip);
  // PyTorch's own conversion: a float out of the integer type's range (or NaN) gives its minimum.
  // bits 32 converts as to int32 (INT32_MIN there, held in int64).
  t[ops::kCast] = Unary([](const Attributes& a, const at::Tensor& x) {
    if (a.GetString("to") != "int64") return x.to(at::kFloat);
    if (IntOr(a, "bits", 64) == 32 && x.is_floating_point()) return x.to(at::kInt).to(at::kLong);
    return x.to(at::kLong);
  });
  t[ops::kIsNaN] =
      Unary([](const Attributes&, const at::Tensor& x) { return at::isnan(x).to(at::kLong); });
  t[ops::kIsInf] = Unary(IsInf);
  t[ops::kNot] =
      Unary([](const Attributes&, const at::Tensor& x) { return (x == 0).to(at::kLong); });
  t[ops::kDropout] = Dropout;

  t[ops::kAdd] = Binary([](const at::Tensor& a, const at::Tensor& b) { return at::add(a, b); });
  t[ops::kSub] = Binary([](const at::Tensor& a, const at::Tensor& b) { return at::sub(a, b); });
  t[ops::kMul] = Binary([](const at::Tensor& a, const at::Tensor& b) { return at::mul(a, b); });
  t[ops::kDiv] = Binary([](const at::Tensor& a, const at::Tensor& b) {
    return a.is_floating_point() ? at::div(a, b) : at::div(a, b, "trunc");
  });
  t[ops::kMax] =
      Binary(static_cast<at::Tensor (*)(const at::Tensor&, const at::Tensor&)>(at::maximum));
  t[ops::kMin] =
      Binary(static_cast<at::Tensor (*)(const at::Tensor&, const at::Tensor&)>(at::minimum));
  t[ops::kMod] = [](const graph::Op& op, const std::vector<at::Tensor>& in, const KernelContext&) {
    const bool fmod = IntOr(op.attrs, "fmod", 0) != 0;
    return std::vector<at::Tensor>{fmod ? at::fmod(in[0], in[1]) : at::remainder(in[0], in[1])};
  };
  // The result keeps the base's type (an integer base with a float exponent stays an integer).
  t[ops::kPow] = Binary(
      [](const at::Tensor& a, const at::Tensor& b) { return at::pow(a, b).to(a.scalar_type()); });
  t[ops::kPRelu] = Binary(
      [](const at::Tensor& x, const at::Tensor& slope) { return at::where(x < 0, x * slope, x); });
  t[ops::kEqual] = Predicate([](const at::Tensor& a, const at::Tensor& b) { return at::eq(a, b); });
  t[ops::kLess] = Predicate([](const at::Tensor& a, const at::Tensor& b) { return at::lt(a, b); });
  t[ops::kLessOrEqual] =
      Predicate([](const at::Tensor& a, const at::Tensor& b) { return at::le(a, b); });
  t[ops::kGreater] =
      Predicate([](const at::Tensor& a, const at::Tensor& b) { return at::gt(a, b); });
  t[ops::kGreaterOrEqual] =
      Predicate([](const at::Tensor& a, const at::Tensor& b) { return at::ge(a, b); });
  t[ops::kAnd] =
      Predicate([](const at::Tensor& a, const at::Tensor& b) { return at::logical_and(a, b); });
  t[ops::kOr] =
      Predicate([](const at::Tensor& a, const at::Tensor& b) { return at::logical_or(a, b); });
  t[ops::kXor] =
      Predicate([](const at::Tensor& a, const at::Tensor& b) { return at::logical_xor(a, b); });
  t[ops::kWhere] = [](const graph::Op&, const std::vector<at::Tensor>& in, const KernelContext&) {
    return std::vector<at::Tensor>{at::where(in[0] != 0, in[1], in[2])};
  };
}

}  // namespace placer::runtime
