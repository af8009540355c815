// Neural-network op types: convolutions, pooling, dense algebra (Linear, MatMul, Einsum),
// normalisations, recurrent cells and the negative log-likelihood.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>

#include "graph/op_rules.h"
#include "graph/ops.h"

namespace placer::graph {
namespace {

std::pair<int64_t, int64_t> OptionalPair(const Op& op, const std::string& name, int64_t fallback) {
  return op.attrs.Has(name) ? Pair(op, name) : std::pair<int64_t, int64_t>{fallback, fallback};
}

int64_t Groups(const Op& op) { return op.attrs.Has("groups") ? op.attrs.GetInt("groups") : 1; }

std::vector<Shape> ConvShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 2, 3);
  ExpectFloat(g, op, 0);
  ExpectRank(g, op, 0, 4);
  ExpectRank(g, op, 1, 4);
  const Shape& x = InputShape(g, op, 0);
  const Shape& w = InputShape(g, op, 1);
  const int64_t groups = Groups(op);
  if (groups <= 0 || w[0] % groups != 0) {
    throw GraphError(
        fmt::format("groups {} must be positive and divide the {} output channels", groups, w[0]));
  }
  if (w[1] * groups != x[1]) {
    throw GraphError(fmt::format("weight '{}' expects {} input channels, input has {}",
                                 g.tensor(op.inputs[1]).name, w[1] * groups, x[1]));
  }
  ExpectBias(g, op, 2, w[0]);
  auto [stride_h, stride_w] = Pair(op, "stride");
  auto [pad_h, pad_w] = Pair(op, "padding");
  auto [dil_h, dil_w] = OptionalPair(op, "dilation", 1);
  return {{x[0], w[0], WindowExtent(x[2], w[2], stride_h, pad_h, pad_h, dil_h),
           WindowExtent(x[3], w[3], stride_w, pad_w, pad_w, dil_w)}};
}

double ConvFlops(const Graph& g, const Op& op) {
  const Shape& w = InputShape(g, op, 1);
  const Shape& out = g.tensor(op.outputs[0]).shape;
  double macs = Numel(out) * static_cast<double>(w[1] * w[2] * w[3]);
  return 2 * macs + (op.inputs.size() == 3 ? Numel(out) : 0);
}

std::vector<Shape> ConvTransposeShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 2, 3);
  ExpectFloat(g, op, 0);
  ExpectRank(g, op, 0, 4);
  ExpectRank(g, op, 1, 4);
  const Shape& x = InputShape(g, op, 0);
  const Shape& w = InputShape(g, op, 1);
  const int64_t groups = Groups(op);
  if (groups <= 0 || x[1] % groups != 0 || w[0] != x[1]) {
    throw GraphError(fmt::format("weight '{}' {} does not take {} input channels in {} groups",
                                 g.tensor(op.inputs[1]).name, ToString(w), x[1], groups));
  }
  const int64_t out_channels = w[1] * groups;
  ExpectBias(g, op, 2, out_channels);
  const auto stride = Ints(op, "stride", 2, 1);
  const auto padding = Ints(op, "padding", 2, 0);
  const auto output_padding = Ints(op, "output_padding", 2, 0, {0, 0});
  const auto dilation = Ints(op, "dilation", 2, 1, {1, 1});
  Shape out = {x[0], out_channels, 0, 0};
  for (size_t d = 0; d < 2; ++d) {
    if (output_padding[d] >= std::max(stride[d], dilation[d])) {
      throw GraphError("output_padding must be smaller than the stride or the dilation");
    }
    // In 128 bits: the attributes come from files, and their products must not wrap.
    const __int128 extent = static_cast<__int128>(x[2 + d] - 1) * stride[d] - 2 * padding[d] +
                            static_cast<__int128>(dilation[d]) * (w[2 + d] - 1) +
                            output_padding[d] + 1;
    if (extent < 1) throw GraphError("the padding leaves no output");
    if (extent > kMaxTensorElements) throw GraphError("the output is too large");
    out[2 + d] = static_cast<int64_t>(extent);
  }
  return {out};
}

double ConvTransposeFlops(const Graph& g, const Op& op) {
  const Shape& x = InputShape(g, op, 0);
  const Shape& w = InputShape(g, op, 1);
  return 2 * Numel(x) * static_cast<double>(w[1] * w[2] * w[3]);
}

