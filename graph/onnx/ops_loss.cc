// ONNX's loss ops: NegativeLogLikelihoodLoss, and SoftmaxCrossEntropyLoss as a log-softmax over
// the class axis followed by it. Forward ops like any other (the training step's own loss is the
// one the loader attaches to the first output).
#include <fmt/format.h>

#include "graph/onnx/loader.h"
#include "graph/ops.h"

namespace placer::graph::onnx {
namespace {

namespace t = op_types;

Attributes NllAttributes(Loader& l) {
  const std::string reduction = l.AttrString("reduction", "mean");
  if (reduction != "none" && reduction != "sum" && reduction != "mean") {
    throw GraphError(fmt::format("unknown reduction '{}'", reduction));
  }
  Attributes attrs;
  attrs.Set("reduction", reduction);
  if (l.HasAttr("ignore_index")) attrs.Set("ignore_index", l.AttrInt("ignore_index", 0));
  return attrs;
}

void ConvertNll(Loader& l, TensorId log_probabilities) {
  std::vector<TensorId> inputs = {log_probabilities, l.Tensor(1, Role::kConstant)};
  if (l.HasInput(2)) inputs.push_back(l.Tensor(2));
  if (l.graph().tensor(inputs[1]).dtype != DType::kInt64) {
    throw GraphError(fmt::format("target '{}' must be integers", l.InputName(1)));
  }
  l.EmitOutput(t::kNllLoss, inputs, NllAttributes(l));
}

void ConvertSoftmaxCrossEntropy(Loader& l) {
  Attributes axis;
  axis.Set("axis", int64_t{1});
  const std::string name = l.OutputLive(1) ? l.OutputName(1) : l.NodeBase() + "/log_prob";
  const TensorId log_prob =
      l.Emit1(l.NodeBase() + "/log_softmax", t::kLogSoftmax, {l.Tensor(0)}, std::move(axis), name);
  if (l.OutputLive(1)) l.Define(1, log_prob);
  ConvertNll(l, log_prob);
}

}  // namespace

void AddLossOps(OpTable& table) {
  table["NegativeLogLikelihoodLoss"] = {nullptr, [](Loader& l) { ConvertNll(l, l.Tensor(0)); }};
  table["SoftmaxCrossEntropyLoss"] = {nullptr, ConvertSoftmaxCrossEntropy};
}

}  // namespace placer::graph::onnx
