// Tensor (intra-operator) parallelism as a rewrite of the forward graph, Megatron-LM's way: a
// linear layer named as a start is split column-wise over T shards (each shard owns O/T rows of
// the weight and computes O/T output features); the split then follows the data through the ops
// that can work on slices (pointwise ops, the reshapes and transposes that turn features into
// heads, attention's batched matmuls over heads, softmax and normalisation over other axes) until
// a linear layer contracts over the split features: that one runs row-parallel (each shard owns
// the matching K/T columns of its weight) and its T partial products are summed, which is the
// all-reduce of Megatron's row-parallel layer. Wherever a split tensor meets an op that cannot
// follow the split, it is gathered (a Concat); an unsplit activation that split inputs must meet
// is scattered (a Split). Every collective is an op with bytes of the graph, so the executor
// runs it, the simulator prices it on the links between the shards' devices, and the backward
// derived from the rewritten forward (graph/training_step.h) is the collectives' transpose: the
// gradient of a replicated input is summed over the shards (Megatron's backward all-reduce).
// Where a row-parallel sum feeds a later split (one transformer layer into the next), it is a
// ring all-reduce (ops tagged graph::kCollectiveHop, so the simulator prices its hops as NCCL's)
// and every shard repeats what follows on its own copy up to that split (the residual, the
// normalisation, the reshapes), as Megatron repeats them on every tensor-parallel rank; a sum
// that feeds no split (the last layer's, before the head) is reduced onto one device.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "graph/ir.h"
#include "graph/step_names.h"

namespace placer::graph {

// Shard s's copy of a model op or tensor: "tp<s>/<name>" (after any "r<r>/" and "m<k>/", which
// replication and micro-batching add in front later); graph::ShardOfName reads it back.
std::string ShardName(int shard, const std::string& name);

// Where a sharded parameter's values come from: `size` entries of `source` along `axis` from
// `begin`; with `parts` > 1 (a fused projection's blocks, shard_rules.h), `source` is `parts`
// equal blocks along `axis` and the slice is `size / parts` entries from `begin` of each, in
// block order.
struct ParameterSlice {
  std::string name;    // the shard's parameter
  std::string source;  // the model's parameter
  int axis = 0;
  int64_t begin = 0;
  int64_t size = 0;
  int parts = 1;
};

// A parameter every shard reads whole (a normalisation's scale, a row-parallel layer's bias),
// copied onto each shard as Megatron keeps one on every rank: its copies in `forward`, shard by
// shard, named "tp<s>/<source>". Their gradients are summed before their updates
// (TensorParallelStep; a data-parallel step ties them across its replicas too), so the copies stay
// equal.
struct ReplicatedParameter {
  std::string source;  // the model's parameter
  std::vector<TensorId> copies;
};

struct TensorParallelGraph {
  Graph forward;  // the rewritten forward graph (no training step yet)
  int ways = 1;
  // Per op of `forward`: the shard it computes (0 .. ways - 1), or -1 for an op every shard
  // shares: an unsplit model op, a gather, a scatter, a partial sum.
  std::vector<int> shard_of_op;
  // Per op of `forward`: the op of the model it computes or serves (a gather serves its tensor's
  // producer, a scatter the op that needed the pieces).
  std::vector<OpId> source_op;
  std::vector<ParameterSlice> parameter_slices;  // one per sharded parameter
  std::vector<ReplicatedParameter> replicated_parameters;
  // The collectives it added: Concats of split tensors, Splits of whole ones, sums of partial
  // products (one per row-parallel layer), of which all-reduces (the sum on every shard).
  int gathers = 0;
  int scatters = 0;
  int partial_sums = 0;
  int all_reduces = 0;
};

// Splits `ways` ways every op the split of `column_starts` reaches. Each start must be a Linear,
// or a MatMul whose second input is a parameter of rank 2, with output features divisible by
// `ways`. Throws GraphError naming the op otherwise, or when `forward` has training ops.
TensorParallelGraph ShardTensorParallel(const Graph& forward,
                                        const std::vector<std::string>& column_starts, int ways);

// The training step of a tensor-parallel graph: its forward, the derived backward, and one update
// per parameter, each replicated parameter's copies updated with the sum of their gradients.
Graph TensorParallelStep(const TensorParallelGraph& split, double learning_rate);

// Megatron-LM's starts in a transformer built by the zoo or loaded from ONNX: the linear layers
// (Linear, or MatMul by a rank-2 parameter) whose splits, together, reach row-parallel linear
// layers without a gather on the way (attention's query, key and value projections; the MLP's
// first layer), taken greedily in topological order. The layers that close the pairs, and those
// whose split would have to be gathered, are left alone. Each layer tried shards the whole
// forward once, so the pick costs about its linear layers x its ops: over `max_work` (an unrolled
// recurrent network's thousands of MatMuls: hours) it throws GraphError saying so.
inline constexpr int64_t kMaxMegatronPickWork = 500'000;  // BERT-large: 194 x 588 = 114k
std::vector<std::string> MegatronColumnStarts(const Graph& forward, int ways,
                                              int64_t max_work = kMaxMegatronPickWork);

}  // namespace placer::graph
