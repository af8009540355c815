// LibTorch kernels of the IR's forward op types (internal to the runtime).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <vector>

#include "graph/ir.h"

namespace placer::runtime {

// Runs forward op `op` on `inputs` (in the op's input order, all on `device`) and returns its
// outputs. Autograd records the computation when grad mode is on, which is how backward ops get
// their gradients. `device` is where ops without inputs (constants) create their output.
std::vector<at::Tensor> RunForwardKernel(const graph::Op& op, const std::vector<at::Tensor>& inputs,
                                         at::Device device);

}  // namespace placer::runtime
