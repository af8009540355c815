// Which values of a training step automatic mixed precision (torch.autocast with bf16 or fp16)
// keeps in 16 bits: what matmul- and convolution-class ops write, what pointwise and layout ops
// compute from such values alone, and the gradients of those values (a gradient has its value's
// dtype); never a parameter or a parameter's gradient (the fp32 master weights and what their
// optimizer reads), nor what autocast runs in fp32 (normalisation, softmax, losses, reductions).
#pragma once

#include <vector>

#include "graph/ir.h"

namespace placer::graph {

// Whether autocast runs `op` in 16 bits: a Conv2d, ConvTranspose2d, Linear, MatMul, Einsum or
// recurrent cell, or the backward op of one.
bool RunsInLowPrecision(const Graph& graph, const Op& op);

// Per tensor of `graph`: whether autocast stores it in 16 bits (see above).
std::vector<bool> AutocastHalfWidth(const Graph& graph);

}  // namespace placer::graph
