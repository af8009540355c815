// Derives the training step from a forward graph that ends in a loss: one backward op per forward
// op on the path to the loss (it belongs with that forward op) and one SGD update per parameter.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "graph/ir.h"

namespace placer::graph {

// Appends backward and update ops to `graph`, whose forward ops must end in a SoftmaxCrossEntropy
// loss (several losses are summed). Gradient tensors are named "<tensor>.grad@<consumer op>".
// Throws GraphError when there is no loss or a parameter that does not reach the loss.
// `tied_with(p)`, when given, lists parameters whose gradients are added to p's before its update
// (data-parallel replicas of one parameter). Each replica's contributions are first summed on its
// own device ("<param>.grad_sum", an AddN), then the replicas' sums are all-reduced as PyTorch
// DDP does: packed into buckets of about 25 MiB (last layers first), each bucket all-reduced by a
// ring of backward-phase ops on the replicas' devices ("<param>.allreduce/...": split into chunks,
// reduce-scatter and all-gather hop by hop, concatenate), then unpacked; so executing or
// simulating the step moves exactly the bytes of a bucketed ring all-reduce.
// Every op of bucket b's ring carries the attributes kAllReduceBucket = b and kAllReduceMember =
// its replica's index in the ring: the executor runs a bucket whose replicas span processes as
// one c10d allreduce instead (runtime/bucket_allreduce.h), the simulator prices the ring's hops.
struct AllReduceOptions {
  // PyTorch DDP's default bucket size: all-reducing every small gradient (a bias, a norm's
  // scale) on its own would pay a ring's 2 (R - 1) link latencies per parameter.
  int64_t bucket_bytes = int64_t{25} << 20;
};
// The suffix of a replica's summed-gradient op ("<param>.grad_sum").
inline constexpr std::string_view kReplicaGradientSum = ".grad_sum";
inline constexpr std::string_view kAllReduceBucket = "allreduce_bucket";
inline constexpr std::string_view kAllReduceMember = "allreduce_member";
// Set (to 1) on every op of a ring collective (the gradient all-reduce's, a tensor-parallel
// all-reduce's): its inputs from other devices are the ring's hops, which a collective library
// moves inside one kernel, so the simulator prices them at its step latency rather than as
// copies (sim::CostModel::CollectiveHopSeconds). The backward ops of such ops are hops too.
inline constexpr std::string_view kCollectiveHop = "collective_hop";
// Whether `op` is such an op, or the backward op of one.
bool IsCollectiveHop(const Graph& graph, OpId op);

void AppendBackwardAndUpdate(
    Graph& graph, double learning_rate,
    const std::function<std::vector<TensorId>(TensorId)>& tied_with = nullptr,
    const AllReduceOptions& all_reduce = {});

// The op that owns a parameter: its first forward consumer. The parameter lives, and is updated,
// on that op's device.
OpId OwnerOf(const Graph& graph, TensorId parameter);

}  // namespace placer::graph