std::vector<Shape> PoolShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 1, 1);
  ExpectFloat(g, op, 0);
  ExpectRank(g, op, 0, 4);
  const Shape& x = InputShape(g, op, 0);
  auto [k_h, k_w] = Pair(op, "kernel");
  auto [s_h, s_w] = Pair(op, "stride");
  auto [p_h, p_w] = OptionalPair(op, "padding", 0);
  auto [d_h, d_w] = OptionalPair(op, "dilation", 1);
  if (d_h != 1 || d_w != 1) {
    if (op.type != op_types::kMaxPool2d) throw GraphError("only max pooling takes a dilation");
  }
  const bool ceil = op.attrs.Has("ceil_mode") && op.attrs.GetInt("ceil_mode") != 0;
  if (k_h == 0 || k_w == 0) throw GraphError("kernel must be positive");
  // PyTorch refuses padding beyond half the (dilated) window: it would hold only padding.
  if (2 * p_h > d_h * (k_h - 1) + 1 || 2 * p_w > d_w * (k_w - 1) + 1) {
    throw GraphError(
        fmt::format("padding [{}, {}] exceeds half the kernel [{}, {}]", p_h, p_w, k_h, k_w));
  }
  return {{x[0], x[1], WindowExtent(x[2], k_h, s_h, p_h, p_h, d_h, ceil),
           WindowExtent(x[3], k_w, s_w, p_w, p_w, d_w, ceil)}};
}

double PoolFlops(const Graph& g, const Op& op) {
  auto [k_h, k_w] = Pair(op, "kernel");
  return OutputNumelOf(g, op) * static_cast<double>(k_h * k_w);
}

std::vector<Shape> GlobalPoolShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 1, 1);
  ExpectFloat(g, op, 0);
  ExpectRank(g, op, 0, 4);
  const Shape& x = InputShape(g, op, 0);
  return {{x[0], x[1], 1, 1}};
}

std::vector<Shape> LinearShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 2, 3);
  ExpectFloat(g, op, 0);
  ExpectRank(g, op, 1, 2);
  const Shape& x = InputShape(g, op, 0);
  const Shape& w = InputShape(g, op, 1);
  if (x.size() < 2) {
    throw GraphError(fmt::format("input '{}' must have rank 2 or more, has shape {}",
                                 g.tensor(op.inputs[0]).name, ToString(x)));
  }
  if (w[1] != x.back()) {
    throw GraphError(fmt::format("weight '{}' {} expects {} input features, input '{}' has {}",
                                 g.tensor(op.inputs[1]).name, ToString(w), w[1],
                                 g.tensor(op.inputs[0]).name, x.back()));
  }
  ExpectBias(g, op, 2, w[0]);
  Shape out = x;
  out.back() = w[0];
  return {out};
}

double LinearFlops(const Graph& g, const Op& op) {
  const Shape& x = InputShape(g, op, 0);
  const Shape& w = InputShape(g, op, 1);
  double rows = Numel(x) / static_cast<double>(x.back());
  return 2 * rows * static_cast<double>(w[0] * w[1]) +
         (op.inputs.size() == 3 ? rows * static_cast<double>(w[0]) : 0);
}

std::vector<Shape> MatMulShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 2, 2);
  ExpectFloat(g, op, 0);
  ExpectFloat(g, op, 1);
  Shape a = InputShape(g, op, 0);
  Shape b = InputShape(g, op, 1);
  if (a.empty() || b.empty()) throw GraphError("matmul of a scalar");
  const bool vector_a = a.size() == 1, vector_b = b.size() == 1;
  if (vector_a) a.insert(a.begin(), 1);
  if (vector_b) b.push_back(1);
  const int64_t k = a.back();
  if (b[b.size() - 2] != k) {
    throw GraphError(fmt::format("inputs '{}' {} and '{}' {} do not multiply",
                                 g.tensor(op.inputs[0]).name, ToString(InputShape(g, op, 0)),
                                 g.tensor(op.inputs[1]).name, ToString(InputShape(g, op, 1))));
  }
  Shape out = BroadcastShapes(Shape(a.begin(), a.end() - 2), Shape(b.begin(), b.end() - 2));
  if (!vector_a) out.push_back(a[a.size() - 2]);
  if (!vector_b) out.push_back(b.back());
  return {out};
}

double MatMulFlops(const Graph& g, const Op& op) {
  const Shape& a = InputShape(g, op, 0);
  return 2 * OutputNumelOf(g, op) * static_cast<double>(a.back());
}

// An einsum equation's terms: the letters of every input and of the output ('.' stands for the
// axes an ellipsis covers), with the output implicit (numpy's rule) when "->" is absent.
struct Einsum {
  std::vector<std::string> inputs;
  std::string output;
};

