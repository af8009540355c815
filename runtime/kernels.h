// LibTorch kernels of the IR's forward op types (internal to the runtime). Each family of op types
// (graph/ops.h) has its kernels in its own file: kernels_elementwise.cc, kernels_tensor.cc,
// kernels_reduce.cc and kernels_nn.cc.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <string>
#include <vector>

#include "graph/ir.h"

namespace placer::runtime {

// Runs forward op `op` on `inputs` (in the op's input order, all on `device`) and returns its
// outputs. Autograd records the computation when grad mode is on, which is how backward ops get
// their gradients. `device` is where ops without inputs (constants) create their output. `step`
// numbers the training step: random ops (Dropout) draw a new mask every step, the same one for a
// given op, seed and step on any device.
std::vector<at::Tensor> RunForwardKernel(const graph::Op& op, const std::vector<at::Tensor>& inputs,
                                         at::Device device, uint64_t step = 0);

// Whether op type `type` has a kernel.
bool HasKernel(const std::string& type);

}  // namespace placer::runtime
