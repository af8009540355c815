// Op types the IR knows: their shape rule and their cost. The executor in runtime/ gives each a
// LibTorch kernel; this file only describes them, so it stays torch-free.
#pragma once

#include <string>
#include <vector>

#include "graph/ir.h"

namespace placer::graph {

// Op types. Forward: Conv2d, Relu, AvgPool2d, Flatten, Linear, Add, SoftmaxCrossEntropy.
// Backward ("Backward") computes the gradients of one forward op; update ("SgdUpdate") applies
// one parameter's gradient.
namespace op_types {
inline constexpr char kConv2d[] = "Conv2d";
inline constexpr char kRelu[] = "Relu";
inline constexpr char kAvgPool2d[] = "AvgPool2d";
inline constexpr char kFlatten[] = "Flatten";
inline constexpr char kLinear[] = "Linear";
inline constexpr char kAdd[] = "Add";
inline constexpr char kSoftmaxCrossEntropy[] = "SoftmaxCrossEntropy";
inline constexpr char kBackward[] = "Backward";
inline constexpr char kSgdUpdate[] = "SgdUpdate";
}  // namespace op_types

bool IsKnownOpType(const std::string& type);
std::vector<std::string> KnownOpTypes();

// Output shapes of `op` given its input tensors' shapes in `graph`. Throws GraphError naming the
// op when inputs are missing or their shapes do not fit the op type.
std::vector<Shape> InferOutputShapes(const Graph& graph, const Op& op);

// Floating-point operations of one execution of `op` (a multiply-add counts 2). Backward ops
// cost twice their forward op, the usual estimate for conv and matmul layers.
double OpFlops(const Graph& graph, const Op& op);

// Bytes the op writes: the sum of its outputs (an update writes its parameter).
int64_t OpOutputBytes(const Graph& graph, const Op& op);

}  // namespace placer::graph
