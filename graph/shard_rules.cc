#include "graph/shard_rules.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "graph/ops.h"

namespace placer::graph::shard_rules {
namespace {

size_t Rank(const Graph& g, TensorId t) { return g.tensor(t).shape.size(); }

int NormalAxis(int64_t axis, size_t rank) {
  return static_cast<int>(axis < 0 ? axis + static_cast<int64_t>(rank) : axis);
}

}  // namespace

bool IsLinearLayer(const Graph& g, const Op& op) {
  if (op.type == op_types::kLinear) return true;
  return op.type == op_types::kMatMul && op.inputs.size() == 2 &&
         g.tensor(op.inputs[1]).kind == TensorKind::kParameter && Rank(g, op.inputs[1]) == 2;
}

// Ops every shard may repeat on its own copy of their inputs, as Megatron repeats normalisation,
// residuals and the reshapes around them on every tensor-parallel rank: cheap, with no parameter
// of their own to split.
bool IsReplicable(const Op& op) {
  namespace t = op_types;
  if (op.outputs.size() != 1 || op.inputs.empty()) return false;
  return IsElementwise(op.type) || op.type == t::kLayerNorm || op.type == t::kSoftmax ||
         op.type == t::kLogSoftmax || op.type == t::kReshape || op.type == t::kTranspose ||
         op.type == t::kSlice || op.type == t::kConcat;
}

// Every input cut along its axis must divide evenly.
bool SplitRules::CanCut(const ShardPlan& plan) const {
  for (size_t i = 0; i < plan.input_axis.size(); ++i) {
    const int axis = plan.input_axis[i];
    if (axis != kWhole && Extent(plan.shard_op.inputs[i], axis) % (ways_ * plan.input_parts) != 0)
      return false;
  }
  return true;
}

ShardPlan SplitRules::PlanFor(const Op& op, std::vector<int> input_axis, int output_axis) const {
  return ShardPlan{.shard_op = op, .input_axis = std::move(input_axis), .output_axis = output_axis};
}

ShardPlan SplitRules::ColumnStart(const Op& op) const {
  if (!IsLinearLayer(model_, op)) {
    throw GraphError(fmt::format(
        "tensor parallelism: op '{}' ({}) cannot start a column split: only Linear, and MatMul "
        "by a rank-2 parameter, can",
        op.name, op.type));
  }
  const int out_axis = static_cast<int>(Rank(model_, op.outputs[0])) - 1;
  const int64_t features = Extent(op.outputs[0], out_axis);
  if (features % ways_ != 0) {
    throw GraphError(fmt::format(
        "tensor parallelism: op '{}' has {} output features, which {} shards do not divide",
        op.name, features, ways_));
  }
  ShardPlan plan;
  if (op.type == op_types::kLinear) {  // weight [O, K], bias [O]: rows
    std::vector<int> axes{kWhole, 0};
    if (op.inputs.size() > 2) axes.push_back(0);
    plan = PlanFor(op, axes, out_axis);
  } else {
    plan = PlanFor(op, {kWhole, 1}, out_axis);  // MatMul by [K, N]: columns
  }
  plan.input_parts = plan.output_parts = FusedParts(op);
  return plan;
}

int SplitRules::FusedParts(const Op& start) const {
  TensorId t = start.outputs[0];
  const int64_t features = model_.tensor(t).shape.back();
  // Through the ops that keep the features whole and last (a bias added, a reshape of the other
  // axes) to a Split of them into equal blocks that the shards divide.
  for (int hop = 0; hop < 4; ++hop) {
    const Tensor& tensor = model_.tensor(t);
    if (tensor.consumers.size() != 1) return 1;
    const Op& next = model_.op(tensor.consumers.front());
    if (next.type == op_types::kSplit) {
      const size_t rank = tensor.shape.size();
      if (NormalAxis(next.attrs.GetInt("axis"), rank) != static_cast<int>(rank) - 1) return 1;
      const std::vector<int64_t>& sizes = next.attrs.GetInts("sizes");
      const bool blocks =
          sizes.size() > 1 && sizes.front() % ways_ == 0 &&
          std::all_of(sizes.begin(), sizes.end(), [&](int64_t s) { return s == sizes.front(); });
      return blocks ? static_cast<int>(sizes.size()) : 1;
    }
    if (next.outputs.size() != 1 || !(IsElementwise(next.type) || next.type == op_types::kReshape))
      return 1;
    const Shape& out = model_.tensor(next.outputs[0]).shape;
    if (out.empty() || out.back() != features) return 1;
    t = next.outputs[0];
  }
  return 1;
}

int SplitRules::InputParts(const Op& op) const {
  int parts = 0;
  for (TensorId in : op.inputs) {
    if (SplitOf(in) == kWhole) continue;
    if (parts != 0 && PartsOf(in) != parts) return 0;
    parts = PartsOf(in);
  }
  return parts == 0 ? 1 : parts;
}

// How an op whose inputs are split can follow the split, or nullopt when it cannot.
std::optional<ShardPlan> SplitRules::Follow(const Op& op) const {
  namespace t = op_types;
  const int parts = InputParts(op);
  if (parts == 0) return std::nullopt;
  if (op.type == t::kSplit) return Split(op, parts);
  if (op.outputs.size() != 1) return std::nullopt;
  std::optional<ShardPlan> plan = FollowOneOutput(op);
  if (plan && parts > 1) {
    // Blocks pass only through ops that never mix entries along the split axis (none of which
    // computes partial products).
    const bool keeps_blocks = IsElementwise(op.type) || op.type == t::kSoftmax ||
                              op.type == t::kLogSoftmax || op.type == t::kHardmax ||
                              op.type == t::kSlice || op.type == t::kLayerNorm ||
                              op.type == t::kTranspose || op.type == t::kReshape;
    if (!keeps_blocks) return std::nullopt;
    if (op.type == t::kReshape &&
        model_.tensor(op.outputs[0]).shape[static_cast<size_t>(plan->output_axis)] !=
            Extent(op.inputs[0], SplitOf(op.inputs[0]))) {
      return std::nullopt;  // the blocks would be merged with or cut by other axes
    }
    plan->input_parts = plan->output_parts = parts;
  }
  return plan;
}

std::optional<ShardPlan> SplitRules::Split(const Op& op, int parts) const {
  const int s = SplitOf(op.inputs[0]);
  if (s == kWhole) return std::nullopt;
  // Only a fused projection's Split into its blocks, along the split: each shard's Split gives its
  // piece of each block.
  const int axis = NormalAxis(op.attrs.GetInt("axis"), Rank(model_, op.inputs[0]));
  if (axis != s) return std::nullopt;
  ShardPlan plan = PlanFor(op, {s}, s);
  plan.input_parts = parts;
  std::vector<int64_t> sizes = op.attrs.GetInts("sizes");
  if (static_cast<int>(sizes.size()) != parts ||
      !std::all_of(sizes.begin(), sizes.end(), [&](int64_t size) { return size == sizes[0]; }) ||
      sizes[0] % ways_ != 0) {
    return std::nullopt;
  }
  for (int64_t& size : sizes) size /= ways_;
  plan.shard_op.attrs.Set("sizes", sizes);
  return plan;
}

std::optional<ShardPlan> SplitRules::FollowOneOutput(const Op& op) const {
  namespace t = op_types;
  const size_t out_rank = Rank(model_, op.outputs[0]);
  if (IsElementwise(op.type)) return Elementwise(op, out_rank);
  const int s = SplitOf(op.inputs[0]);
  if (op.type == t::kSoftmax || op.type == t::kLogSoftmax || op.type == t::kHardmax ||
      op.type == t::kSlice) {
    if (s == kWhole || NormalAxis(op.attrs.GetInt("axis"), out_rank) == s) return std::nullopt;
    return PlanFor(op, {s}, s);
  }
  if (op.type == t::kLayerNorm) {
    const int64_t axis = op.attrs.Has("axis") ? op.attrs.GetInt("axis") : -1;
    if (s == kWhole || s >= NormalAxis(axis, out_rank)) return std::nullopt;
    std::vector<int> axes(op.inputs.size(), kWhole);
    axes[0] = s;
    return PlanFor(op, axes, s);
  }
  if (op.type == t::kTranspose) {
    const std::vector<int64_t>& perm = op.attrs.GetInts("perm");
    const auto at = std::find(perm.begin(), perm.end(), s);
    return PlanFor(op, {s}, static_cast<int>(at - perm.begin()));
  }
  if (op.type == t::kReshape) return Reshape(op);
  if (op.type == t::kConcat) {
    const int axis = NormalAxis(op.attrs.GetInt("axis"), out_rank);
    int split = kWhole;
    for (TensorId in : op.inputs) {
      if (SplitOf(in) == kWhole) continue;
      if (split != kWhole && SplitOf(in) != split) return std::nullopt;
      split = SplitOf(in);
    }
    if (split == axis) return std::nullopt;
    return PlanFor(op, std::vector<int>(op.inputs.size(), split), split);
  }
  if (op.type == t::kLinear) {
    if (s == static_cast<int>(Rank(model_, op.inputs[0])) - 1) {  // row-parallel
      ShardPlan plan = PlanFor(op, {s, 1}, kWhole);
      plan.shard_op.inputs.resize(2);
      plan.partial = true;
      if (op.inputs.size() > 2) plan.bias_after_sum = op.inputs[2];
      return plan;
    }
    if (SplitOf(op.inputs[1]) != kWhole) return std::nullopt;
    return PlanFor(op, std::vector<int>(op.inputs.size(), kWhole), s);
  }
  if (op.type == t::kMatMul) return MatMul(op, out_rank);
  return std::nullopt;
}

std::optional<ShardPlan> SplitRules::Elementwise(const Op& op, size_t out_rank) const {
  int out_axis = kWhole;
  for (TensorId in : op.inputs) {
    if (SplitOf(in) == kWhole) continue;
    const int aligned = SplitOf(in) + static_cast<int>(out_rank - Rank(model_, in));
    if (out_axis != kWhole && aligned != out_axis) return std::nullopt;
    out_axis = aligned;
  }
  std::vector<int> axes;
  for (TensorId in : op.inputs) {
    const int axis = out_axis - static_cast<int>(out_rank - Rank(model_, in));
    axes.push_back(axis < 0 || Extent(in, axis) == 1 ? kWhole : axis);  // broadcast: whole
  }
  return PlanFor(op, axes, out_axis);
}

// A reshape keeps the split when the split axis starts at the same flat offset in the output:
// then, within each index of the axes before it, both cut the same contiguous elements into
// `ways` equal blocks ([b, s, H*d] split on features is [b, s, H, d] split on heads, and back).
std::optional<ShardPlan> SplitRules::Reshape(const Op& op) const {
  const int s = SplitOf(op.inputs[0]);
  const Shape& in = model_.tensor(op.inputs[0]).shape;
  Shape out = op.attrs.GetInts("shape");
  int64_t before = 1;
  for (int d = 0; d < s; ++d) before *= in[static_cast<size_t>(d)];
  int64_t prefix = 1;
  size_t j = 0;
  while (j < out.size() && prefix < before) prefix *= out[j++];
  if (prefix != before || j == out.size()) return std::nullopt;
  if (out[j] % ways_ != 0) return std::nullopt;
  ShardPlan plan = PlanFor(op, {s}, static_cast<int>(j));
  out[j] /= ways_;
  plan.shard_op.attrs.Set("shape", out);
  return plan;
}

std::optional<ShardPlan> SplitRules::MatMul(const Op& op, size_t out_rank) const {
  const TensorId a = op.inputs[0], b = op.inputs[1];
  const int ra = static_cast<int>(Rank(model_, a)), rb = static_cast<int>(Rank(model_, b));
  const int r = static_cast<int>(out_rank);
  if (ra < 2 || rb < 2) return std::nullopt;
  const int sa = SplitOf(a), sb = SplitOf(b);
  if ((sa == ra - 1 || sb == rb - 2) && (sa == kWhole || sa == ra - 1) &&
      (sb == kWhole || sb == rb - 2)) {  // over the contraction: partial products
    ShardPlan plan = PlanFor(op, {ra - 1, rb - 2}, kWhole);
    plan.partial = true;
    return plan;
  }
  const int batch_a = sa != kWhole && sa < ra - 2 ? sa + (r - ra) : kWhole;
  const int batch_b = sb != kWhole && sb < rb - 2 ? sb + (r - rb) : kWhole;
  if (batch_a != kWhole || batch_b != kWhole) {  // over a batch axis (attention's heads)
    if (batch_a != kWhole && batch_b != kWhole && batch_a != batch_b) return std::nullopt;
    const int o = batch_a != kWhole ? batch_a : batch_b;
    if ((sa != kWhole && batch_a == kWhole) || (sb != kWhole && batch_b == kWhole)) {
      return std::nullopt;
    }
    auto operand_axis = [&](TensorId t, int rank) {
      const int axis = o - (r - rank);
      return axis < 0 || Extent(t, axis) == 1 ? kWhole : axis;
    };
    return PlanFor(op, {operand_axis(a, ra), operand_axis(b, rb)}, o);
  }
  if (sa == ra - 2 && sb == kWhole) return PlanFor(op, {sa, kWhole}, r - 2);  // rows of a
  if (sb == rb - 1 && sa == kWhole) return PlanFor(op, {kWhole, sb}, r - 1);  // columns of b
  return std::nullopt;
}

}  // namespace placer::graph::shard_rules
