#include "graph/autocast.h"

#include <algorithm>
#include <optional>
#include <string>

#include "graph/ops.h"

namespace placer::graph {

bool RunsInLowPrecision(const Graph& graph, const Op& op) {
  namespace t = op_types;
  const Op& forward =
      op.phase == Phase::kBackward && op.forward_op != kNoOp ? graph.op(op.forward_op) : op;
  if (forward.phase != Phase::kForward) return false;  // an update: elementwise
  for (const char* type : {t::kConv2d, t::kConvTranspose2d, t::kLinear, t::kMatMul, t::kEinsum,
                           t::kLstmCell, t::kGruCell, t::kRnnCell}) {
    if (forward.type == type) return true;
  }
  return false;
}

namespace {

// Forward ops that keep their input's dtype: pointwise arithmetic, and moving values around.
bool KeepsDtype(const Op& op) {
  namespace t = op_types;
  // AddN: a forward sum of 16-bit values (a tensor-parallel all-reduce's, which NCCL runs in the
  // values' dtype) stays 16-bit.
  for (const char* type : {t::kReshape, t::kTranspose, t::kSlice, t::kConcat, t::kSplit,
                           t::kIdentity, t::kDropout, t::kAddN}) {
    if (op.type == type) return true;
  }
  return IsElementwise(op.type);
}

}  // namespace

std::vector<bool> AutocastHalfWidth(const Graph& graph) {
  std::vector<bool> half(static_cast<size_t>(graph.num_tensors()), false);
  for (OpId id : graph.TopologicalOrder()) {
    const Op& op = graph.op(id);
    if (op.phase != Phase::kForward) continue;
    bool low = RunsInLowPrecision(graph, op);
    if (!low && KeepsDtype(op)) {
      bool any_float = false, all_half = true;
      for (TensorId in : op.inputs) {
        if (graph.tensor(in).dtype != DType::kFloat32) continue;
        any_float = true;
        all_half = all_half && half[static_cast<size_t>(in)];
      }
      low = any_float && all_half;
    }
    if (!low) continue;
    for (TensorId out : op.outputs) {
      const Tensor& tensor = graph.tensor(out);
      half[static_cast<size_t>(out)] =
          tensor.dtype == DType::kFloat32 && tensor.kind != TensorKind::kParameter;
    }
  }
  // A gradient has its value's dtype (autograd's rule): "<value>.grad@<op>", their sum
  // "<value>.grad", a parameter's all-reduced pieces "<parameter>.grad...".
  for (TensorId t = 0; t < graph.num_tensors(); ++t) {
    const Tensor& tensor = graph.tensor(t);
    if (tensor.kind != TensorKind::kGradient) continue;
    const size_t at = tensor.name.find(".grad");
    if (at == std::string::npos) continue;
    const std::optional<TensorId> of = graph.FindTensor(tensor.name.substr(0, at));
    half[static_cast<size_t>(t)] = of && half[static_cast<size_t>(*of)];
  }
  return half;
}

}  // namespace placer::graph
