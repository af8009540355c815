#include "graph/training_step.h"

#include <fmt/format.h>

#include <map>

#include "graph/ops.h"

namespace placer::graph {

OpId OwnerOf(const Graph& graph, TensorId parameter) {
  for (OpId consumer : graph.tensor(parameter).consumers) {
    if (graph.op(consumer).phase == Phase::kForward) return consumer;
  }
  throw GraphError(
      fmt::format("parameter '{}' is not used by any forward op", graph.tensor(parameter).name));
}

void AppendBackwardAndUpdate(Graph& graph, double learning_rate,
                             const std::function<std::vector<TensorId>(TensorId)>& tied_with) {
  if (learning_rate <= 0) throw GraphError("the learning rate must be positive");
  // Several losses (data-parallel replicas) are summed: each seeds its backward with 1.
  std::vector<bool> is_loss(static_cast<size_t>(graph.num_ops()), false);
  OpId loss = kNoOp;
  for (OpId id = 0; id < graph.num_ops(); ++id) {
    const Op& op = graph.op(id);
    if (op.phase != Phase::kForward) {
      throw GraphError(fmt::format("op '{}' is already a {} op: the graph has a training step",
                                   op.name, ToString(op.phase)));
    }
    if (op.type == op_types::kSoftmaxCrossEntropy) {
      is_loss[static_cast<size_t>(id)] = true;
      loss = id;
    }
  }
  if (loss == kNoOp) throw GraphError("the forward graph has no SoftmaxCrossEntropy loss");

  const std::vector<OpId> order = graph.TopologicalOrder();

  // A tensor carries a gradient when it is a parameter or depends on one.
  std::vector<bool> requires_grad(static_cast<size_t>(graph.num_tensors()), false);
  for (OpId id : order) {
    const Op& op = graph.op(id);
    bool any = false;
    for (TensorId in : op.inputs) {
      any = any || requires_grad[static_cast<size_t>(in)] ||
            graph.tensor(in).kind == TensorKind::kParameter;
    }
    for (TensorId out : op.outputs) requires_grad[static_cast<size_t>(out)] = any;
  }
  for (TensorId id : graph.Parameters()) requires_grad[static_cast<size_t>(id)] = true;

  // Gradient contributions, keyed by (tensor, consuming forward op).
  std::map<std::pair<TensorId, OpId>, std::vector<TensorId>> grads;

  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const OpId forward_id = *it;
    const Op forward = graph.op(forward_id);  // a copy: AddTensor/AddOp may reallocate

    Op backward;
    backward.name = forward.name + ".backward";
    backward.type = op_types::kBackward;
    backward.phase = Phase::kBackward;
    backward.forward_op = forward_id;
    std::vector<int64_t> grad_input_output;
    for (size_t k = 0; k < forward.outputs.size(); ++k) {
      TensorId out = forward.outputs[k];
      for (OpId consumer : graph.tensor(out).consumers) {
        auto found = grads.find({out, consumer});
        if (found == grads.end()) continue;
        for (TensorId grad : found->second) {
          backward.inputs.push_back(grad);
          grad_input_output.push_back(static_cast<int64_t>(k));
        }
      }
    }
    if (!is_loss[static_cast<size_t>(forward_id)] && backward.inputs.empty())
      continue;  // no path to the loss

    std::vector<int64_t> grad_of;
    for (size_t i = 0; i < forward.inputs.size(); ++i) {
      TensorId in = forward.inputs[i];
      if (!requires_grad[static_cast<size_t>(in)]) continue;
      auto& slot = grads[{in, forward_id}];
      std::string name = fmt::format("{}.grad@{}", graph.tensor(in).name, forward.name);
      if (!slot.empty()) name += fmt::format("#{}", slot.size());
      Tensor grad{.name = name,
                  .shape = graph.tensor(in).shape,
                  .dtype = DType::kFloat32,
                  .kind = TensorKind::kGradient};
      TensorId grad_id = graph.AddTensor(std::move(grad));
      slot.push_back(grad_id);
      backward.outputs.push_back(grad_id);
      grad_of.push_back(static_cast<int64_t>(i));
    }
    if (backward.outputs.empty()) continue;  // nothing upstream needs a gradient
    // The backward op also reads what its forward op saved: its inputs (labels included).
    for (TensorId in : forward.inputs) backward.inputs.push_back(in);
    backward.attrs.Set("grad_input_output", grad_input_output);
    backward.attrs.Set("grad_of", grad_of);
    graph.AddOp(std::move(backward));
  }

  // A parameter's gradient contributions (one per consuming op; an unrolled RNN has one per time
  // step).
  const std::vector<TensorId> parameters = graph.Parameters();
  auto contributions = [&](TensorId param) {
    std::vector<TensorId> found_grads;
    for (OpId consumer : graph.tensor(param).consumers) {
      auto found = grads.find({param, consumer});
      if (found == grads.end()) continue;
      found_grads.insert(found_grads.end(), found->second.begin(), found->second.end());
    }
    if (found_grads.empty()) {
      throw GraphError(fmt::format("parameter '{}' does not reach the loss '{}'",
                                   graph.tensor(param).name, graph.op(loss).name));
    }
    return found_grads;
  };
  // Tied parameters (replicas) exchange one gradient each, summed where it was computed (an
  // AddN on the parameter's device), not every contribution: that is what an all-reduce sends.
  std::map<TensorId, TensorId> summed;
  if (tied_with) {
    for (TensorId param : parameters) {
      std::vector<TensorId> own = contributions(param);
      if (own.size() == 1) {
        summed[param] = own[0];
        continue;
      }
      const Tensor& p = graph.tensor(param);
      TensorId sum = graph.AddTensor(Tensor{.name = p.name + ".grad",
                                            .shape = p.shape,
                                            .dtype = DType::kFloat32,
                                            .kind = TensorKind::kGradient});
      Op add{.name = p.name + ".grad_sum",
             .type = op_types::kAddN,
             .phase = Phase::kBackward,
             .inputs = own,
             .outputs = {sum},
             .forward_op = OwnerOf(graph, param)};
      graph.AddOp(std::move(add));
      summed[param] = sum;
    }
  }

  for (TensorId param : parameters) {
    Op update;
    update.name = graph.tensor(param).name + ".update";
    update.type = op_types::kSgdUpdate;
    update.phase = Phase::kUpdate;
    update.forward_op = OwnerOf(graph, param);
    update.inputs.push_back(param);
    if (tied_with) {
      update.inputs.push_back(summed.at(param));
      for (TensorId tied : tied_with(param)) update.inputs.push_back(summed.at(tied));
    } else {
      for (TensorId grad : contributions(param)) update.inputs.push_back(grad);
    }
    update.attrs.Set("lr", learning_rate);
    graph.AddOp(std::move(update));
  }
}

}  // namespace placer::graph
