// How one op of the plan runs on its device's worker: a kernel, autograd for a backward op, the
// SGD update, or a gradient bucket's part in an allreduce across processes.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>

#include "graph/ops.h"
#include "runtime/executor_engine.h"

namespace placer::runtime {

using graph::Op;
using graph::OpId;
using graph::Phase;
using graph::TensorId;

void Executor::Impl::RunOp(OpId id, int device) {
  const Op& op = graph.op(id);
  switch (plan.bucket_role[static_cast<size_t>(id)]) {
    case BucketRole::kContribute:
      WaitFor(op.inputs[0], device);
      // The communication thread reads it on another stream: the GPU's work must be done.
      if (plan.IsCuda(device)) {
        for (const auto& transport : transports->all()) transport->Synchronize(device);
      }
      all_reduce->Contribute(
          plan.bucket_of[static_cast<size_t>(id)],
          values[static_cast<size_t>(op.inputs[0])][static_cast<size_t>(device)]);
      Consumed(op.inputs[0], device);
      return;
    case BucketRole::kCollect:
      PublishOutput(op.outputs[0], device,
                    all_reduce->Result(plan.bucket_of[static_cast<size_t>(id)])
                        .to(plan.torch_device[static_cast<size_t>(device)]));
      return;
    case BucketRole::kNone:
    case BucketRole::kSkipped:
      break;
  }
  std::vector<at::Tensor> inputs;
  inputs.reserve(op.inputs.size());
  for (TensorId t : op.inputs) {
    WaitFor(t, device);
    inputs.push_back(values[static_cast<size_t>(t)][static_cast<size_t>(device)]);
  }
  if (op.phase == Phase::kForward) {
    RunForward(id, device, inputs);
  } else if (op.phase == Phase::kBackward && op.type != graph::op_types::kBackward) {
    // Gradient plumbing (sums, the ring all-reduce's chunks): kernels on gradients, no autograd.
    at::NoGradGuard no_grad;
    std::vector<at::Tensor> outputs = RunKernel(id, device, inputs);
    for (size_t k = 0; k < outputs.size(); ++k) PublishOutput(op.outputs[k], device, outputs[k]);
  } else if (op.phase == Phase::kBackward) {
    RunBackward(id, device, inputs);
  } else {
    at::NoGradGuard no_grad;
    at::Tensor grad = inputs[1];
    for (size_t i = 2; i < inputs.size(); ++i) grad = grad + inputs[i];
    inputs[0].sub_(grad, op.attrs.GetFloat("lr"));
  }
  for (TensorId t : plan.step->inputs(id)) Consumed(t, device);
}

std::vector<at::Tensor> Executor::Impl::RunKernel(OpId id, int device,
                                                  const std::vector<at::Tensor>& inputs) {
  return (*plan.kernel_of[static_cast<size_t>(id)])(
      graph.op(id), inputs, KernelContext{plan.torch_device[static_cast<size_t>(device)], Step()});
}

void Executor::Impl::RunForward(OpId id, int device, std::vector<at::Tensor>& inputs) {
  const Op& op = graph.op(id);
  const bool differentiate =
      !options.forward_only && plan.backward_of[static_cast<size_t>(id)] != graph::kNoOp;
  std::vector<at::Tensor> outputs;
  if (differentiate) {
    at::AutoGradMode grad_mode(true);
    SavedForBackward& state = saved[static_cast<size_t>(id)];
    const auto& flags = plan.needs_grad[static_cast<size_t>(id)];
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (flags[i]) {
        inputs[i] = inputs[i].detach().requires_grad_(true);
        state.leaves.push_back(inputs[i]);
      }
    }
    outputs = RunKernel(id, device, inputs);
    state.outputs = outputs;
  } else {
    at::NoGradGuard no_grad;
    outputs = RunKernel(id, device, inputs);
  }
  for (size_t k = 0; k < outputs.size(); ++k) {
    TensorId t = op.outputs[k];
    at::Tensor value = outputs[k].detach();
    if (op.type == graph::op_types::kSoftmaxCrossEntropy) losses[static_cast<size_t>(id)] = value;
    PublishOutput(t, device, std::move(value));
  }
}

void Executor::Impl::RunBackward(OpId id, int device, const std::vector<at::Tensor>& inputs) {
  const Op& op = graph.op(id);
  const Op& forward = graph.op(op.forward_op);
  SavedForBackward state = std::move(saved[static_cast<size_t>(op.forward_op)]);
  saved[static_cast<size_t>(op.forward_op)] = {};
  const auto& grad_for = op.attrs.GetInts("grad_input_output");
  std::vector<at::Tensor> grad_outputs(forward.outputs.size());
  for (size_t j = 0; j < grad_for.size(); ++j) {
    at::Tensor& sum = grad_outputs[static_cast<size_t>(grad_for[j])];
    sum = sum.defined() ? sum + inputs[j] : inputs[j];
  }
  std::vector<at::Tensor> roots, root_grads;
  for (size_t k = 0; k < forward.outputs.size(); ++k) {
    if (forward.type == graph::op_types::kSoftmaxCrossEntropy) {
      grad_outputs[k] = at::ones_like(state.outputs[k]);
    }
    // An output that does not depend differentiably on the inputs (Hardmax, an integer
    // result) passes no gradient back.
    if (grad_outputs[k].defined() && state.outputs[k].requires_grad()) {
      roots.push_back(state.outputs[k]);
      root_grads.push_back(grad_outputs[k]);
    }
  }
  std::vector<at::Tensor> grads(state.leaves.size());
  if (!roots.empty()) {
    grads = torch::autograd::grad(roots, state.leaves, root_grads, /*retain_graph=*/false,
                                  /*create_graph=*/false, /*allow_unused=*/true);
  }
  for (size_t i = 0; i < op.outputs.size(); ++i) {
    PublishOutput(op.outputs[i], device,
                  grads[i].defined() ? grads[i] : at::zeros_like(state.leaves[i]));
  }
}

}  // namespace placer::runtime
