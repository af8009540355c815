// The search's tensor-parallel steps: for each tensor-parallel shape of the action space (R copies
// of each group, R / T replicas of T shards), the training step Megatron-LM's way
// (baselines::BuildMegatronStep: every replica split T ways by Megatron's pairs, the repeated
// parameters' copies tied), with each op mapped to its copy (r T + s for shard s of replica r;
// shard 0 for what no split reaches) and to the group of the model op it computes or serves, so
// that a candidate's options place it as they place replicas (placer/action_space.h).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "graph/data_parallel.h"
#include "graph/grouping.h"
#include "graph/ir.h"
#include "placer/action_space.h"
#include "placer/baselines/megatron.h"
#include "placer/candidate_evaluator.h"

namespace placer::setup {

// The shapes searched by default: T = 2, 4, ... dividing `devices_per_host` (0: every device is
// one host) and the device count D, each over all D devices (D / T replicas of T shards; D one of
// `replica_counts`), as Megatron keeps its tensor-parallel groups inside a host, where the links
// are fast. Fewer copies are left to search.tensor_ways: a group of a D-copy candidate can
// already share devices between shards, and every further shape costs set-up time (a BERT-large
// split step takes seconds to build).
std::vector<search::TensorParallelShape> DefaultTensorParallelShapes(
    int num_devices, int devices_per_host, const std::vector<int>& replica_counts);

// The step of `shape` as the search places it and placement files name it: BuildMegatronStep
// over shape.replicas copies, T = shape.tensor_ways ways; `column_starts` as there.
baselines::MegatronStep BuildTensorParallelStep(
    const graph::ForwardBuilder& build_forward, int64_t batch, double learning_rate,
    const search::TensorParallelShape& shape,
    std::optional<std::vector<std::string>> column_starts = {});

// The most ops of a split step the search builds: the Megatron-style row's bound.
inline constexpr int64_t kMaxTensorParallelOps = 250'000;

// The split step of `shape` (BuildTensorParallelStep with `column_starts`, the model's at
// T = shape.tensor_ways), each forward op mapped to its copy and to the group of `base`'s op it
// computes or serves. Throws graph::GraphError when the batch does not split evenly over its
// replicas or an op of it has no group.
search::ReplicatedModel TensorParallelModel(const graph::Graph& base,
                                            const graph::Grouping& grouping,
                                            const graph::ForwardBuilder& build_forward,
                                            int64_t batch, double learning_rate,
                                            const search::TensorParallelShape& shape,
                                            const std::vector<std::string>& column_starts);

}  // namespace placer::setup
