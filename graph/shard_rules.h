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
//
// Blocks: a fused projection (GPT-2's query, key and value in one linear layer, then a Split of
// its features into the three) is cut as Megatron lays it out on its ranks: along the axis of
// split the tensor is `parts` equal blocks, each cut `ways` ways, and shard s holds the s-th piece
// of every block, so each shard's own Split into `parts` gives its piece of each block (its heads
// of the query, the key and the value). A contiguous cut is one block.
struct ShardPlan {
  Op shard_op;
  std::vector<int> input_axis;
  int output_axis = kWhole;
  bool partial = false;
  std::optional<TensorId> bias_after_sum;  // a row-parallel Linear's bias, added once
  int input_parts = 1;                     // the blocks of every input cut along its axis
  int output_parts = 1;                    // the blocks of the outputs
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
  SplitRules(const Graph& model, int ways, const std::vector<int>& axis,
             const std::vector<int>& parts)
      : model_(model), ways_(ways), axis_(axis), parts_(parts) {}

  // Every input cut along its axis must divide evenly.
  bool CanCut(const ShardPlan& plan) const;
  ShardPlan PlanFor(const Op& op, std::vector<int> input_axis, int output_axis) const;
  // A column split's first op; throws GraphError when `op` cannot start one.
  ShardPlan ColumnStart(const Op& op) const;
  // How an op whose inputs are split can follow the split, or nullopt when it cannot.
  std::optional<ShardPlan> Follow(const Op& op) const;

 private:
  int SplitOf(TensorId t) const { return axis_[static_cast<size_t>(t)]; }
  int PartsOf(TensorId t) const { return parts_[static_cast<size_t>(t)]; }
  // The blocks of the model tensors `op` reads split (ShardPlan), or 0 when they differ.
  int InputParts(const Op& op) const;
  // The blocks a start's output is later split into along its features (ShardPlan), or 1.
  int FusedParts(const Op& start) const;
  int64_t Extent(TensorId t, int axis) const {
    return model_.tensor(t).shape[static_cast<size_t>(axis)];
  }
  std::optional<ShardPlan> Elementwise(const Op& op, size_t out_rank) const;
  std::optional<ShardPlan> Reshape(const Op& op) const;
  std::optional<ShardPlan> MatMul(const Op& op, size_t out_rank) const;
  std::optional<ShardPlan> Split(const Op& op, int parts) const;
  std::optional<ShardPlan> FollowOneOutput(const Op& op) const;

  const Graph& model_;
  const int ways_;
  const std::vector<int>& axis_;
  const std::vector<int>& parts_;
};

}  // namespace placer::graph::shard_rules