// The term with its "..." as one '.' (copied by hand: std::string::replace trips a false GCC 12
// -Wrestrict here).
std::string CollapseEllipsis(const std::string& term) {
  std::string out;
  for (size_t i = 0; i < term.size(); ++i) {
    out += term[i];
    if (term.compare(i, 3, "...") == 0) i += 2;
  }
  return out;
}

Einsum ParseEinsum(std::string equation, size_t operands) {
  std::erase(equation, ' ');
  Einsum e;
  const size_t arrow = equation.find("->");
  const std::string lhs = equation.substr(0, arrow);
  size_t begin = 0;
  while (true) {
    const size_t comma = lhs.find(',', begin);
    e.inputs.push_back(
        CollapseEllipsis(lhs.substr(begin, comma == std::string::npos ? comma : comma - begin)));
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  if (e.inputs.size() != operands) {
    throw GraphError(fmt::format("equation '{}' has {} operands, the op {}", equation,
                                 e.inputs.size(), operands));
  }
  if (arrow != std::string::npos) {
    e.output = CollapseEllipsis(equation.substr(arrow + 2));
  } else {
    std::map<char, int> count;
    bool ellipsis = false;
    for (const std::string& term : e.inputs) {
      for (char c : term) c == '.' ? void(ellipsis = true) : void(++count[c]);
    }
    std::vector<char> letters;
    if (ellipsis) letters.push_back('.');
    for (const auto& [c, n] : count) {
      if (n == 1) letters.push_back(c);
    }
    e.output.assign(letters.begin(), letters.end());
  }
  for (const std::string& term : e.inputs) {
    if (std::count(term.begin(), term.end(), '.') > 1) {
      throw GraphError(fmt::format("equation '{}' has two ellipses in a term", equation));
    }
  }
  for (char c : equation) {
    if (c != '.' && c != ',' && c != '-' && c != '>' &&
        !std::isalpha(static_cast<unsigned char>(c))) {
      throw GraphError(fmt::format("equation '{}' has the character '{}'", equation, c));
    }
  }
  return e;
}

// The extent of every letter, and the broadcast extents of the ellipsis.
struct EinsumSizes {
  std::map<char, int64_t> letters;
  Shape ellipsis;
};

EinsumSizes EinsumExtents(const Graph& g, const Op& op, const Einsum& e) {
  EinsumSizes sizes;
  for (size_t i = 0; i < e.inputs.size(); ++i) {
    const Shape& x = InputShape(g, op, i);
    const std::string& term = e.inputs[i];
    const bool dots = term.find('.') != std::string::npos;
    const size_t letters = term.size() - (dots ? 1 : 0);
    if (letters > x.size() || (!dots && letters != x.size())) {
      throw GraphError(
          fmt::format("term '{}' does not fit input {} of shape {}", term, i, ToString(x)));
    }
    const size_t covered = x.size() - letters;
    size_t axis = 0;
    for (char c : term) {
      if (c == '.') {
        sizes.ellipsis = BroadcastShapes(
            sizes.ellipsis, Shape(x.begin() + static_cast<std::ptrdiff_t>(axis),
                                  x.begin() + static_cast<std::ptrdiff_t>(axis + covered)));
        axis += covered;
        continue;
      }
      const int64_t extent = x[axis++];
      auto [it, fresh] = sizes.letters.emplace(c, extent);
      if (!fresh && it->second != extent) {
        if (it->second == 1) {
          it->second = extent;
        } else if (extent != 1) {
          throw GraphError(
              fmt::format("'{}' is {} in one term and {} in another", c, it->second, extent));
        }
      }
    }
  }
  return sizes;
}

std::vector<Shape> EinsumShapes(const Graph& g, const Op& op) {
  if (op.inputs.empty()) throw GraphError("expects at least one input");
  for (size_t i = 0; i < op.inputs.size(); ++i) ExpectFloat(g, op, i);
  const Einsum e = ParseEinsum(op.attrs.GetString("equation"), op.inputs.size());
  const EinsumSizes sizes = EinsumExtents(g, op, e);
  Shape out;
  for (char c : e.output) {
    if (c == '.') {
      out.insert(out.end(), sizes.ellipsis.begin(), sizes.ellipsis.end());
      continue;
    }
    auto it = sizes.letters.find(c);
    if (it == sizes.letters.end()) {
      throw GraphError(fmt::format("output letter '{}' is in no input", c));
    }
    out.push_back(it->second);
  }
  return {out};
}

double EinsumFlops(const Graph& g, const Op& op) {
  const Einsum e = ParseEinsum(op.attrs.GetString("equation"), op.inputs.size());
  const EinsumSizes sizes = EinsumExtents(g, op, e);
  double product = Numel(sizes.ellipsis);
  for (const auto& [c, extent] : sizes.letters) product *= static_cast<double>(extent);
  return 2 * product * static_cast<double>(std::max<size_t>(1, op.inputs.size() - 1));
}

std::vector<Shape> LayerNormShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 2, 3);
  ExpectFloat(g, op, 0);
  const Shape& x = InputShape(g, op, 0);
  const size_t axis = Axis(op.attrs.Has("axis") ? op.attrs.GetInt("axis") : -1, x.size());
  const Shape normalized(x.begin() + static_cast<std::ptrdiff_t>(axis), x.end());
  for (size_t i = 1; i < op.inputs.size(); ++i) {
    if (InputShape(g, op, i) != normalized) {
      throw GraphError(fmt::format("'{}' {} must have the normalised shape {}",
                                   g.tensor(op.inputs[i]).name, ToString(InputShape(g, op, i)),
                                   ToString(normalized)));
    }
  }
  ExpectPositiveEpsilon(op);
  return {x};
}

