// Op types the IR knows: their shape rule and their cost. The executor in runtime/ gives each a
// LibTorch kernel; this file only describes them, so it stays torch-free.
#pragma once

#include <string>
#include <vector>

#include "graph/ir.h"

namespace placer::graph {

// Op types. Each forward type lists its inputs, attributes and outputs; a LibTorch kernel in
// runtime/kernels.cc implements exactly that. Backward ("Backward") computes the gradients of one
// forward op; update ("SgdUpdate") applies one parameter's gradient. Pairs ("stride", "padding",
// "kernel") are [height, width].
namespace op_types {
// x [N,C,H,W], weight [O,C/groups,kh,kw], bias [O]?; stride, padding; groups? (1).
inline constexpr char kConv2d[] = "Conv2d";
// Unary elementwise, one float input, output of its shape.
inline constexpr char kRelu[] = "Relu";
inline constexpr char kSigmoid[] = "Sigmoid";
inline constexpr char kTanh[] = "Tanh";
inline constexpr char kGelu[] = "Gelu";  // exact (erf) GELU
inline constexpr char kErf[] = "Erf";
inline constexpr char kSqrt[] = "Sqrt";
inline constexpr char kExp[] = "Exp";
inline constexpr char kNeg[] = "Neg";
inline constexpr char kIdentity[] = "Identity";  // also inference-mode Dropout
// x [N,C,H,W]; kernel, stride, padding? ([0,0]); count_include_pad? (1, PyTorch's default).
inline constexpr char kAvgPool2d[] = "AvgPool2d";
// x [N,C,H,W]; kernel, stride, padding? ([0,0]); padding counts as -inf.
inline constexpr char kMaxPool2d[] = "MaxPool2d";
// x [N,C,H,W] -> [N,C,1,1].
inline constexpr char kGlobalAvgPool2d[] = "GlobalAvgPool2d";
// x [N,...] -> [N, prod(...)].
inline constexpr char kFlatten[] = "Flatten";
// x [..., K], weight [O,K], bias [O]? -> [..., O] (x W^T + b, over the last dimension).
inline constexpr char kLinear[] = "Linear";
// a [..., M, K], b [..., K, N] -> at::matmul semantics (batch dimensions broadcast; rank-1
// operands as in numpy).
inline constexpr char kMatMul[] = "MatMul";
// Binary elementwise with numpy broadcasting; float inputs.
inline constexpr char kAdd[] = "Add";
inline constexpr char kSub[] = "Sub";
inline constexpr char kMul[] = "Mul";
inline constexpr char kDiv[] = "Div";
inline constexpr char kPow[] = "Pow";
// No inputs; attrs "shape" (ints) and "values" (string of little-endian float32 bytes, as many as
// the shape has elements). The tensor is made on the device the op runs on.
inline constexpr char kConstant[] = "Constant";
// x -> "shape" (ints, fully resolved: no -1 or 0 entries), same element count.
inline constexpr char kReshape[] = "Reshape";
// x -> permuted by "perm" (ints).
inline constexpr char kTranspose[] = "Transpose";
// inputs (>= 1) of equal rank, equal except along "axis" (int, may be negative).
inline constexpr char kConcat[] = "Concat";
// x -> one output per entry of "sizes" (ints summing to x's extent along "axis").
inline constexpr char kSplit[] = "Split";
// x -> x along "axis" from "start" to "end" (exclusive) by "step"? (1); clamped as in numpy.
inline constexpr char kSlice[] = "Slice";
// x -> softmax along "axis".
inline constexpr char kSoftmax[] = "Softmax";
// x -> mean over "axes" (ints), keeping them with extent 1 when "keepdims" (int, 1).
inline constexpr char kReduceMean[] = "ReduceMean";
// x [..., D...], scale [D...], bias [D...]? -> normalised over the dimensions from "axis" (int,
// default -1) on; "epsilon" (float, 1e-5).
inline constexpr char kLayerNorm[] = "LayerNorm";
// x [N,C,...], scale [C], bias [C] -> normalised with the minibatch's statistics (training mode);
// "epsilon" (float, 1e-5).
inline constexpr char kBatchNorm[] = "BatchNorm";
// table [V, D...] (float), indices (int64, any shape) -> indices.shape + [D...]: embedding lookup
// (ONNX Gather with axis 0). Gradients flow to the table only.
inline constexpr char kGather[] = "Gather";
// One LSTM time step. x [B,I], h [B,H], c [B,H], w_ih [4H,I], w_hh [4H,H], bias [4H]? -> h' [B,H],
// c' [B,H]. Gate order i, f, g, o (PyTorch's).
inline constexpr char kLstmCell[] = "LstmCell";
// Softmax cross-entropy of logits [B,C] against int64 labels [B], summed and divided by
// "normalizer" (int): the loss that starts the backward pass.
inline constexpr char kSoftmaxCrossEntropy[] = "SoftmaxCrossEntropy";
// inputs (>= 1) of one shape -> their sum. In the backward phase it sums a parameter's gradient
// contributions on the parameter's device before they travel (data-parallel replicas).
inline constexpr char kAddN[] = "AddN";
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
