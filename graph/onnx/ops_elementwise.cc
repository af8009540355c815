// ONNX elementwise ops: unary functions and activations, arithmetic with broadcasting (variadic
// Sum, Mean, Max, Min included), comparisons and logic, Where, Clip, Cast and Dropout.
#include <fmt/format.h>

#include <cmath>
#include <functional>
#include <limits>

#include "graph/onnx/loader.h"
#include "graph/ops.h"

namespace placer::graph::onnx {
namespace {

namespace t = op_types;

// An elementwise function of one float input with float attributes (their ONNX defaults): IR op
// `ir` at run time, `f(value, attributes)` at load time.
struct UnaryOp {
  const char* onnx;
  const char* ir;
  std::vector<std::pair<const char*, double>> attrs;
  std::function<double(double, const std::vector<double>&)> f;
};

void AddUnary(OpTable& table, const UnaryOp& op) {
  auto values = [op](Loader& l) {
    std::vector<double> v;
    for (const auto& [name, fallback] : op.attrs) v.push_back(l.AttrFloat(name, fallback));
    return v;
  };
  table[op.onnx] = {[op, values](Loader& l, const std::vector<KnownPtr>& in) {
                      const std::vector<double> a = values(l);
                      const Known& x = Arg(in, 0);
                      return One(MapFold(x, x.type, [&](double v) { return op.f(v, a); }));
                    },
                    [op, values](Loader& l) {
                      const std::vector<double> a = values(l);
                      Attributes attrs;
                      for (size_t k = 0; k < a.size(); ++k) attrs.Set(op.attrs[k].first, a[k]);
                      l.EmitOutput(op.ir, {l.Tensor(0)}, std::move(attrs));
                    }};
}

double Sigmoid(double v) { return 1 / (1 + std::exp(-v)); }

double Softplus(double v) { return v > 20 ? v : std::log1p(std::exp(v)); }

void AddUnaryOps(OpTable& table) {
  using A = const std::vector<double>&;
  const UnaryOp ops[] = {
      {"Relu", t::kRelu, {}, [](double v, A) { return v > 0 ? v : 0.0; }},
      {"Sigmoid", t::kSigmoid, {}, [](double v, A) { return Sigmoid(v); }},
      {"Tanh", t::kTanh, {}, [](double v, A) { return std::tanh(v); }},
      {"Erf", t::kErf, {}, [](double v, A) { return std::erf(v); }},
      {"Sqrt", t::kSqrt, {}, [](double v, A) { return std::sqrt(v); }},
      {"Exp", t::kExp, {}, [](double v, A) { return std::exp(v); }},
      {"Log", t::kLog, {}, [](double v, A) { return std::log(v); }},
      {"Reciprocal", t::kReciprocal, {}, [](double v, A) { return 1 / v; }},
      {"Sin", t::kSin, {}, [](double v, A) { return std::sin(v); }},
      {"Cos", t::kCos, {}, [](double v, A) { return std::cos(v); }},
      {"Tan", t::kTan, {}, [](double v, A) { return std::tan(v); }},
      {"Asin", t::kAsin, {}, [](double v, A) { return std::asin(v); }},
      {"Acos", t::kAcos, {}, [](double v, A) { return std::acos(v); }},
      {"Atan", t::kAtan, {}, [](double v, A) { return std::atan(v); }},
      {"Sinh", t::kSinh, {}, [](double v, A) { return std::sinh(v); }},
      {"Cosh", t::kCosh, {}, [](double v, A) { return std::cosh(v); }},
      {"Asinh", t::kAsinh, {}, [](double v, A) { return std::asinh(v); }},
      {"Acosh", t::kAcosh, {}, [](double v, A) { return std::acosh(v); }},
      {"Atanh", t::kAtanh, {}, [](double v, A) { return std::atanh(v); }},
      {"Floor", t::kFloor, {}, [](double v, A) { return std::floor(v); }},
      {"Ceil", t::kCeil, {}, [](double v, A) { return std::ceil(v); }},
      // nearbyint rounds half to even in the default rounding mode, as ONNX's Round.
      {"Round", t::kRound, {}, [](double v, A) { return std::nearbyint(v); }},
      {"Softplus", t::kSoftplus, {}, [](double v, A) { return Softplus(v); }},
      {"Softsign", t::kSoftsign, {}, [](double v, A) { return v / (1 + std::abs(v)); }},
      {"Mish", t::kMish, {}, [](double v, A) { return v * std::tanh(Softplus(v)); }},
      {"HardSwish",
       t::kHardSwish,
       {},
       [](double v, A) { return v * std::clamp(v / 6 + 0.5, 0.0, 1.0); }},
      {"HardSigmoid",
       t::kHardSigmoid,
       {{"alpha", 0.2}, {"beta", 0.5}},
       [](double v, A a) { return std::clamp(a[0] * v + a[1], 0.0, 1.0); }},
      {"LeakyRelu",
       t::kLeakyRelu,
       {{"alpha", 0.01}},
       [](double v, A a) { return v >= 0 ? v : a[0] * v; }},
      {"Elu",
       t::kElu,
       {{"alpha", 1.0}},
       [](double v, A a) { return v > 0 ? v : a[0] * (std::exp(v) - 1); }},
      {"Selu",
       t::kSelu,
       {{"alpha", 1.67326319217681884765625}, {"gamma", 1.05070102214813232421875}},
       [](double v, A a) { return a[1] * (v > 0 ? v : a[0] * (std::exp(v) - 1)); }},
      {"Celu",
       t::kCelu,
       {{"alpha", 1.0}},
       [](double v, A a) {
         return std::max(0.0, v) + std::min(0.0, a[0] * (std::exp(v / a[0]) - 1));
       }},
      {"ThresholdedRelu",
       t::kThresholdedRelu,
       {{"alpha", 1.0}},
       [](double v, A a) { return v > a[0] ? v : 0.0; }},
      {"Shrink",
       t::kShrink,
       {{"bias", 0.0}, {"lambd", 0.5}},
       [](double v, A a) { return v < -a[1]  ? v + a[0]
                                  : v > a[1] ? v - a[0]
                                             : 0.0; }},
  };
  for (const UnaryOp& op : ops) AddUnary(table, op);
  table["Gelu"] = {[](Loader& l, const std::vector<KnownPtr>& in) {
                     const bool tanh = l.AttrString("approximate", "none") == "tanh";
                     return One(MapFold(Arg(in, 0), Arg(in, 0).type, [tanh](double v) {
                       if (!tanh) return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
                       return 0.5 * v *
                              (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
                     }));
                   },
                   [](Loader& l) {
                     const std::string approximate = l.AttrString("approximate", "none");
                     if (approximate != "none" && approximate != "tanh") {
                       throw GraphError(fmt::format("unknown approximation '{}'", approximate));
                     }
                     Attributes attrs;
                     if (approximate == "tanh") attrs.Set("approximate", approximate);
                     l.EmitOutput(t::kGelu, {l.Tensor(0)}, std::move(attrs));
                   }};
}

// Ops that take integers too: folded by `f` on doubles (exact for the integers of shapes), run as
// IR op `ir` of any type.
void AddAnyTypeUnary(OpTable& table, const char* onnx, const char* ir, int out_type,
                     std::function<double(double)> f) {
  table[onnx] = {[f, out_type](Loader&, const std::vector<KnownPtr>& in) {
                   const Known& x = Arg(in, 0);
                   return One(MapFold(x, out_type == 0 ? x.type : out_type, f));
                 },
                 [ir](Loader& l) { l.EmitOutput(ir, {l.Tensor(0)}); }};
}

std::vector<Known> FoldCast(int to, const Known& x) {
  Known r = Empty(to, x.shape);
  for (int64_t e = 0; e < x.size(); ++e) {
    if (to == kBool) {
      StoreInt(r, e, x.F(e) != 0 ? 1 : 0);
    } else if (x.is_float() && r.is_float()) {
      Store(r, e, x.f[static_cast<size_t>(e)]);
    } else if (x.is_float()) {
      // PyTorch's conversion: NaN and out-of-range values give the type's minimum. (T5's relative
      // position buckets cast log(0) = -inf to int64, in a branch that a Where then discards.)
      StoreInt(r, e, CastFloatToInt(x.f[static_cast<size_t>(e)], to));
    } else {
      StoreInt(r, e, x.I(e));
    }
  }
  return One(std::move(r));
}

// Cast of a runtime tensor: to float32 (or float64, computed in float32), to int32 or int64 (the
// IR's int64 holds both; a float cast to int32 converts as to int32, its out-of-range values giving
// INT32_MIN as PyTorch's do), or to bool (x != 0). Narrower types would wrap or round differently.
void ConvertCast(Loader& l, int to) {
  const TensorId x = l.Tensor(0);
  const DType from = l.graph().tensor(x).dtype;
  if (to == kBool) {
    const TensorId zero = from == DType::kFloat32
                              ? l.ConstantOp(l.NodeBase() + "/zero", {}, {0})
                              : l.IntConstantOp(l.NodeBase() + "/zero", {}, {0});
    l.EmitOutput(t::kNot, {l.Sub("is_zero", t::kEqual, {x, zero})});
    return;
  }
  DType target;
  if (to == kFloat || to == kDouble) {
    target = DType::kFloat32;
  } else if (to == kInt64 || to == kInt32) {
    target = DType::kInt64;
  } else {
    l.Unsupported(fmt::format("Cast of a runtime tensor to {}", TypeName(to)));
  }
  if (target == from) {
    l.EmitOutput(t::kIdentity, {x});
    return;
  }
  Attributes attrs;
  attrs.Set("to", std::string(target == DType::kFloat32 ? "float32" : "int64"));
  if (to == kInt32) attrs.Set("bits", int64_t{32});
  l.EmitOutput(t::kCast, {x}, std::move(attrs));
}

int CastTarget(Loader& l) {
  if (l.type() == "CastLike") {
    const Loader::Value& v = l.In(1);
    if (v.known) return v.known->type;
    return l.graph().tensor(*v.tensor).dtype == DType::kFloat32 ? kFloat : kInt64;
  }
  const int to = static_cast<int>(l.AttrInt("to", kFloat));
  if (!IsFloatType(to) && !IsIntType(to)) l.Unsupported("Cast to " + TypeName(to));
  return to;
}

int64_t Add(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) Overflow();
  return r;
}

// Binary arithmetic: IR op `ir` at run time; the legacy (opset < 7) broadcast with an axis is
// refused.
void AddBinary(OpTable& table, const char* onnx, const char* ir, Fold fold) {
  table[onnx] = {std::move(fold), [ir](Loader& l) {
                   if (l.opset() < 7 && l.AttrInt("broadcast", 0) != 0 && l.HasAttr("axis")) {
                     l.Unsupported("legacy broadcasting with an axis");
                   }
                   l.EmitOutput(ir, {l.Tensor(0), l.Tensor(1)});
                 }};
}

// Variadic ops as a chain of binary IR ops `ir` (Mean divides the sum by the count).
void ConvertChain(Loader& l, const char* ir, bool mean) {
  TensorId acc = l.Tensor(0);
  const size_t n = l.NumInputs();
  for (size_t k = 1; k < n; ++k) {
    const bool last = k + 1 == n && !mean;
    const std::string name = last ? l.NodeBase() : fmt::format("{}/{}{}", l.NodeBase(), ir, k);
    acc = l.Emit1(name, ir, {acc, l.Tensor(k)}, {}, last ? l.OutputName(0) : name);
  }
  if (mean) {
    const TensorId count = l.ConstantOp(l.NodeBase() + "/count", {}, {static_cast<float>(n)});
    acc = l.Emit1(l.NodeBase(), t::kDiv, {acc, count}, {}, l.OutputName(0));
  } else if (n == 1) {
    acc = l.Emit1(l.NodeBase(), t::kIdentity, {acc}, {}, l.OutputName(0));
  }
  l.Define(0, acc);
}

template <typename FF, typename FI>
Fold Variadic(FF ff, FI fi, bool mean = false) {
  return [ff, fi, mean](Loader&, const std::vector<KnownPtr>& in) {
    Known acc = Arg(in, 0);
    for (size_t k = 1; k < in.size(); ++k) acc = BinaryFold(acc, Arg(in, k), acc.type, ff, fi);
    if (mean) {
      const double n = static_cast<double>(in.size());
      acc = MapFold(acc, acc.type, [n](double v) { return v / n; });
    }
    return One(std::move(acc));
  };
}

void AddArithmetic(OpTable& table) {
  auto minmax = [](bool max) {
    return Variadic([max](double a, double b) { return max ? std::max(a, b) : std::min(a, b); },
                    [max](int64_t a, int64_t b) { return max ? std::max(a, b) : std::min(a, b); });
  };
  const auto sum = Variadic(std::plus<double>(), Add);
  AddBinary(table, "Add", t::kAdd, sum);
  table["Sum"] = {sum, [](Loader& l) { ConvertChain(l, t::kAdd, false); }};
  table["Mean"] = {Variadic(std::plus<double>(), Add, true),
                   [](Loader& l) { ConvertChain(l, t::kAdd, true); }};
  table["Max"] = {minmax(true), [](Loader& l) { ConvertChain(l, t::kMax, false); }};
  table["Min"] = {minmax(false), [](Loader& l) { ConvertChain(l, t::kMin, false); }};
  AddBinary(table, "Sub", t::kSub, [](Loader&, const std::vector<KnownPtr>& in) {
    return One(BinaryFold(Arg(in, 0), Arg(in, 1), Arg(in, 0).type, std::minus<double>(),
                          [](int64_t a, int64_t b) {
                            int64_t r;
                            if (__builtin_sub_overflow(a, b, &r)) Overflow();
                            return r;
                          }));
  });
  AddBinary(table, "Mul", t::kMul, [](Loader&, const std::vector<KnownPtr>& in) {
    return One(BinaryFold(Arg(in, 0), Arg(in, 1), Arg(in, 0).type, std::multiplies<double>(),
                          [](int64_t a, int64_t b) {
                            int64_t r;
                            if (__builtin_mul_overflow(a, b, &r)) Overflow();
                            return r;
                          }));
  });
  AddBinary(table, "Div", t::kDiv, [](Loader&, const std::vector<KnownPtr>& in) {
    return One(BinaryFold(Arg(in, 0), Arg(in, 1), Arg(in, 0).type, std::divides<double>(),
                          [](int64_t a, int64_t b) {
                            if (b == 0) throw GraphError("integer division by zero");
                            if (a == std::numeric_limits<int64_t>::min() && b == -1) Overflow();
                            return a / b;
                          }));
  });
  AddBinary(table, "Pow", t::kPow, [](Loader&, const std::vector<KnownPtr>& in) {
    return One(BinaryFold(
        Arg(in, 0), Arg(in, 1), Arg(in, 0).type, [](double a, double b) { return std::pow(a, b); },
        [](int64_t a, int64_t b) {
          const double p = std::pow(static_cast<double>(a), static_cast<double>(b));
          if (!(p >= -9223372036854775808.0 && p < 9223372036854775808.0)) Overflow();
          return static_cast<int64_t>(p);
        }));
  });
  table["Mod"] = {[](Loader& l, const std::vector<KnownPtr>& in) {
                    const bool fmod = l.AttrInt("fmod", 0) != 0;
                    return One(BinaryFold(
                        Arg(in, 0), Arg(in, 1), Arg(in, 0).type,
                        [fmod](double a, double b) {
                          double m = std::fmod(a, b);
                          if (!fmod && m != 0 && ((m < 0) != (b < 0))) m += b;
                          return m;
                        },
                        [fmod](int64_t a, int64_t b) {
                          if (b == 0) throw GraphError("integer modulo by zero");
                          if (b == -1) return int64_t{0};  // INT64_MIN % -1 would trap
                          int64_t m = a % b;
                          if (!fmod && m != 0 && ((m < 0) != (b < 0)))
                            m += b;  // the divisor's sign
                          return m;
                        }));
                  },
                  [](Loader& l) {
                    Attributes attrs;
                    attrs.Set("fmod", l.AttrInt("fmod", 0));
                    l.EmitOutput(t::kMod, {l.Tensor(0), l.Tensor(1)}, std::move(attrs));
                  }};
  table["PRelu"] = {nullptr, [](Loader& l) {
                      l.EmitOutput(t::kPRelu, {l.Tensor(0), l.Tensor(1)});
                    }};
}

// Comparisons and logic give bools (IR: int64 0/1); `f` is generic, so integers compare as
// integers (doubles would merge neighbours above 2^53).
template <typename F>
void AddPredicate(OpTable& table, const char* onnx, const char* ir, F f) {
  AddBinary(table, onnx, ir, [f](Loader&, const std::vector<KnownPtr>& in) {
    return One(BinaryFold(
        Arg(in, 0), Arg(in, 1), kBool, [f](double a, double b) { return f(a, b) ? 1.0 : 0.0; },
        [f](int64_t a, int64_t b) { return f(a, b) ? int64_t{1} : int64_t{0}; }));
  });
}

void AddLogic(OpTable& table) {
  AddPredicate(table, "Equal", t::kEqual, [](auto a, auto b) { return a == b; });
  AddPredicate(table, "Less", t::kLess, [](auto a, auto b) { return a < b; });
  AddPredicate(table, "LessOrEqual", t::kLessOrEqual, [](auto a, auto b) { return a <= b; });
  AddPredicate(table, "Greater", t::kGreater, [](auto a, auto b) { return a > b; });
  AddPredicate(table, "GreaterOrEqual", t::kGreaterOrEqual, [](auto a, auto b) { return a >= b; });
  AddPredicate(table, "And", t::kAnd, [](auto a, auto b) { return a != 0 && b != 0; });
  AddPredicate(table, "Or", t::kOr, [](auto a, auto b) { return a != 0 || b != 0; });
  AddPredicate(table, "Xor", t::kXor, [](auto a, auto b) { return (a != 0) != (b != 0); });
  AddAnyTypeUnary(table, "Not", t::kNot, kBool, [](double v) { return v == 0 ? 1.0 : 0.0; });
  table["Where"] = {[](Loader&, const std::vector<KnownPtr>& in) {
                      const Known &c = Arg(in, 0), &a = Arg(in, 1), &b = Arg(in, 2);
                      const Shape out = BroadcastShapes(BroadcastShapes(c.shape, a.shape), b.shape);
                      const auto sc = BroadcastStrides(c.shape, out),
                                 sa = BroadcastStrides(a.shape, out),
                                 sb = BroadcastStrides(b.shape, out);
                      Known r = Empty(a.type, out);
                      ForEachIndex(out, [&](int64_t flat, const std::vector<int64_t>& index) {
                        const bool pick_a = c.I(Dot(index, sc)) != 0;
                        CopyElement(pick_a ? a : b, Dot(index, pick_a ? sa : sb), r, flat);
                      });
                      return One(std::move(r));
                    },
                    [](Loader& l) {
                      l.EmitOutput(t::kWhere, {l.Tensor(0), l.Tensor(1), l.Tensor(2)});
                    }};
  table["IsNaN"] = {
      [](Loader&, const std::vector<KnownPtr>& in) {
        return One(MapFold(Arg(in, 0), kBool, [](double v) { return std::isnan(v) ? 1.0 : 0.0; }));
      },
      [](Loader& l) { l.EmitOutput(t::kIsNaN, {l.Tensor(0)}); }};
  table["IsInf"] = {[](Loader& l, const std::vector<KnownPtr>& in) {
                      const bool negative = l.AttrInt("detect_negative", 1) != 0;
                      const bool positive = l.AttrInt("detect_positive", 1) != 0;
                      return One(MapFold(Arg(in, 0), kBool, [=](double v) {
                        return std::isinf(v) && (v > 0 ? positive : negative) ? 1.0 : 0.0;
                      }));
                    },
                    [](Loader& l) {
                      Attributes attrs;
                      attrs.Set("detect_negative", l.AttrInt("detect_negative", 1));
                      attrs.Set("detect_positive", l.AttrInt("detect_positive", 1));
                      l.EmitOutput(t::kIsInf, {l.Tensor(0)}, std::move(attrs));
                    }};
}

// Clip's bounds: attributes before opset 11, optional inputs from then on.
void ConvertClip(Loader& l) {
  const TensorId x = l.Tensor(0);
  if (l.opset() < 11) {
    Attributes attrs;
    attrs.Set("min", l.AttrFloat("min", -std::numeric_limits<float>::max()));
    attrs.Set("max", l.AttrFloat("max", std::numeric_limits<float>::max()));
    l.EmitOutput(t::kClip, {x}, std::move(attrs));
    return;
  }
  const bool has_min = l.HasInput(1), has_max = l.HasInput(2);
  if ((!has_min || l.IsKnown(1)) && (!has_max || l.IsKnown(2))) {
    Attributes attrs;
    if (has_min) attrs.Set("min", l.KnownFloats(1, "min").at(0));
    if (has_max) attrs.Set("max", l.KnownFloats(2, "max").at(0));
    l.EmitOutput(t::kClip, {x}, std::move(attrs));
    return;
  }
  // Runtime bounds: max(x, min), then min(., max).
  TensorId y = x;
  if (has_min) {
    y = has_max ? l.Sub("min", t::kMax, {y, l.Tensor(1)})
                : l.Emit1(l.NodeBase(), t::kMax, {y, l.Tensor(1)}, {}, l.OutputName(0));
  }
  if (has_max) y = l.Emit1(l.NodeBase(), t::kMin, {y, l.Tensor(2)}, {}, l.OutputName(0));
  if (!has_min && !has_max) y = l.Emit1(l.NodeBase(), t::kIdentity, {y}, {}, l.OutputName(0));
  l.Define(0, y);
}

std::vector<Known> FoldClip(Loader& l, const std::vector<KnownPtr>& in) {
  double low = -std::numeric_limits<double>::infinity(), high = -low;
  if (l.opset() < 11) {
    low = l.AttrFloat("min", low);
    high = l.AttrFloat("max", high);
  } else {
    if (in.size() > 1 && in[1]) low = in[1]->F(0);
    if (in.size() > 2 && in[2]) high = in[2]->F(0);
  }
  return One(MapFold(Arg(in, 0), Arg(in, 0).type,
                     [=](double v) { return std::min(std::max(v, low), high); }));
}

// Dropout is training-mode only when the node says so (opset 12's training_mode input, known at
// load time); otherwise, and with OnnxOptions::dropout off, its input passes through.
void ConvertDropout(Loader& l) {
  bool training = false;
  double ratio = l.opset() < 12 ? l.AttrFloat("ratio", 0.5) : 0.5;
  if (l.opset() >= 12) {
    if (l.HasInput(2)) training = l.KnownInts(2, "training_mode").at(0) != 0;
    // The ratio matters only in training mode (a graph input otherwise does not have to be known).
    if (training && l.HasInput(1)) ratio = l.KnownFloats(1, "ratio").at(0);
  }
  const bool drops = training && l.options().dropout && ratio > 0;
  if (l.OutputLive(0)) {
    if (drops) {
      // A seed of its own for every node: from the file, or from the node's name.
      uint64_t seed = 14695981039346656037ull;  // FNV-1a
      for (char c : l.NodeBase()) seed = (seed ^ static_cast<unsigned char>(c)) * 1099511628211ull;
      Attributes attrs;
      attrs.Set("ratio", ratio);
      attrs.Set("seed", l.HasAttr("seed") ? l.AttrInt("seed", 0) : static_cast<int64_t>(seed >> 1));
      l.EmitOutput(t::kDropout, {l.Tensor(0)}, std::move(attrs));
    } else {
      l.EmitOutput(t::kIdentity, {l.Tensor(0)});
    }
  }
  if (l.OutputLive(1)) {
    if (drops) l.Unsupported("the mask output of a training-mode Dropout");
    Known mask = Empty(kBool, l.InShape(0));
    for (int64_t e = 0; e < mask.size(); ++e) StoreInt(mask, e, 1);
    l.DefineKnown(1, std::move(mask));
  }
}

}  // namespace

void AddElementwiseOps(OpTable& table) {
  AddUnaryOps(table);
  AddAnyTypeUnary(table, "Neg", t::kNeg, 0, [](double v) { return -v; });
  AddAnyTypeUnary(table, "Abs", t::kAbs, 0, [](double v) { return std::abs(v); });
  AddAnyTypeUnary(table, "Sign", t::kSign, 0, [](double v) {
    return v > 0 ? 1.0 : v < 0 ? -1.0 : 0.0;
  });
  AddArithmetic(table);
  AddLogic(table);
  table["Identity"] = {[](Loader&, const std::vector<KnownPtr>& in) { return One(Arg(in, 0)); },
                       [](Loader& l) { l.EmitOutput(t::kIdentity, {l.Tensor(0)}); }};
  table["Clip"] = {FoldClip, ConvertClip};
  for (const char* cast : {"Cast", "CastLike"}) {
    table[cast] = {[](Loader& l, const std::vector<KnownPtr>& in) {
                     return FoldCast(CastTarget(l), Arg(in, 0));
                   },
                   [](Loader& l) { ConvertCast(l, CastTarget(l)); }};
  }
  table["Dropout"] = {nullptr, ConvertDropout};
}

}  // namespace placer::graph::onnx