// x [N,C,...] with per-channel vectors as the other inputs.
std::vector<Shape> ChannelNormShapes(const Graph& g, const Op& op, size_t min_inputs,
                                     size_t max_inputs) {
  ExpectInputs(op, min_inputs, max_inputs);
  ExpectFloat(g, op, 0);
  const Shape& x = InputShape(g, op, 0);
  if (x.size() < 2) throw GraphError("normalisation needs an input of rank 2 or more");
  for (size_t i = 1; i < op.inputs.size(); ++i) {
    if (InputShape(g, op, i) != Shape{x[1]}) {
      throw GraphError(fmt::format("'{}' must have shape [{}]", g.tensor(op.inputs[i]).name, x[1]));
    }
  }
  ExpectPositiveEpsilon(op);
  return {x};
}

std::vector<Shape> BatchNormShapes(const Graph& g, const Op& op) {
  if (op.inputs.size() == 4) throw GraphError("expects 3 or 5 inputs, has 4");
  return ChannelNormShapes(g, op, 3, 5);
}

std::vector<Shape> InstanceNormShapes(const Graph& g, const Op& op) {
  return ChannelNormShapes(g, op, 3, 3);
}

std::vector<Shape> GroupNormShapes(const Graph& g, const Op& op) {
  std::vector<Shape> out = ChannelNormShapes(g, op, 3, 3);
  const int64_t groups = op.attrs.GetInt("groups");
  if (groups < 1 || out[0][1] % groups != 0) {
    throw GraphError(fmt::format("{} groups do not divide {} channels", groups, out[0][1]));
  }
  return out;
}

std::vector<Shape> LrnShapes(const Graph& g, const Op& op) {
  std::vector<Shape> out = ChannelNormShapes(g, op, 1, 1);
  if (op.attrs.GetInt("size") < 1) throw GraphError("size must be positive");
  op.attrs.GetFloat("alpha");
  op.attrs.GetFloat("beta");
  op.attrs.GetFloat("bias");
  return out;
}

void ExpectShape(const Graph& g, const Op& op, size_t index, const Shape& shape) {
  if (InputShape(g, op, index) != shape) {
    throw GraphError(fmt::format("'{}' {} must have shape {}", g.tensor(op.inputs[index]).name,
                                 ToString(InputShape(g, op, index)), ToString(shape)));
  }
}

// Recurrent cells: x [B,I], states [B,H] (`states` of them), w_ih [gates*H, I], w_hh [gates*H, H],
// then biases as `bias_shapes` allows.
void ExpectCell(const Graph& g, const Op& op, size_t states, int64_t gates) {
  for (size_t i = 0; i < op.inputs.size(); ++i) ExpectFloat(g, op, i);
  for (size_t i = 0; i < 3 + states; ++i) ExpectRank(g, op, i, 2);
  const Shape& x = InputShape(g, op, 0);
  const int64_t batch = x[0], hidden = InputShape(g, op, 1)[1];
  for (size_t s = 0; s < states; ++s) ExpectShape(g, op, 1 + s, {batch, hidden});
  ExpectShape(g, op, 1 + states, {gates * hidden, x[1]});
  ExpectShape(g, op, 2 + states, {gates * hidden, hidden});
  for (size_t i = 3 + states; i < op.inputs.size(); ++i) ExpectShape(g, op, i, {gates * hidden});
}

