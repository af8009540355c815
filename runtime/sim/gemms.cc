#include "runtime/sim/gemms.h"

#include <algorithm>
#include <cmath>

#include "graph/ops.h"

namespace placer::sim {

std::vector<Gemm> GemmsOf(const graph::Graph& graph, const graph::Op& op) {
  namespace t = graph::op_types;
  if (op.phase == graph::Phase::kBackward && op.forward_op != graph::kNoOp) {
    std::vector<Gemm> gemms;
    for (const Gemm& f : GemmsOf(graph, graph.op(op.forward_op))) {
      gemms.push_back({.batch = f.batch, .m = f.m, .n = f.k, .k = f.n});  // the input's gradient
      gemms.push_back({.batch = f.batch, .m = f.n, .n = f.k, .k = f.m});  // the weight's
    }
    return gemms;
  }
  if (op.phase != graph::Phase::kForward || op.inputs.size() < 2 || op.outputs.empty()) return {};
  auto shape = [&](graph::TensorId id) -> const graph::Shape& { return graph.tensor(id).shape; };
  auto numel = [](const graph::Shape& s) { return static_cast<double>(graph::NumElements(s)); };
  const graph::Shape& x = shape(op.inputs[0]);
  const graph::Shape& w = shape(op.inputs[1]);
  const graph::Shape& out = shape(op.outputs[0]);
  auto d = [](int64_t v) { return static_cast<double>(v); };
  if (op.type == t::kLinear && !x.empty() && w.size() == 2) {
    return {{.m = numel(x) / d(x.back()), .n = d(w[0]), .k = d(w[1])}};
  }
  if (op.type == t::kMatMul && !x.empty() && !w.empty()) {
    const double m = x.size() == 1 ? 1 : d(x[x.size() - 2]);
    const double n = w.size() == 1 ? 1 : d(w.back());
    return {{.batch = numel(out) / (m * n), .m = m, .n = n, .k = d(x.back())}};
  }
  if ((op.type == t::kConv2d || op.type == t::kConvTranspose2d) && x.size() == 4 && w.size() == 4 &&
      out.size() == 4 && w[1] > 0) {
    const double kernel_area = d(w[2]) * d(w[3]);
    const double groups = op.type == t::kConv2d ? d(x[1]) / d(w[1]) : d(out[1]) / d(w[1]);
    return {{.batch = groups,
             .m = d(out[0]) * d(out[2]) * d(out[3]),
             .n = d(out[1]) / groups,
             .k = d(x[1]) / groups * kernel_area}};
  }
  const int gates = op.type == t::kLstmCell  ? 4
                    : op.type == t::kGruCell ? 3
                    : op.type == t::kRnnCell ? 1
                                             : 0;
  if (gates > 0 && x.size() == 2 && w.size() == 2) {  // inputs: x [batch, in], h [batch, hidden]
    return {{.m = d(x[0]), .n = gates * d(w[1]), .k = d(x[1]) + d(w[1])}};
  }
  return {};
}

double GemmShapeEfficiency(const Gemm& gemm, int sms, double inner_fill_steps) {
  constexpr double kTile = 128;
  constexpr double kMinSliceDepth = 256;
  const double tiles = gemm.batch * std::ceil(gemm.m / kTile) * std::ceil(gemm.n / kTile);
  const double slices =
      std::max(1.0, std::min(std::floor(sms / tiles), std::floor(gemm.k / kMinSliceDepth)));
  const double waves = std::ceil(tiles * slices / sms);
  const double depth = gemm.k / slices;
  return tiles * slices / (waves * sms) * depth / (depth + inner_fill_steps);
}

}  // namespace placer::sim
