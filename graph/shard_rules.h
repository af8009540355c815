// How each op of a model follows a Megatron-style split (graph/tensor_parallel.h's rewrite): which
// ops may start a column split, which every shard may repeat, and, given how each input is split,
// the op each shard runs and the axis its output is split along. Internal to graph/.
#pragma once

#include <optional>
#include <vector>

#include "graph/ir.h"

namespace placer::graph::shard_rules {

inline constexpr int kWhole = -1;  // a tensor not split: every shard reads all of it
inline constexpr int kReplicated =
    -2;  // an output every shard computes a copy of, on its own device

// How one op of the model runs on the shards: the op each shard runs (its inputs are the model's
// tensors), each input's axis of split (its pieces) or kWhole, and the output's axis of split, or
// kReplicated. A partial op's shards each compute a part of a sum (a contraction over a split
// axis).
struct ShardPlan {
  Op shard_op;
  std::vector<int> input_axis;
  int output_axis = kWhole;
  bool partial = false;
  std::optional<TensorId> bias_after_sum;  // a row-parallel Linear's bias, added once
};

// A Linear, or a MatMul by a rank-2 parameter: what may start a column split.
bool IsLinearLayer(const Graph& g, const Op& op);
// Ops every shard may repeat on its own copy of their inputs, as Megatron repeats normalisation,
// residuals and the reshapes around them on every tensor-parallel rank: cheap, with no parameter
// of their own to split.
bool IsReplicable(const Op& op);

// The rules over `model` cut `ways` ways, reading each model tensor's axis of split (or kWhole)
// from `axis` as the rewrite fills it in.
class SplitRules {
 public:
  SplitRules(const Graph& model, int ways, const std::vector<int>& axis)
      : model_(model), ways_(ways), axis_(axis) {}

  // Every input cut along its axis must divide evenly.
  bool CanCut(const ShardPlan& plan) const;
  ShardPlan PlanFor(const Op& op, std::vector<int> input_axis, int output_axis) const;
  // A column split's first op; throws GraphError when `op` cannot start one.
  ShardPlan ColumnStart(const Op& op) const;
  // How an op whose inputs are split can follow the split, or nullopt when it cannot.
  std::optional<ShardPlan> Follow(const Op& op) const;

 private:
  int SplitOf(TensorId t) const { return axis_[static_cast<size_t>(t)]; }
  int64_t Extent(TensorId t, int axis) const {
    return model_.tensor(t).shape[static_cast<size_t>(axis)];
  }
  std::optional<ShardPlan> Elementwise(const Op& op, size_t out_rank) const;
  std::optional<ShardPlan> Reshape(const Op& op) const;
  std::optional<ShardPlan> MatMul(const Op& op, size_t out_rank) const;

  const Graph& model_;
  const int ways_;
  const std::vector<int>& axis_;
};

}  // namespace placer::graph::shard_rules
