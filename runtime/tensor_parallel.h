// Parameters of a tensor-parallel step (graph/tensor_parallel.h) from and to the model's: each
// shard's slice cut from the whole parameter, and the slices concatenated back, so that a sharded
// run starts from, and is compared against, the parameters of the unsharded model.
#pragma once

#include "graph/tensor_parallel.h"
#include "runtime/executor.h"

namespace placer::runtime {

// The sharded graph's parameters from the model's (`whole` names the model's parameters).
TensorMap ShardParameters(const TensorMap& whole, const graph::TensorParallelGraph& sharded);

// The model's parameters from the sharded graph's: every slice back in its place.
TensorMap GatherParameters(const TensorMap& sharded, const graph::TensorParallelGraph& graph);

}  // namespace placer::runtime
