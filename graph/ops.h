// Op types the IR knows: their shape rule, output element type and cost. The executor in runtime/
// gives each a LibTorch kernel; this file only describes them, so it stays torch-free. The rules
// live by family in ops_elementwise.cc, ops_tensor.cc, ops_reduce.cc, ops_nn.cc and
// ops_training.cc.
#pragma once

#include <string>
#include <vector>

#include "graph/ir.h"

namespace placer::graph {

// Op types. Each forward type lists its inputs, attributes and outputs; a LibTorch kernel in
// runtime/ implements exactly that. Backward ("Backward") computes the gradients of one forward
// op; update ("SgdUpdate") applies one parameter's gradient. Pairs ("stride", "padding",
// "kernel") are [height, width]. Inputs are float32 unless said otherwise; "any" types take
// float32 or int64 (bool is int64 0/1) and give their input's type. Only float32 tensors carry
// gradients.
namespace op_types {
// x [N,C,H,W], weight [O,C/groups,kh,kw], bias [O]?; stride, padding; groups? (1); dilation?
// ([1,1]).
inline constexpr char kConv2d[] = "Conv2d";
// x [N,C,H,W], weight [C,O/groups,kh,kw], bias [O]?; stride, padding, output_padding? ([0,0]),
// dilation? ([1,1]), groups? (1): the gradient of Conv2d with respect to its input.
inline constexpr char kConvTranspose2d[] = "ConvTranspose2d";
// Unary elementwise, one float input, output of its shape.
inline constexpr char kRelu[] = "Relu";
inline constexpr char kSigmoid[] = "Sigmoid";
inline constexpr char kTanh[] = "Tanh";
inline constexpr char kGelu[] = "Gelu";  // exact (erf) GELU; "approximate" = "tanh"? the tanh one
inline constexpr char kErf[] = "Erf";
inline constexpr char kSqrt[] = "Sqrt";
inline constexpr char kExp[] = "Exp";
inline constexpr char kLog[] = "Log";
inline constexpr char kReciprocal[] = "Reciprocal";
inline constexpr char kSin[] = "Sin";
inline constexpr char kCos[] = "Cos";
inline constexpr char kTan[] = "Tan";
inline constexpr char kAsin[] = "Asin";
inline constexpr char kAcos[] = "Acos";
inline constexpr char kAtan[] = "Atan";
inline constexpr char kSinh[] = "Sinh";
inline constexpr char kCosh[] = "Cosh";
inline constexpr char kAsinh[] = "Asinh";
inline constexpr char kAcosh[] = "Acosh";
inline constexpr char kAtanh[] = "Atanh";
inline constexpr char kFloor[] = "Floor";  // floor, ceil and round: zero gradient
inline constexpr char kCeil[] = "Ceil";
inline constexpr char kRound[] = "Round";  // half to even
inline constexpr char kSoftplus[] = "Softplus";
inline constexpr char kSoftsign[] = "Softsign";
inline constexpr char kMish[] = "Mish";
inline constexpr char kHardSwish[] = "HardSwish";  // x * relu6(x + 3) / 6
// Unary with attributes (floats, ONNX's defaults when absent).
inline constexpr char kHardSigmoid[] = "HardSigmoid";  // max(0, min(1, alpha x + beta)); 0.2, 0.5
inline constexpr char kLeakyRelu[] = "LeakyRelu";      // alpha (0.01)
inline constexpr char kElu[] = "Elu";                  // alpha (1)
inline constexpr char kSelu[] = "Selu";                // alpha, gamma (ONNX's constants)
inline constexpr char kCelu[] = "Celu";                // alpha (1)
inline constexpr char kThresholdedRelu[] = "ThresholdedRelu";  // x where x > alpha (1), else 0
inline constexpr char kShrink[] = "Shrink";                    // bias (0), lambd (0.5)
// Any type, output of its shape and type.
inline constexpr char kNeg[] = "Neg";
inline constexpr char kAbs[] = "Abs";
inline constexpr char kSign[] = "Sign";
inline constexpr char kIdentity[] = "Identity";  // also inference-mode Dropout
// x (any) clamped to "min"? and "max"? (floats; absent: unbounded).
inline constexpr char kClip[] = "Clip";
// x (any) -> "to" ("float32" or "int64"); float to int truncates toward zero.
inline constexpr char kCast[] = "Cast";
// float -> int64 0/1: NaN; infinities ("detect_negative"?, "detect_positive"? (1)).
inline constexpr char kIsNaN[] = "IsNaN";
inline constexpr char kIsInf[] = "IsInf";
// Training-mode dropout: x -> x * mask / (1 - "ratio"), the mask Bernoulli(1 - ratio) drawn from
// a generator seeded with "seed" (int) and the step, so masks repeat across runs and placements.
inline constexpr char kDropout[] = "Dropout";
// x [N,C,H,W]; kernel, stride, padding? ([0,0], symmetric), dilation? ([1,1]), ceil_mode? (0: the
// output extent rounds down; 1: up, as PyTorch's ceil_mode); padding counts as -inf.
inline constexpr char kMaxPool2d[] = "MaxPool2d";
// As MaxPool2d without dilation; count_include_pad? (1, PyTorch's default).
inline constexpr char kAvgPool2d[] = "AvgPool2d";
// x [N,C,H,W] -> [N,C,1,1].
inline constexpr char kGlobalAvgPool2d[] = "GlobalAvgPool2d";
inline constexpr char kGlobalMaxPool2d[] = "GlobalMaxPool2d";
// x [N,...] -> [N, prod(...)].
inline constexpr char kFlatten[] = "Flatten";
// x [..., K], weight [O,K], bias [O]? -> [..., O] (x W^T + b, over the last dimension).
inline constexpr char kLinear[] = "Linear";
// a [..., M, K], b [..., K, N] -> at::matmul semantics (batch dimensions broadcast; rank-1
// operands as in numpy).
inline constexpr char kMatMul[] = "MatMul";
// inputs (>= 1) -> at::einsum("equation", inputs).
inline constexpr char kEinsum[] = "Einsum";
// Binary elementwise with numpy broadcasting; both inputs of one type (any), output of it.
inline constexpr char kAdd[] = "Add";
inline constexpr char kSub[] = "Sub";
inline constexpr char kMul[] = "Mul";
inline constexpr char kDiv[] = "Div";  // integers: truncated toward zero
inline constexpr char kMax[] = "Max";
inline constexpr char kMin[] = "Min";
inline constexpr char kMod[] = "Mod";  // "fmod"? (0): the divisor's sign; 1: the dividend's
// base (any) ** exponent (any): output of the base's type.
inline constexpr char kPow[] = "Pow";
// x, slope (broadcast to x): x where x >= 0, else slope * x.
inline constexpr char kPRelu[] = "PRelu";
// Comparisons and logic: both inputs of one type, output int64 0/1.
inline constexpr char kEqual[] = "Equal";
inline constexpr char kLess[] = "Less";
inline constexpr char kLessOrEqual[] = "LessOrEqual";
inline constexpr char kGreater[] = "Greater";
inline constexpr char kGreaterOrEqual[] = "GreaterOrEqual";
inline constexpr char kAnd[] = "And";
inline constexpr char kOr[] = "Or";
inline constexpr char kXor[] = "Xor";
inline constexpr char kNot[] = "Not";  // one int input
// condition (int64), x, y (one type, any) broadcast -> x where condition else y.
inline constexpr char kWhere[] = "Where";
// No inputs; attrs "shape" (ints), "values" (string of little-endian elements, as many as the
// shape has) and "dtype"? ("float32" (default) or "int64"). Made on the device the op runs on.
inline constexpr char kConstant[] = "Constant";
// x (any) -> "shape" (ints, fully resolved: no -1 or 0 entries), same element count.
inline constexpr char kReshape[] = "Reshape";
// x (any) -> permuted by "perm" (ints).
inline constexpr char kTranspose[] = "Transpose";
// inputs (>= 1, any, one type) of equal rank, equal except along "axis" (int, may be negative).
inline constexpr char kConcat[] = "Concat";
// x (any) -> one output per entry of "sizes" (ints summing to x's extent along "axis").
inline constexpr char kSplit[] = "Split";
// x (any) -> x along "axis" from "start" by "step"? (1, may be negative) up to "end" (exclusive);
// start and end resolved as ONNX Slice resolves them.
inline constexpr char kSlice[] = "Slice";
// x (any) broadcast to "shape" (ints; numpy rules).
inline constexpr char kExpand[] = "Expand";
// x (any) repeated "repeats" (ints, one per axis) times along each axis.
inline constexpr char kTile[] = "Tile";
// x (any) padded by "pads" (ints: begins of every axis, then ends; non-negative) with "mode"
// ("constant" with "value"? (0), "reflect" or "edge").
inline constexpr char kPad[] = "Pad";
// x (any) -> the upper ("upper" 1) or lower triangle of its last two axes from diagonal "k".
inline constexpr char kTrilu[] = "Trilu";
// x (any) -> cumulative sum along "axis"; "exclusive"? (0), "reverse"? (0).
inline constexpr char kCumSum[] = "CumSum";
// x [N, C*b*b, H, W] <-> [N, C, H*b, W*b]: "blocksize"; DepthToSpace "mode" ("DCR" or "CRD").
inline constexpr char kDepthToSpace[] = "DepthToSpace";
inline constexpr char kSpaceToDepth[] = "SpaceToDepth";
// x (float) resized to "shape" (ints, the output's) as ONNX Resize does, axis by axis: "scales"
// (floats, output over input extent, as the file gave them), "mode" ("nearest" with
// "nearest_mode"? ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"), "linear" or
// "cubic" with "cubic_coeff_a"? (-0.75) and "exclude_outside"? (0)), "coordinate" ("half_pixel",
// "pytorch_half_pixel", "align_corners" or "asymmetric").
inline constexpr char kResize[] = "Resize";
// x -> softmax (log-softmax) along "axis"; hardmax: 1.0 at the first maximum, else 0.
inline constexpr char kSoftmax[] = "Softmax";
inline constexpr char kLogSoftmax[] = "LogSoftmax";
inline constexpr char kHardmax[] = "Hardmax";
// Reductions of x over "axes" (ints, non-empty), keeping them with extent 1 when "keepdims" (int,
// 1). Sum, max, min and prod take any type.
inline constexpr char kReduceMean[] = "ReduceMean";
inline constexpr char kReduceSum[] = "ReduceSum";
inline constexpr char kReduceMax[] = "ReduceMax";
inline constexpr char kReduceMin[] = "ReduceMin";
inline constexpr char kReduceProd[] = "ReduceProd";
inline constexpr char kReduceL1[] = "ReduceL1";
inline constexpr char kReduceL2[] = "ReduceL2";
inline constexpr char kReduceLogSum[] = "ReduceLogSum";
inline constexpr char kReduceLogSumExp[] = "ReduceLogSumExp";
inline constexpr char kReduceSumSquare[] = "ReduceSumSquare";
// x (any) -> int64 index of the largest (smallest) element along "axis"; "keepdims"? (1),
// "select_last_index"? (0).
inline constexpr char kArgMax[] = "ArgMax";
inline constexpr char kArgMin[] = "ArgMin";
// x (any) -> the "k" largest ("largest" 1) or smallest along "axis", sorted: values, int64 indices.
inline constexpr char kTopK[] = "TopK";
// data (any), int64 indices -> data along "axis"? (0) at the indices (negative ones count from the
// end): data.shape[:axis] + indices.shape + data.shape[axis+1:]. With a float table and axis 0 it
// is an embedding lookup. Gradients flow to data only.
inline constexpr char kGather[] = "Gather";
// data (any), int64 indices of data's rank -> data along "axis" at the indices (indices' shape).
inline constexpr char kGatherElements[] = "GatherElements";
// data (any), int64 indices [..., k] -> ONNX GatherND with "batch_dims"? (0).
inline constexpr char kGatherND[] = "GatherND";
// data (any), int64 indices, updates -> data with updates written at the indices along "axis";
// "reduction"? ("none", "add" or "mul").
inline constexpr char kScatterElements[] = "ScatterElements";
// data (any), int64 indices [..., k], updates -> ONNX ScatterND; "reduction"? as above.
inline constexpr char kScatterND[] = "ScatterND";
// x [..., D...], scale [D...], bias [D...]? -> normalised over the dimensions from "axis" (int,
// default -1) on; "epsilon" (float, 1e-5).
inline constexpr char kLayerNorm[] = "LayerNorm";
// x [N,C,...], scale [C], bias [C] -> normalised with the minibatch's statistics (training mode);
// "epsilon" (float, 1e-5). With two more inputs, mean [C] and variance [C], it normalises with
// those instead (inference mode).
inline constexpr char kBatchNorm[] = "BatchNorm";
// x [N,C,...], scale [C], bias [C] -> normalised per sample and channel; "epsilon".
inline constexpr char kInstanceNorm[] = "InstanceNorm";
// x [N,C,...], scale [C], bias [C] -> normalised per sample over "groups" channel groups, then
// scaled per channel; "epsilon".
inline constexpr char kGroupNorm[] = "GroupNorm";
// x [N,C,...] -> local response normalisation across channels: "size", "alpha", "beta", "bias".
inline constexpr char kLrn[] = "Lrn";
// One LSTM time step. x [B,I], h [B,H], c [B,H], w_ih [4H,I], w_hh [4H,H], bias [4H]? -> h' [B,H],
// c' [B,H]. Gate order i, f, g, o (PyTorch's).
inline constexpr char kLstmCell[] = "LstmCell";
// One GRU time step. x [B,I], h [B,H], w_ih [3H,I], w_hh [3H,H], b_ih [3H]?, b_hh [3H]? -> h'
// [B,H]. Gate order r, z, n (PyTorch's); "linear_before_reset"? (1, PyTorch's): the reset gate
// multiplies (W_hn h + b_hn); 0: it multiplies h before W_hn (ONNX's default).
inline constexpr char kGruCell[] = "GruCell";
// One Elman RNN time step. x [B,I], h [B,H], w_ih [H,I], w_hh [H,H], bias [H]? -> h' [B,H];
// "activation"? ("tanh" or "relu").
inline constexpr char kRnnCell[] = "RnnCell";
// Negative log-likelihood of log-probabilities [N,C,d...] at int64 targets [N,d...]: per element,
// or "reduction" ("none", "sum", "mean"), with "ignore_index"? and class weights [C]? (third input)
// as ONNX's NegativeLogLikelihoodLoss. A forward op like any other: it does not start the
// backward pass.
inline constexpr char kNllLoss[] = "NllLoss";
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
// Pointwise types (unary and binary arithmetic, comparisons, logic, Where, Clip, Cast): an output
// element depends only on the inputs' elements at its own broadcast index.
bool IsElementwise(const std::string& type);

// Output shapes of `op` given its input tensors' shapes in `graph`. Throws GraphError naming the
// op when inputs are missing or their shapes or types do not fit the op type.
std::vector<Shape> InferOutputShapes(const Graph& graph, const Op& op);

// Output element types of `op` (one per output shape). Call after InferOutputShapes, which checks
// the inputs.
std::vector<DType> InferOutputDTypes(const Graph& graph, const Op& op);

// Both, for an op about to be added; an error reads "op '<name>' (<type>): <why>".
struct InferredOutputs {
  std::vector<Shape> shapes;
  std::vector<DType> dtypes;
};
InferredOutputs InferOutputs(const Graph& graph, const Op& op);

// Floating-point operations of one execution of `op` (a multiply-add counts 2). Backward ops
// cost twice their forward op, the usual estimate for conv and matmul layers.
double OpFlops(const Graph& graph, const Op& op);

// Bytes the op writes: the sum of its outputs (an update writes its parameter).
int64_t OpOutputBytes(const Graph& graph, const Op& op);

}  // namespace placer::graph