std::vector<Shape> LstmCellShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 5, 6);
  ExpectCell(g, op, 2, 4);
  const Shape h = InputShape(g, op, 1);
  return {h, h};
}

// GRU and Elman cells: no bias, or both biases (input and recurrent).
std::vector<Shape> GruCellShapes(const Graph& g, const Op& op) {
  if (op.inputs.size() != 4 && op.inputs.size() != 6) {
    throw GraphError(fmt::format("expects 4 or 6 inputs, has {}", op.inputs.size()));
  }
  ExpectCell(g, op, 1, op.type == op_types::kGruCell ? 3 : 1);
  if (op.type == op_types::kRnnCell && op.attrs.Has("activation")) {
    const std::string& a = op.attrs.GetString("activation");
    if (a != "tanh" && a != "relu") throw GraphError(fmt::format("unknown activation '{}'", a));
  }
  return {InputShape(g, op, 1)};
}

// Matmuls into `gates` x H outputs, then about `elementwise` operations per hidden unit.
FlopRule CellFlops(double gates, double elementwise) {
  return [gates, elementwise](const Graph& g, const Op& op) {
    const Shape& x = InputShape(g, op, 0);
    const Shape& h = InputShape(g, op, 1);
    const double batch = static_cast<double>(x[0]), hidden = static_cast<double>(h[1]);
    return 2 * batch * gates * hidden * static_cast<double>(x[1] + h[1]) +
           elementwise * batch * hidden;
  };
}

std::vector<Shape> NllLossShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 2, 3);
  ExpectFloat(g, op, 0);
  ExpectInt(g, op, 1);
  const Shape& x = InputShape(g, op, 0);
  const Shape& target = InputShape(g, op, 1);
  if (x.size() < 2) throw GraphError("log-probabilities must be [N, C, ...]");
  Shape expected = x;
  expected.erase(expected.begin() + 1);
  if (target != expected) {
    throw GraphError(
        fmt::format("target {} must have shape {}", ToString(target), ToString(expected)));
  }
  if (op.inputs.size() == 3) {
    ExpectFloat(g, op, 2);
    ExpectShape(g, op, 2, {x[1]});
  }
  const std::string& reduction = op.attrs.GetString("reduction");
  if (reduction == "none") return {target};
  if (reduction != "sum" && reduction != "mean") {
    throw GraphError(fmt::format("unknown reduction '{}'", reduction));
  }
  return {Shape{}};
}

}  // namespace

void AddNnTypes(OpTable& table) {
  namespace t = op_types;
  table[t::kConv2d] = {ConvShapes, ConvFlops};
  table[t::kConvTranspose2d] = {ConvTransposeShapes, ConvTransposeFlops};
  table[t::kMaxPool2d] = {PoolShapes, PoolFlops};
  table[t::kAvgPool2d] = {PoolShapes, PoolFlops};
  table[t::kGlobalAvgPool2d] = {GlobalPoolShapes, PerInput(1)};
  table[t::kGlobalMaxPool2d] = {GlobalPoolShapes, PerInput(1)};
  table[t::kLinear] = {LinearShapes, LinearFlops};
  table[t::kMatMul] = {MatMulShapes, MatMulFlops};
  table[t::kEinsum] = {EinsumShapes, EinsumFlops};
  // mean, variance, normalise, scale and shift.
  table[t::kLayerNorm] = {LayerNormShapes, PerOutput(8)};
  table[t::kBatchNorm] = {BatchNormShapes, PerOutput(8)};
  table[t::kInstanceNorm] = {InstanceNormShapes, PerOutput(8)};
  table[t::kGroupNorm] = {GroupNormShapes, PerOutput(8)};
  // A windowed sum of squares across channels, then a power.
  table[t::kLrn] = {LrnShapes, [](const Graph& g, const Op& op) {
                      return OutputNumelOf(g, op) *
                             static_cast<double>(op.attrs.GetInt("size") + 4);
                    }};
  table[t::kLstmCell] = {LstmCellShapes, CellFlops(4, 10)};
  table[t::kGruCell] = {GruCellShapes, CellFlops(3, 10)};
  table[t::kRnnCell] = {GruCellShapes, CellFlops(1, 2)};
  table[t::kNllLoss] = {NllLossShapes, PerInput(1)};
}

}  // namespace placer::graph
