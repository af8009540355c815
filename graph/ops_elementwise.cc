// Elementwise op types: unary functions, binary arithmetic with broadcasting, comparisons, logic,
// Where, Clip, Cast and Dropout.
#include <fmt/format.h>

#include "graph/op_rules.h"
#include "graph/ops.h"

namespace placer::graph {
namespace {

std::vector<Shape> FloatUnaryShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 1, 1);
  ExpectFloat(g, op, 0);
  return {InputShape(g, op, 0)};
}

std::vector<Shape> IntUnaryShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 1, 1);
  ExpectInt(g, op, 0);
  return {InputShape(g, op, 0)};
}

std::vector<Shape> ClipShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 1, 1);
  if (op.attrs.Has("min") && op.attrs.Has("max") &&
      op.attrs.GetFloat("min") > op.attrs.GetFloat("max")) {
    throw GraphError("min exceeds max");
  }
  return {InputShape(g, op, 0)};
}

std::vector<Shape> DropoutShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 1, 1);
  ExpectFloat(g, op, 0);
  const double ratio = op.attrs.GetFloat("ratio");
  if (!(ratio >= 0 && ratio < 1)) throw GraphError("ratio must be in [0, 1)");
  op.attrs.GetInt("seed");
  return {InputShape(g, op, 0)};
}

std::vector<Shape> CastShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 1, 1);
  const std::string& to = op.attrs.GetString("to");
  if (to != "float32" && to != "int64") {
    throw GraphError(fmt::format("cannot cast to '{}'; expected 'float32' or 'int64'", to));
  }
  // bits 32: an int64 result holding what a cast to int32 gives (floats out of its range: its
  // minimum).
  if (op.attrs.Has("bits")) {
    const int64_t bits = op.attrs.GetInt("bits");
    if (to != "int64" || (bits != 32 && bits != 64)) {
      throw GraphError(
          fmt::format("cannot cast to '{}' of {} bits; expected int64 of 32 or 64", to, bits));
    }
  }
  return {InputShape(g, op, 0)};
}

// Arithmetic: both inputs of one type.
std::vector<Shape> BinaryShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 2, 2);
  ExpectSameDType(g, op, 0, 1);
  return {Broadcast(g, op, 0, 1)};
}

std::vector<Shape> PowShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 2, 2);
  return {Broadcast(g, op, 0, 1)};
}

std::vector<Shape> LogicShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 2, 2);
  ExpectInt(g, op, 0);
  ExpectInt(g, op, 1);
  return {Broadcast(g, op, 0, 1)};
}

// PRelu's slope broadcasts to x (ONNX's unidirectional broadcasting).
std::vector<Shape> PReluShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 2, 2);
  ExpectFloat(g, op, 0);
  ExpectFloat(g, op, 1);
  if (Broadcast(g, op, 0, 1) != InputShape(g, op, 0)) {
    throw GraphError(fmt::format("slope {} does not broadcast to x {}",
                                 ToString(InputShape(g, op, 1)), ToString(InputShape(g, op, 0))));
  }
  return {InputShape(g, op, 0)};
}

std::vector<Shape> WhereShapes(const Graph& g, const Op& op) {
  ExpectInputs(op, 3, 3);
  ExpectInt(g, op, 0);
  ExpectSameDType(g, op, 1, 2);
  return {BroadcastShapes(Broadcast(g, op, 0, 1), InputShape(g, op, 2))};
}

}  // namespace

void AddElementwiseTypes(OpTable& table) {
  namespace t = op_types;
  OpTable family;
  // Unary on floats. FLOPs per element: 1 for the cheap ones, a few for transcendental ones.
  const std::pair<const char*, double> unary[] = {
      {t::kRelu, 1},        {t::kSigmoid, 4},   {t::kTanh, 4},
      {t::kGelu, 8},        {t::kErf, 4},       {t::kSqrt, 1},
      {t::kExp, 1},         {t::kLog, 1},       {t::kReciprocal, 1},
      {t::kSin, 4},         {t::kCos, 4},       {t::kTan, 4},
      {t::kAsin, 4},        {t::kAcos, 4},      {t::kAtan, 4},
      {t::kSinh, 4},        {t::kCosh, 4},      {t::kAsinh, 4},
      {t::kAcosh, 4},       {t::kAtanh, 4},     {t::kFloor, 1},
      {t::kCeil, 1},        {t::kRound, 1},     {t::kSoftplus, 4},
      {t::kSoftsign, 3},    {t::kMish, 10},     {t::kHardSwish, 4},
      {t::kHardSigmoid, 3}, {t::kLeakyRelu, 2}, {t::kElu, 4},
      {t::kSelu, 5},        {t::kCelu, 5},      {t::kThresholdedRelu, 1},
      {t::kShrink, 2},
  };
  for (const auto& [name, flops] : unary) family[name] = {FloatUnaryShapes, PerOutput(flops)};
  family[t::kIsNaN] = {FloatUnaryShapes, PerOutput(1), OutputDType::kInt64};
  family[t::kIsInf] = {FloatUnaryShapes, PerOutput(1), OutputDType::kInt64};
  family[t::kDropout] = {DropoutShapes, PerOutput(3)};  // draw, compare, scale
  // Any type.
  for (const char* name : {t::kNeg, t::kAbs, t::kSign}) {
    family[name] = {SameShape, PerOutput(1), OutputDType::kLikeInput0};
  }
  family[t::kIdentity] = {SameShape, Free, OutputDType::kLikeInput0};
  family[t::kClip] = {ClipShapes, PerOutput(2), OutputDType::kLikeInput0};
  family[t::kCast] = {CastShapes, Free, OutputDType::kCastTo};
  family[t::kNot] = {IntUnaryShapes, PerOutput(1), OutputDType::kLikeInput0};
  // Binary.
  for (const char* name : {t::kAdd, t::kSub, t::kMul, t::kDiv, t::kMax, t::kMin, t::kMod}) {
    family[name] = {BinaryShapes, PerOutput(1), OutputDType::kLikeInput0};
  }
  family[t::kPow] = {PowShapes, PerOutput(4), OutputDType::kLikeInput0};
  family[t::kPRelu] = {PReluShapes, PerOutput(2)};
  for (const char* name : {t::kEqual, t::kLess, t::kLessOrEqual, t::kGreater, t::kGreaterOrEqual}) {
    family[name] = {BinaryShapes, PerOutput(1), OutputDType::kInt64};
  }
  for (const char* name : {t::kAnd, t::kOr, t::kXor}) {
    family[name] = {LogicShapes, PerOutput(1), OutputDType::kInt64};
  }
  family[t::kWhere] = {WhereShapes, PerOutput(1), OutputDType::kLikeInput1};
  // Every type of this family is pointwise but Dropout, whose mask is drawn over the whole tensor.
  for (auto& [name, info] : family) {
    info.elementwise = name != t::kDropout;
    table[name] = std::move(info);
  }
}

}  // namespace placer::graph
