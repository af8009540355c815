// Every op type the IR declares, run by the executor: the kernel's output has the shape the IR's
// shape rule predicts, and the training step through the executor (local autograd per op,
// gradients passed as tensors between devices) equals one autograd pass over the whole network,
// on one device and under random placements over two workers. That reference computes every
// forward op on its own, from torch::nn::functional or the op's formula, never with the kernels
// under test.
#include "runtime/kernels.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/nn/functional.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <set>

#include "graph/models.h"
#include "graph/ops.h"
#include "graph/training_step.h"
#include "runtime/executor.h"
#include "tests/support.h"
#include "tests/torch_support.h"

namespace placer::runtime {
namespace {

using graph::Attributes;
using graph::DType;
using graph::Initializer;
using graph::Shape;
using graph::TensorId;
using graph::TensorKind;
namespace ops = graph::op_types;
using placer::test_support::CpuWorkers;

constexpr double kLearningRate = 0.1;

// Adds an op with any number of outputs, named "<name>:<k>", shapes from the IR's rule.
std::vector<TensorId> ApplyMulti(graph::Graph& g, const std::string& name, const std::string& type,
                                 std::vector<TensorId> inputs, Attributes attrs = {}) {
  graph::Op op{.name = name, .type = type, .inputs = std::move(inputs), .attrs = std::move(attrs)};
  std::vector<Shape> shapes = graph::InferOutputShapes(g, op);
  std::vector<DType> dtypes = graph::InferOutputDTypes(g, op);
  for (size_t k = 0; k < shapes.size(); ++k) {
    op.outputs.push_back(g.AddTensor(
        {.name = name + ":" + std::to_string(k), .shape = shapes[k], .dtype = dtypes[k]}));
  }
  g.AddOp(op);
  return op.outputs;
}

Attributes Attrs(std::initializer_list<std::pair<const char*, graph::AttrValue>> values) {
  Attributes attrs;
  for (const auto& [name, value] : values) attrs.Set(name, value);
  return attrs;
}

TensorId Weight(graph::ModelBuilder& b, const std::string& name, Shape shape) {
  return b.Parameter(name, std::move(shape), {Initializer::Kind::kNormal, 0.3});
}

TensorId ConstantScalar(graph::ModelBuilder& b, const std::string& name, float value) {
  std::string bytes(sizeof(float), '\0');
  std::memcpy(bytes.data(), &value, sizeof(float));
  return b.Apply(name, ops::kConstant, {},
                 Attrs({{"shape", std::vector<int64_t>{}}, {"values", bytes}}));
}

TensorId IntConstant(graph::ModelBuilder& b, const std::string& name, const Shape& shape,
                     const std::vector<int64_t>& values) {
  std::string bytes(values.size() * sizeof(int64_t), '\0');
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return b.Apply(name, ops::kConstant, {},
                 Attrs({{"shape", shape}, {"values", bytes}, {"dtype", std::string("int64")}}));
}

// Flattens every piece to [batch, -1] and concatenates them for one loss head.
TensorId Join(graph::ModelBuilder& b, graph::Graph& g, const std::vector<TensorId>& pieces) {
  std::vector<TensorId> flat;
  for (TensorId piece : pieces) {
    const Shape shape = g.tensor(piece).shape;
    flat.push_back(shape.size() == 2
                       ? piece
                       : b.Apply(g.tensor(piece).name + ".flat", ops::kFlatten, {piece}));
  }
  return b.Apply("joined", ops::kConcat, flat, Attrs({{"axis", int64_t{1}}}));
}

TensorId Loss(graph::ModelBuilder& b, graph::Graph& g, TensorId features, int64_t classes) {
  const int64_t batch = g.tensor(features).shape.at(0);
  TensorId flat = g.tensor(features).shape.size() == 2
                      ? features
                      : b.Apply("flatten", ops::kFlatten, {features});
  TensorId w = Weight(b, "head.weight", {classes, g.tensor(flat).shape[1]});
  TensorId logits = b.Apply("head", ops::kLinear, {flat, w});
  TensorId labels = b.Input("labels", {batch}, DType::kInt64, TensorKind::kLabel);
  return b.SoftmaxCrossEntropy("loss", logits, labels);
}

// Convolutions and pooling as in Inception-V3: grouped conv, batch norm, padded max and average
// pooling, global pooling, concatenation of branches.
graph::Graph ConvNet() {
  graph::Graph g;
  graph::ModelBuilder b(g);
  TensorId x = b.Input("x", {4, 4, 9, 9});
  TensorId w = Weight(b, "conv.weight", {6, 2, 3, 3});
  TensorId conv = b.Apply("conv", ops::kConv2d, {x, w},
                          Attrs({{"stride", std::vector<int64_t>{1, 1}},
                                 {"padding", std::vector<int64_t>{1, 1}},
                                 {"groups", int64_t{2}}}));
  TensorId scale = b.Parameter("bn.scale", {6}, {Initializer::Kind::kOnes});
  TensorId shift = b.Parameter("bn.bias", {6}, {});
  TensorId bn = b.Apply("bn", ops::kBatchNorm, {conv, scale, shift});
  TensorId act = b.Relu("relu", bn);
  auto pool = [](int64_t pad) {
    return Attrs({{"kernel", std::vector<int64_t>{3, 3}},
                  {"stride", std::vector<int64_t>{2, 2}},
                  {"padding", std::vector<int64_t>{pad, pad}}});
  };
  TensorId max_pool = b.Apply("maxpool", ops::kMaxPool2d, {act}, pool(1));
  Attributes avg = pool(1);
  avg.Set("count_include_pad", int64_t{0});
  TensorId avg_pool = b.Apply("avgpool", ops::kAvgPool2d, {act}, avg);
  TensorId cat =
      b.Apply("concat", ops::kConcat, {max_pool, avg_pool}, Attrs({{"axis", int64_t{1}}}));
  TensorId global = b.Apply("gap", ops::kGlobalAvgPool2d, {cat});
  Loss(b, g, global, 3);
  graph::AppendBackwardAndUpdate(g, kLearningRate);
  g.Validate();
  return g;
}

// A transformer-style block: embedding lookup, layer norm, rank-3 linear, heads by reshape and
// transpose, scaled dot-product attention, GELU, and the elementwise ops of a decomposed norm.
graph::Graph AttentionNet() {
  graph::Graph g;
  graph::ModelBuilder b(g);
  const int64_t batch = 2, seq = 5, dim = 8, heads = 2;
  TensorId tokens = b.Input("tokens", {batch, seq}, DType::kInt64);
  TensorId table = Weight(b, "embedding", {11, dim});
  TensorId position = Weight(b, "position", {seq, dim});
  TensorId emb = b.Apply("embed", ops::kGather, {table, tokens});
  TensorId sum = b.Apply("add_position", ops::kAdd, {emb, position});
  TensorId gamma = b.Parameter("ln.scale", {dim}, {Initializer::Kind::kOnes});
  TensorId beta = b.Parameter("ln.bias", {dim}, {});
  TensorId ln = b.Apply("ln", ops::kLayerNorm, {sum, gamma, beta}, Attrs({{"axis", int64_t{-1}}}));
  TensorId qkv_w = Weight(b, "qkv.weight", {3 * dim, dim});
  TensorId qkv = b.Apply("qkv", ops::kLinear, {ln, qkv_w});
  std::vector<TensorId> parts =
      ApplyMulti(g, "split", ops::kSplit, {qkv},
                 Attrs({{"axis", int64_t{-1}}, {"sizes", std::vector<int64_t>{dim, dim, dim}}}));
  auto heads_of = [&](TensorId t, const std::string& name, std::vector<int64_t> perm) {
    TensorId r = b.Apply(name + ".reshape", ops::kReshape, {t},
                         Attrs({{"shape", std::vector<int64_t>{batch, seq, heads, dim / heads}}}));
    return b.Apply(name + ".transpose", ops::kTranspose, {r}, Attrs({{"perm", perm}}));
  };
  TensorId q = heads_of(parts[0], "q", {0, 2, 1, 3});
  TensorId k = heads_of(parts[1], "k", {0, 2, 3, 1});
  TensorId v = heads_of(parts[2], "v", {0, 2, 1, 3});
  TensorId scores = b.Apply("scores", ops::kMatMul, {q, k});
  TensorId scaled = b.Apply("scale", ops::kDiv, {scores, ConstantScalar(b, "sqrt_d", 2.0f)});
  TensorId attn = b.Apply("softmax", ops::kSoftmax, {scaled}, Attrs({{"axis", int64_t{-1}}}));
  TensorId context = b.Apply("context", ops::kMatMul, {attn, v});
  TensorId merged = b.Apply("merge", ops::kReshape,
                            {b.Apply("merge.transpose", ops::kTranspose, {context},
                                     Attrs({{"perm", std::vector<int64_t>{0, 2, 1, 3}}}))},
                            Attrs({{"shape", std::vector<int64_t>{batch, seq, dim}}}));
  TensorId gelu = b.Apply("gelu", ops::kGelu, {merged});
  // The decomposed layer norm an ONNX export of older opsets contains.
  TensorId mean = b.Apply("mean", ops::kReduceMean, {gelu},
                          Attrs({{"axes", std::vector<int64_t>{-1}}, {"keepdims", int64_t{1}}}));
  TensorId centred = b.Apply("centre", ops::kSub, {gelu, mean});
  TensorId squared = b.Apply("square", ops::kPow, {centred, ConstantScalar(b, "two", 2.0f)});
  TensorId variance =
      b.Apply("variance", ops::kReduceMean, {squared}, Attrs({{"axes", std::vector<int64_t>{-1}}}));
  TensorId eps = b.Apply("add_eps", ops::kAdd, {variance, ConstantScalar(b, "eps", 1e-5f)});
  TensorId normed = b.Apply("normalise", ops::kDiv, {centred, b.Apply("sqrt", ops::kSqrt, {eps})});
  // Unary ops on a slice each, concatenated back.
  std::vector<TensorId> pieces;
  const std::vector<const char*> unary = {ops::kSigmoid, ops::kTanh, ops::kErf,
                                          ops::kExp,     ops::kNeg,  ops::kIdentity};
  for (size_t i = 0; i < unary.size(); ++i) {
    TensorId slice = b.Apply(fmt::format("slice{}", i), ops::kSlice, {normed},
                             Attrs({{"axis", int64_t{1}},
                                    {"start", static_cast<int64_t>(i % seq)},
                                    {"end", static_cast<int64_t>(i % seq + 1)}}));
    pieces.push_back(b.Apply(fmt::format("unary{}", i), unary[i], {slice}));
  }
  TensorId joined = b.Apply("join", ops::kConcat, pieces, Attrs({{"axis", int64_t{1}}}));
  TensorId gated = b.Apply("gate", ops::kMul, {joined, joined});
  Loss(b, g, gated, 4);
  graph::AppendBackwardAndUpdate(g, kLearningRate);
  g.Validate();
  return g;
}

// Three LSTM steps unrolled: a two-output op whose outputs feed different consumers.
graph::Graph LstmNet() {
  graph::Graph g;
  graph::ModelBuilder b(g);
  const int64_t batch = 3, in = 4, hidden = 5;
  TensorId w_ih = Weight(b, "lstm.w_ih", {4 * hidden, in});
  TensorId w_hh = Weight(b, "lstm.w_hh", {4 * hidden, hidden});
  TensorId bias = Weight(b, "lstm.bias", {4 * hidden});
  TensorId h = b.Input("h0", {batch, hidden});
  TensorId c = b.Input("c0", {batch, hidden});
  for (int t = 0; t < 3; ++t) {
    TensorId x = b.Input(fmt::format("x{}", t), {batch, in});
    auto out = ApplyMulti(g, fmt::format("lstm{}", t), ops::kLstmCell, {x, h, c, w_ih, w_hh, bias});
    h = out[0];
    c = out[1];
  }
  Loss(b, g, b.Apply("mix", ops::kAddN, {h, c, h}), 3);
  graph::AppendBackwardAndUpdate(g, kLearningRate);
  g.Validate();
  return g;
}

// Every elementwise op type on a [4, 6] activation that depends on a weight: unary functions (on
// inputs inside their domains), binary arithmetic, comparisons and logic feeding masks, Where,
// Clip, Cast and a seeded Dropout.
graph::Graph ElementwiseNet() {
  graph::Graph g;
  graph::ModelBuilder b(g);
  TensorId x = b.Input("x", {4, 6});
  TensorId h = b.Apply("h", ops::kMul, {x, Weight(b, "w", {4, 6})});
  TensorId positive =
      b.Apply("positive", ops::kAdd,
              {b.Apply("softplus_h", ops::kSoftplus, {h}), ConstantScalar(b, "c1", 1.5f)});
  TensorId unit = b.Apply("unit", ops::kMul,
                          {b.Apply("tanh_h", ops::kTanh, {h}), ConstantScalar(b, "c09", 0.9f)});
  std::vector<TensorId> pieces;
  auto unary = [&](const char* type, TensorId in, Attributes attrs = {}) {
    pieces.push_back(
        b.Apply(fmt::format("{}{}", type, pieces.size()), type, {in}, std::move(attrs)));
  };
  for (const char* type :
       {ops::kRelu,        ops::kSigmoid,   ops::kGelu,     ops::kErf,   ops::kExp,
        ops::kNeg,         ops::kIdentity,  ops::kAbs,      ops::kSign,  ops::kSin,
        ops::kCos,         ops::kAtan,      ops::kSinh,     ops::kAsinh, ops::kFloor,
        ops::kCeil,        ops::kRound,     ops::kSoftsign, ops::kMish,  ops::kHardSwish,
        ops::kHardSigmoid, ops::kLeakyRelu, ops::kElu,      ops::kSelu,  ops::kCelu}) {
    unary(type, h);
  }
  unary(ops::kGelu, h, Attrs({{"approximate", std::string("tanh")}}));
  unary(ops::kThresholdedRelu, h, Attrs({{"alpha", 0.1}}));
  unary(ops::kShrink, h, Attrs({{"bias", 0.1}, {"lambd", 0.2}}));
  unary(ops::kClip, h, Attrs({{"min", -0.2}, {"max", 0.3}}));
  unary(ops::kDropout, h, Attrs({{"ratio", 0.3}, {"seed", int64_t{7}}}));
  for (const char* type : {ops::kSqrt, ops::kLog, ops::kReciprocal, ops::kAcosh, ops::kCosh}) {
    unary(type, positive);
  }
  for (const char* type : {ops::kAsin, ops::kAcos, ops::kAtanh, ops::kTan}) unary(type, unit);
  auto binary = [&](const char* type, TensorId left, TensorId right, Attributes attrs = {}) {
    pieces.push_back(
        b.Apply(fmt::format("{}{}", type, pieces.size()), type, {left, right}, std::move(attrs)));
    return pieces.back();
  };
  binary(ops::kMax, h, x);
  binary(ops::kMin, h, x);
  binary(ops::kMod, h, ConstantScalar(b, "c07", 0.7f), Attrs({{"fmod", int64_t{1}}}));
  binary(ops::kPow, positive, ConstantScalar(b, "c15", 1.5f));
  binary(ops::kPRelu, h, Weight(b, "slope", {6}));
  binary(ops::kDiv, h, positive);
  binary(ops::kSub, h, x);
  // Masks: integer 0/1 tensors, combined, cast back to float and multiplied in.
  TensorId less = b.Apply("less", ops::kLess, {h, x});
  TensorId greater = b.Apply("greater", ops::kGreater, {h, x});
  TensorId mask = b.Apply(
      "mask", ops::kOr,
      {b.Apply("both", ops::kAnd, {less, b.Apply("le", ops::kLessOrEqual, {h, x})}),
       b.Apply("either", ops::kXor, {greater, b.Apply("ge", ops::kGreaterOrEqual, {x, h})})});
  mask = b.Apply("mask_eq", ops::kOr,
                 {b.Apply("not", ops::kNot, {mask}), b.Apply("eq", ops::kEqual, {h, h})});
  TensorId weights =
      b.Apply("mask_float", ops::kCast, {mask}, Attrs({{"to", std::string("float32")}}));
  binary(ops::kMul, h, weights);
  pieces.push_back(b.Apply("where", ops::kWhere, {less, h, x}));
  TensorId special =
      b.Apply("special", ops::kAdd,
              {b.Apply("isnan", ops::kIsNaN, {h}), b.Apply("isinf", ops::kIsInf, {h})});
  TensorId truncated = b.Apply("truncated", ops::kCast, {h}, Attrs({{"to", std::string("int64")}}));
  TensorId ints = b.Apply("ints", ops::kAdd, {special, truncated});
  binary(ops::kAdd, h,
         b.Apply("ints_float", ops::kCast, {ints}, Attrs({{"to", std::string("float32")}})));
  Loss(b, g, Join(b, g, pieces), 3);
  graph::AppendBackwardAndUpdate(g, kLearningRate);
  g.Validate();
  return g;
}

// Convolutions and pooling beyond ConvNet's (dilated, transposed, ceil mode), padding,
// normalisations, resizing and block rearrangements on a [2, 4, 6, 6] activation.
graph::Graph ImageNet() {
  graph::Graph g;
  graph::ModelBuilder b(g);
  TensorId x = b.Input("x", {2, 4, 6, 6});
  TensorId h = b.Apply("dilated", ops::kConv2d, {x, Weight(b, "dilated.weight", {4, 4, 3, 3})},
                       Attrs({{"stride", std::vector<int64_t>{1, 1}},
                              {"padding", std::vector<int64_t>{2, 2}},
                              {"dilation", std::vector<int64_t>{2, 2}}}));
  std::vector<TensorId> pieces;
  TensorId up = b.Apply("up", ops::kConvTranspose2d,
                        {h, Weight(b, "up.weight", {4, 3, 3, 3}), Weight(b, "up.bias", {3})},
                        Attrs({{"stride", std::vector<int64_t>{2, 2}},
                               {"padding", std::vector<int64_t>{1, 1}},
                               {"output_padding", std::vector<int64_t>{1, 1}}}));
  auto pool = [&](const char* name, const char* type, TensorId in, Attributes attrs) {
    pieces.push_back(b.Apply(name, type, {in}, std::move(attrs)));
  };
  pool("max_ceil", ops::kMaxPool2d, up,
       Attrs({{"kernel", std::vector<int64_t>{3, 3}},
              {"stride", std::vector<int64_t>{2, 2}},
              {"ceil_mode", int64_t{1}}}));
  pool("avg_ceil", ops::kAvgPool2d, up,
       Attrs({{"kernel", std::vector<int64_t>{3, 3}},
              {"stride", std::vector<int64_t>{2, 2}},
              {"padding", std::vector<int64_t>{1, 1}},
              {"ceil_mode", int64_t{1}},
              {"count_include_pad", int64_t{0}}}));
  pool("max_dilated", ops::kMaxPool2d, up,
       Attrs({{"kernel", std::vector<int64_t>{2, 2}},
              {"stride", std::vector<int64_t>{1, 1}},
              {"dilation", std::vector<int64_t>{2, 2}}}));
  pool("global_max", ops::kGlobalMaxPool2d, h, {});
  for (const char* mode : {"constant", "reflect", "edge"}) {
    pieces.push_back(b.Apply(fmt::format("pad_{}", mode), ops::kPad, {h},
                             Attrs({{"pads", std::vector<int64_t>{0, 0, 1, 2, 0, 0, 2, 1}},
                                    {"mode", std::string(mode)},
                                    {"value", 0.5}})));
  }
  auto channels = [&](const std::string& name) {
    return std::vector<TensorId>{b.Parameter(name + ".scale", {4}, {Initializer::Kind::kOnes}),
                                 Weight(b, name + ".bias", {4})};
  };
  auto norm = [&](const char* name, const char* type, Attributes attrs) {
    std::vector<TensorId> inputs = {h};
    for (TensorId t : channels(name)) inputs.push_back(t);
    pieces.push_back(b.Apply(name, type, inputs, std::move(attrs)));
  };
  norm("instance", ops::kInstanceNorm, Attrs({{"epsilon", 1e-5}}));
  norm("group", ops::kGroupNorm, Attrs({{"groups", int64_t{2}}, {"epsilon", 1e-5}}));
  std::vector<TensorId> inference = {h};
  for (TensorId t : channels("inference_bn")) inference.push_back(t);
  inference.push_back(b.Constant("running_mean", {4}, {0.1f, -0.2f, 0.3f, 0.0f}));
  inference.push_back(b.Constant("running_var", {4}, {1.0f, 0.5f, 2.0f, 1.5f}));
  pieces.push_back(b.Apply("inference_bn", ops::kBatchNorm, inference));
  pieces.push_back(
      b.Apply("lrn", ops::kLrn, {h},
              Attrs({{"size", int64_t{3}}, {"alpha", 1e-2}, {"beta", 0.75}, {"bias", 1.0}})));
  for (const char* mode : {"nearest", "linear", "cubic"}) {
    pieces.push_back(b.Apply(fmt::format("resize_{}", mode), ops::kResize, {h},
                             Attrs({{"shape", std::vector<int64_t>{2, 4, 9, 4}},
                                    {"scales", std::vector<double>{1, 1, 1.5, 4.0 / 6}},
                                    {"mode", std::string(mode)},
                                    {"coordinate", std::string("half_pixel")}})));
  }
  TensorId deep =
      b.Apply("space_to_depth", ops::kSpaceToDepth, {h}, Attrs({{"blocksize", int64_t{2}}}));
  pieces.push_back(b.Apply("depth_to_space", ops::kDepthToSpace, {deep},
                           Attrs({{"blocksize", int64_t{2}}, {"mode", std::string("CRD")}})));
  Loss(b, g, Join(b, g, pieces), 3);
  graph::AppendBackwardAndUpdate(g, kLearningRate);
  g.Validate();
  return g;
}

// Indexing, broadcasting, reductions and the ops that pick along an axis, on a [5, 3] activation.
graph::Graph IndexingNet() {
  graph::Graph g;
  graph::ModelBuilder b(g);
  TensorId x = b.Input("x", {5, 3});
  TensorId h = b.Apply("h", ops::kMul, {x, Weight(b, "w", {5, 3})});
  std::vector<TensorId> pieces;
  auto add = [&](const std::string& name, const char* type, std::vector<TensorId> in,
                 Attributes attrs = {}) {
    pieces.push_back(b.Apply(name, type, std::move(in), std::move(attrs)));
    return pieces.back();
  };
  add("gather", ops::kGather, {h, IntConstant(b, "gather_i", {2}, {2, -3})},
      Attrs({{"axis", int64_t{1}}}));
  add("gather_elements", ops::kGatherElements,
      {h, IntConstant(b, "ge_i", {5, 2}, {0, 1, 2, 0, 1, 2, 0, 1, 2, 0})},
      Attrs({{"axis", int64_t{1}}}));
  TensorId nd = b.Apply("gather_nd", ops::kGatherND,
                        {h, IntConstant(b, "gnd_i", {5, 2}, {0, 1, 4, 2, 2, 0, 1, 1, 3, 2})});
  add("gather_nd_column", ops::kReshape, {nd}, Attrs({{"shape", std::vector<int64_t>{5, 1}}}));
  add("scatter_elements", ops::kScatterElements,
      {h, IntConstant(b, "se_i", {5, 1}, {2, 0, 1, 1, 0}), Weight(b, "se_u", {5, 1})},
      Attrs({{"axis", int64_t{1}}, {"reduction", std::string("add")}}));
  add("scatter_nd", ops::kScatterND,
      {h, IntConstant(b, "snd_i", {2, 1}, {3, 0}), Weight(b, "snd_u", {2, 3})});
  add("expand", ops::kExpand,
      {b.Apply("row", ops::kSlice, {h},
               Attrs({{"axis", int64_t{0}}, {"start", int64_t{1}}, {"end", int64_t{2}}}))},
      Attrs({{"shape", std::vector<int64_t>{5, 3}}}));
  add("tile", ops::kTile, {h}, Attrs({{"repeats", std::vector<int64_t>{1, 2}}}));
  add("trilu", ops::kTrilu, {h}, Attrs({{"upper", int64_t{0}}, {"k", int64_t{1}}}));
  add("cumsum", ops::kCumSum, {h},
      Attrs({{"axis", int64_t{0}}, {"exclusive", int64_t{1}}, {"reverse", int64_t{1}}}));
  add("backwards", ops::kSlice, {h},
      Attrs({{"axis", int64_t{1}},
             {"start", int64_t{2}},
             {"end", int64_t{-1}},
             {"step", int64_t{-2}}}));
  TensorId positive = b.Apply("positive", ops::kAdd,
                              {b.Apply("sq", ops::kMul, {h, h}), ConstantScalar(b, "one", 1.0f)});
  for (const char* type :
       {ops::kReduceSum, ops::kReduceMean, ops::kReduceMax, ops::kReduceMin, ops::kReduceProd,
        ops::kReduceL1, ops::kReduceL2, ops::kReduceLogSumExp, ops::kReduceSumSquare}) {
    add(type, type, {h}, Attrs({{"axes", std::vector<int64_t>{1}}, {"keepdims", int64_t{1}}}));
  }
  add("log_sum", ops::kReduceLogSum, {positive},
      Attrs({{"axes", std::vector<int64_t>{1}}, {"keepdims", int64_t{1}}}));
  TensorId arg =
      b.Apply("arg_sum", ops::kAdd,
              {b.Apply("argmax", ops::kArgMax, {h}, Attrs({{"axis", int64_t{1}}})),
               b.Apply("argmin", ops::kArgMin, {h},
                       Attrs({{"axis", int64_t{1}}, {"select_last_index", int64_t{1}}}))});
  add("arg_scaled", ops::kMul,
      {h, b.Apply("arg_float", ops::kCast, {arg}, Attrs({{"to", std::string("float32")}}))});
  std::vector<TensorId> top =
      ApplyMulti(g, "topk", ops::kTopK, {h},
                 Attrs({{"k", int64_t{2}}, {"axis", int64_t{1}}, {"largest", int64_t{1}}}));
  pieces.push_back(top[0]);
  TensorId log_probs = add("log_softmax", ops::kLogSoftmax, {h}, Attrs({{"axis", int64_t{1}}}));
  add("hardmax", ops::kHardmax, {h}, Attrs({{"axis", int64_t{1}}}));
  TensorId nll = b.Apply(
      "nll", ops::kNllLoss,
      {log_probs, IntConstant(b, "targets", {5}, {0, 2, 1, 1, 0}), Weight(b, "class_weights", {3})},
      Attrs({{"reduction", std::string("none")}}));
  add("nll_column", ops::kReshape, {nll}, Attrs({{"shape", std::vector<int64_t>{5, 1}}}));
  add("einsum", ops::kEinsum, {h, Weight(b, "einsum.w", {3, 4})},
      Attrs({{"equation", std::string("ij,jk->ik")}}));
  Loss(b, g, Join(b, g, pieces), 3);
  graph::AppendBackwardAndUpdate(g, kLearningRate);
  g.Validate();
  return g;
}

// GRU cells of both reset conventions and Elman cells of both activations, with and without
// biases, unrolled over two steps.
graph::Graph RecurrentNet() {
  graph::Graph g;
  graph::ModelBuilder b(g);
  const int64_t batch = 3, in = 4, hidden = 5;
  std::vector<TensorId> finals;
  for (int variant = 0; variant < 4; ++variant) {
    const bool gru = variant < 2;
    const int64_t gates = gru ? 3 : 1;
    const std::string name = fmt::format("cell{}", variant);
    std::vector<TensorId> weights = {Weight(b, name + ".w_ih", {gates * hidden, in}),
                                     Weight(b, name + ".w_hh", {gates * hidden, hidden})};
    if (variant % 2 == 0) {
      weights.push_back(Weight(b, name + ".b_ih", {gates * hidden}));
      weights.push_back(Weight(b, name + ".b_hh", {gates * hidden}));
    }
    Attributes attrs = gru ? Attrs({{"linear_before_reset", int64_t{variant == 0 ? 0 : 1}}})
                           : Attrs({{"activation", std::string(variant == 2 ? "tanh" : "relu")}});
    TensorId h = b.Zeros(name + ".h0", {batch, hidden});
    for (int t = 0; t < 2; ++t) {
      std::vector<TensorId> inputs = {b.Input(fmt::format("{}.x{}", name, t), {batch, in}), h};
      inputs.insert(inputs.end(), weights.begin(), weights.end());
      h = b.Apply(fmt::format("{}.t{}", name, t), gru ? ops::kGruCell : ops::kRnnCell, inputs,
                  attrs);
    }
    finals.push_back(h);
  }
  Loss(b, g, Join(b, g, finals), 3);
  graph::AppendBackwardAndUpdate(g, kLearningRate);
  g.Validate();
  return g;
}

int64_t Axis(int64_t axis, int64_t rank) { return axis < 0 ? axis + rank : axis; }

// One forward op as PyTorch's documented modules compute it (torch::nn::functional), or by its
// formula where it has no functional: independent of runtime/kernels.cc, whose attribute
// handling, gate orders and reductions it checks.
std::vector<at::Tensor> ReferenceForward(const graph::Op& op, const std::vector<at::Tensor>& in) {
  namespace F = torch::nn::functional;
  using torch::indexing::Slice;
  const graph::Attributes& a = op.attrs;
  const std::string& type = op.type;
  auto optional = [&](size_t index) { return in.size() > index ? in[index] : at::Tensor(); };
  auto pair = [&](const char* name, std::vector<int64_t> otherwise) {
    return a.Has(name) ? a.GetInts(name) : otherwise;
  };
  const double epsilon = a.Has("epsilon") ? a.GetFloat("epsilon") : 1e-5;
  if (type == ops::kConv2d) {
    auto options = F::Conv2dFuncOptions()
                       .stride(a.GetInts("stride"))
                       .padding(a.GetInts("padding"))
                       .groups(a.Has("groups") ? a.GetInt("groups") : 1);
    if (in.size() > 2) options.bias(in[2]);
    return {F::conv2d(in[0], in[1], options)};
  }
  if (type == ops::kRelu) return {F::relu(in[0])};
  if (type == ops::kSigmoid) return {1 / (1 + torch::exp(-in[0]))};
  if (type == ops::kTanh) return {2 / (1 + torch::exp(-2 * in[0])) - 1};
  if (type == ops::kGelu) return {0.5 * in[0] * (1 + torch::erf(in[0] / std::sqrt(2.0)))};
  if (type == ops::kErf) return {torch::erf(in[0])};
  if (type == ops::kSqrt) return {torch::pow(in[0], 0.5)};
  if (type == ops::kExp) return {torch::exp(in[0])};
  if (type == ops::kNeg) return {0 - in[0]};
  if (type == ops::kIdentity) return {in[0] * 1};
  if (type == ops::kAvgPool2d) {
    return {F::avg_pool2d(in[0], F::AvgPool2dFuncOptions(a.GetInts("kernel"))
                                     .stride(a.GetInts("stride"))
                                     .padding(pair("padding", {0, 0}))
                                     .count_include_pad(!a.Has("count_include_pad") ||
                                                        a.GetInt("count_include_pad") != 0))};
  }
  if (type == ops::kMaxPool2d) {
    return {F::max_pool2d(in[0], F::MaxPool2dFuncOptions(a.GetInts("kernel"))
                                     .stride(a.GetInts("stride"))
                                     .padding(pair("padding", {0, 0})))};
  }
  if (type == ops::kGlobalAvgPool2d) {
    return {F::adaptive_avg_pool2d(in[0], F::AdaptiveAvgPool2dFuncOptions({1, 1}))};
  }
  if (type == ops::kFlatten) return {in[0].reshape({in[0].size(0), -1})};
  if (type == ops::kLinear) return {F::linear(in[0], in[1], optional(2))};
  if (type == ops::kMatMul) return {torch::matmul(in[0], in[1])};
  if (type == ops::kAdd) return {in[0] + in[1]};
  if (type == ops::kSub) return {in[0] - in[1]};
  if (type == ops::kMul) return {in[0] * in[1]};
  if (type == ops::kDiv) return {in[0] / in[1]};
  if (type == ops::kPow) return {torch::pow(in[0], in[1])};
  if (type == ops::kAddN) return {torch::stack(in).sum(0)};
  if (type == ops::kConstant) {
    const std::string& bytes = a.GetString("values");
    std::vector<float> values(bytes.size() / sizeof(float));
    std::memcpy(values.data(), bytes.data(), bytes.size());
    return {torch::tensor(values).reshape(a.GetInts("shape"))};
  }
  if (type == ops::kReshape) return {in[0].reshape(a.GetInts("shape"))};
  if (type == ops::kTranspose) return {in[0].permute(a.GetInts("perm"))};
  if (type == ops::kConcat) return {torch::cat(in, Axis(a.GetInt("axis"), in[0].dim()))};
  if (type == ops::kSplit) {
    const int64_t axis = Axis(a.GetInt("axis"), in[0].dim());
    std::vector<at::Tensor> parts;
    int64_t start = 0;
    for (int64_t size : a.GetInts("sizes")) {
      parts.push_back(in[0].narrow(axis, start, size));
      start += size;
    }
    return parts;
  }
  if (type == ops::kSlice) {
    std::vector<torch::indexing::TensorIndex> index(
        static_cast<size_t>(Axis(a.GetInt("axis"), in[0].dim())), Slice());
    index.push_back(
        Slice(a.GetInt("start"), a.GetInt("end"), a.Has("step") ? a.GetInt("step") : 1));
    return {in[0].index(index)};
  }
  if (type == ops::kGather) return {in[0].index({in[1]})};
  if (type == ops::kSoftmax) {
    return {F::softmax(in[0], F::SoftmaxFuncOptions(Axis(a.GetInt("axis"), in[0].dim())))};
  }
  if (type == ops::kReduceMean) {
    at::Tensor x = in[0];
    const bool keep = !a.Has("keepdims") || a.GetInt("keepdims") != 0;
    std::vector<int64_t> axes;
    for (int64_t axis : a.GetInts("axes")) axes.push_back(Axis(axis, x.dim()));
    std::sort(axes.rbegin(), axes.rend());
    for (int64_t axis : axes) x = x.mean(axis, keep);
    return {x};
  }
  if (type == ops::kLayerNorm) {
    const int64_t axis = Axis(a.Has("axis") ? a.GetInt("axis") : -1, in[0].dim());
    std::vector<int64_t> normalized(in[0].sizes().begin() + axis, in[0].sizes().end());
    auto options = F::LayerNormFuncOptions(normalized).weight(in[1]).eps(epsilon);
    if (in.size() > 2) options.bias(in[2]);
    return {F::layer_norm(in[0], options)};
  }
  if (type == ops::kBatchNorm) {
    // Training mode: the minibatch's biased statistics over every dimension but the channels.
    std::vector<int64_t> dims = {0};
    std::vector<int64_t> channel_shape(static_cast<size_t>(in[0].dim()), 1);
    channel_shape[1] = in[0].size(1);
    for (int64_t d = 2; d < in[0].dim(); ++d) dims.push_back(d);
    const at::Tensor mean = in[0].mean(dims, /*keepdim=*/true);
    const at::Tensor var = (in[0] - mean).pow(2).mean(dims, /*keepdim=*/true);
    return {(in[0] - mean) / torch::sqrt(var + epsilon) * in[1].reshape(channel_shape) +
            in[2].reshape(channel_shape)};
  }
  if (type == ops::kLstmCell) {
    // Gates in PyTorch's order: input, forget, cell, output.
    at::Tensor gates = F::linear(in[0], in[3], optional(5)) + F::linear(in[1], in[4]);
    std::vector<at::Tensor> g = gates.chunk(4, 1);
    at::Tensor c = torch::sigmoid(g[1]) * in[2] + torch::sigmoid(g[0]) * torch::tanh(g[2]);
    return {torch::sigmoid(g[3]) * torch::tanh(c), c};
  }
  if (type == ops::kSoftmaxCrossEntropy) {
    return {F::cross_entropy(in[0], in[1], F::CrossEntropyFuncOptions().reduction(torch::kSum)) /
            static_cast<double>(a.GetInt("normalizer"))};
  }
  return {};
}

// The whole forward pass in one autograd graph, then plain SGD: what the executor must equal.
TensorMap ReferenceStep(const graph::Graph& g, const TensorMap& initial, const TensorMap& batch,
                        bool kernel_reference_allowed) {
  at::AutoGradMode grad_mode(true);
  std::vector<at::Tensor> values(static_cast<size_t>(g.num_tensors()));
  std::vector<at::Tensor> leaves;
  for (TensorId id = 0; id < g.num_tensors(); ++id) {
    const graph::Tensor& t = g.tensor(id);
    if (t.kind == TensorKind::kParameter) {
      values[static_cast<size_t>(id)] = initial.at(t.name).clone().requires_grad_(true);
      leaves.push_back(values[static_cast<size_t>(id)]);
    } else if (batch.count(t.name)) {
      values[static_cast<size_t>(id)] = batch.at(t.name);
    }
  }
  at::Tensor loss;
  for (graph::OpId id : g.TopologicalOrder()) {
    const graph::Op& op = g.op(id);
    if (op.phase != graph::Phase::kForward) continue;
    std::vector<at::Tensor> inputs;
    for (TensorId in : op.inputs) inputs.push_back(values[static_cast<size_t>(in)]);
    // The nets of the op types added for ONNX coverage have no formulas here: their kernels'
    // forward values are checked against ONNX's own node tests (onnx_test) and PyTorch's exports
    // (onnx_models_test); here only their gradients (autograd through the kernels) and
    // placements. The original nets' references never use the kernels.
    std::vector<at::Tensor> outputs = kernel_reference_allowed
                                          ? RunForwardKernel(op, inputs, at::kCPU)
                                          : ReferenceForward(op, inputs);
    if (outputs.empty()) ADD_FAILURE() << "op " << op.name << ": no reference for " << op.type;
    for (size_t k = 0; k < outputs.size(); ++k) {
      values[static_cast<size_t>(op.outputs[k])] = outputs[k];
    }
    if (op.type == ops::kSoftmaxCrossEntropy) loss = outputs[0];
  }
  std::vector<at::Tensor> grads = torch::autograd::grad({loss}, leaves);
  TensorMap updated;
  size_t i = 0;
  for (TensorId id : g.Parameters()) {
    at::NoGradGuard no_grad;
    updated.emplace(g.tensor(id).name, (leaves[i] - kLearningRate * grads[i]).detach());
    ++i;
  }
  return updated;
}

void ExpectSameParameters(const TensorMap& actual, const TensorMap& expected,
                          const std::string& context) {
  test_support::ExpectSameParameters(actual, expected, context, /*atol=*/1e-5);
}

// `kernel_reference_allowed`: ops without an independent reference may be computed by the kernel
// under test (the nets of the ONNX-coverage op types; see ReferenceStep).
void CheckNetwork(const graph::Graph& g, bool kernel_reference_allowed = false) {
  const TensorMap initial = InitializeParameters(g, 5);
  const TensorMap batch = SyntheticBatch(g, 6);
  const TensorMap expected = ReferenceStep(g, initial, batch, kernel_reference_allowed);

  // The shapes the IR promised are the shapes the kernels produced (a forward-only step keeps
  // every value).
  Executor predict(g, CpuWorkers(1), graph::Placement::AllOn(g, {"cpu:0"}, 0), initial,
                   {.forward_only = true});
  predict.RunStep(batch);
  for (const graph::Op& op : g.ops()) {
    if (op.phase != graph::Phase::kForward || op.type == ops::kSoftmaxCrossEntropy) continue;
    for (TensorId out : op.outputs) {
      const graph::Tensor& t = g.tensor(out);
      const at::Tensor value = predict.LastValue(t.name);
      EXPECT_EQ(value.sizes().vec(), t.shape) << "op " << op.name;
      EXPECT_EQ(value.scalar_type(), t.dtype == DType::kInt64 ? at::kLong : at::kFloat)
          << "op " << op.name << " (" << op.type << ") makes another type than its rule says";
    }
  }

  Executor one(g, CpuWorkers(1), graph::Placement::AllOn(g, {"cpu:0"}, 0), initial);
  one.RunStep(batch);
  ExpectSameParameters(one.Parameters(), expected, "one device");

  std::mt19937 rng(3);
  for (int trial = 0; trial < 5; ++trial) {
    graph::Placement placement = graph::Placement::AllOn(g, {"cpu:0", "cpu:1"}, 0);
    for (graph::OpId id : g.OpsInPhase(graph::Phase::kForward)) {
      placement.device_of_op[static_cast<size_t>(id)] = static_cast<int>(rng() % 2);
    }
    Executor two(g, CpuWorkers(2), placement, initial);
    two.RunStep(batch);
    ExpectSameParameters(two.Parameters(), expected, "placement " + std::to_string(trial));
  }
}

TEST(KernelsTest, ConvolutionPoolingAndBatchNormMatchOneAutogradPass) { CheckNetwork(ConvNet()); }

TEST(KernelsTest, AttentionAndElementwiseOpsMatchOneAutogradPass) { CheckNetwork(AttentionNet()); }

TEST(KernelsTest, UnrolledLstmMatchesOneAutogradPass) { CheckNetwork(LstmNet()); }

TEST(KernelsTest, ElementwiseOpsMatchOneAutogradPass) {
  CheckNetwork(ElementwiseNet(), /*kernel_reference_allowed=*/true);
}

TEST(KernelsTest, ImageOpsMatchOneAutogradPass) {
  CheckNetwork(ImageNet(), /*kernel_reference_allowed=*/true);
}

TEST(KernelsTest, IndexingAndReductionsMatchOneAutogradPass) {
  CheckNetwork(IndexingNet(), /*kernel_reference_allowed=*/true);
}

TEST(KernelsTest, GruAndRnnCellsMatchOneAutogradPass) {
  CheckNetwork(RecurrentNet(), /*kernel_reference_allowed=*/true);
}

TEST(KernelsTest, EveryDeclaredForwardOpTypeIsExercised) {
  std::set<std::string> used;
  for (const graph::Graph& g : {ConvNet(), AttentionNet(), LstmNet(), ElementwiseNet(), ImageNet(),
                                IndexingNet(), RecurrentNet()}) {
    for (const graph::Op& op : g.ops()) used.insert(op.type);
  }
  // Flatten and SoftmaxCrossEntropy come with every loss head; LeNet covers Relu and Linear too.
  for (const std::string& type : graph::KnownOpTypes()) {
    EXPECT_TRUE(used.count(type)) << "op type " << type << " has no kernel test";
    EXPECT_TRUE(HasKernel(type) || type == ops::kBackward || type == ops::kSgdUpdate)
        << "op type " << type << " has no kernel";
  }
}

// Training-mode dropout: the mask depends on the op's seed and the step only (so a placement or a
// re-run draws the same one), a new one every step; kept values are scaled by 1 / (1 - ratio),
// and the gradient is the same mask.
TEST(KernelsTest, DropoutDrawsAMaskPerSeedAndStep) {
  auto op = [](int64_t seed) {
    return graph::Op{
        .name = "drop", .type = ops::kDropout, .attrs = Attrs({{"ratio", 0.25}, {"seed", seed}})};
  };
  const at::Tensor x = at::ones({100, 100});
  auto run = [&](int64_t seed, uint64_t step) {
    return RunForwardKernel(op(seed), {x}, at::kCPU, step)[0];
  };
  const at::Tensor first = run(11, 0);
  EXPECT_TRUE(at::equal(first, run(11, 0)));
  EXPECT_FALSE(at::equal(first, run(11, 1)));
  EXPECT_FALSE(at::equal(first, run(12, 0)));
  const double dropped = (first == 0).to(at::kDouble).mean().item<double>();
  EXPECT_NEAR(dropped, 0.25, 0.02);  // 10,000 draws: the standard deviation is 0.0043
  EXPECT_TRUE(at::equal(at::where(first == 0, first, first - 1.0 / 0.75), at::zeros_like(first)));
  at::AutoGradMode grad_mode(true);
  const at::Tensor input = x.clone().requires_grad_(true);
  const at::Tensor y = RunForwardKernel(op(11), {input}, at::kCPU, 0)[0];
  const at::Tensor grad = torch::autograd::grad({y.sum()}, {input})[0];
  EXPECT_TRUE(at::equal(grad, first));
}

// Einsum's shape rule parses the equation itself (graph/ops_nn.cc): its shapes are LibTorch's for
// the forms ONNX's own Einsum tests use (their data is float64, which the IR does not take).
TEST(KernelsTest, EinsumShapesAreLibTorchs) {
  const std::vector<std::pair<std::string, std::vector<Shape>>> cases = {
      {"ij,jk->ik", {{3, 4}, {4, 5}}},
      {"bij,bjk->bik", {{2, 3, 4}, {2, 4, 5}}},
      {"i,i", {{7}, {7}}},
      {"ij->ji", {{3, 4}}},
      {"ij->i", {{3, 4}}},
      {"...ii->...i", {{2, 3, 4, 4}}},
      {"ij,jk", {{3, 4}, {4, 5}}},
      {"...ij,...jk->...ik", {{6, 1, 3, 4}, {2, 4, 5}}},
      {"bhqd,bhkd->bhqk", {{2, 4, 5, 8}, {2, 4, 6, 8}}},
  };
  for (const auto& [equation, shapes] : cases) {
    graph::Graph g;
    graph::ModelBuilder b(g);
    std::vector<TensorId> inputs;
    std::vector<at::Tensor> values;
    for (size_t i = 0; i < shapes.size(); ++i) {
      inputs.push_back(b.Input(fmt::format("x{}", i), shapes[i]));
      values.push_back(at::randn(shapes[i]));
    }
    const TensorId y = b.Apply("einsum", ops::kEinsum, inputs, Attrs({{"equation", equation}}));
    const at::Tensor expected = at::einsum(equation, values);
    EXPECT_EQ(g.tensor(y).shape, expected.sizes().vec()) << equation;
    const at::Tensor actual = RunForwardKernel(g.op(0), values, at::kCPU)[0];
    EXPECT_TRUE(at::allclose(actual, expected)) << equation;
  }
}

TEST(KernelsTest, TokenIdsIndexTheirEmbeddingTable) {
  graph::Graph g = AttentionNet();
  TensorMap batch = SyntheticBatch(g, 1);
  EXPECT_GE(batch.at("tokens").min().item<int64_t>(), 0);
  EXPECT_LT(batch.at("tokens").max().item<int64_t>(), 11);
}

TEST(KernelsTest, ParametersStartFromTheirInitializers) {
  graph::Graph g;
  graph::ModelBuilder b(g);
  auto values = std::make_shared<const std::vector<float>>(std::vector<float>{1, 2, 3, 4});
  b.Parameter("given", {2, 2}, {Initializer::Kind::kValues, 0.0, values});
  b.Parameter("ones", {3}, {Initializer::Kind::kOnes});
  TensorMap p = InitializeParameters(g, 0);
  EXPECT_TRUE(at::equal(p.at("given"), at::tensor({1.f, 2.f, 3.f, 4.f}).reshape({2, 2})));
  EXPECT_TRUE(at::equal(p.at("ones"), at::ones({3})));
}

}  // namespace
}  // namespace placer::runtime
