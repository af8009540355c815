// Data parallelism as a graph, as in the d2l multi-GPU chapter: one replica of the model per
// device, each on its shard of the minibatch; every replica's update adds up all replicas'
// gradients (an all-reduce, as graph edges), so all replicas take the same SGD step. The executor
// then runs it like any other placed graph: one code path for every placement.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "graph/ir.h"
#include "graph/placement.h"
#include "graph/step_names.h"
#include "graph/training_step.h"

namespace placer::graph {

// Builds the forward graph (forward ops and loss, no training step) for a shard of `batch` rows
// whose loss is normalised by `normalizer` rows.
using ForwardBuilder = std::function<Graph(int64_t batch, int64_t normalizer)>;

struct DataParallelGraph {
  Graph graph;          // replica r's tensors and ops are prefixed "r<r>/"
  Placement placement;  // replica r on device r
  std::vector<int64_t> shard_sizes;
};

// Splits `batch` rows proportionally to `weights` (even when all equal); every shard gets at
// least one row. Throws GraphError when there are more devices than rows.
std::vector<int64_t> SplitBatch(int64_t batch, const std::vector<double>& weights);

// Parameters of one replica that are copies of one another (tensor parallelism's copies of a
// parameter on every shard, graph/tensor_parallel.h): groups of the replica's tensor ids.
using TiedParameters = std::vector<std::vector<TensorId>>;

// `ties_within`, when given, names the copies in a replica's forward graph: each group's copies in
// every replica are then tied together (one all-reduce of their gradients over all of them).
DataParallelGraph BuildDataParallel(
    const ForwardBuilder& build_forward, int64_t global_batch,
    const std::vector<std::string>& devices, const std::vector<double>& weights,
    double learning_rate, const AllReduceOptions& all_reduce = {},
    const std::function<TiedParameters(const Graph& replica)>& ties_within = nullptr);

// Where the forward ops of a replicated graph come from: op "r<r>/<name>" (or "r<r>/m<k>/<name>",
// a replicated pipeline's) is replica r's copy of the forward op <name> of `base` (the same model,
// unreplicated). -1 for ops of other phases.
struct ReplicaMap {
  std::vector<int> replica_of_op;  // per op of the replicated graph
  std::vector<OpId> base_op;       // per op of the replicated graph: an op id of `base`
};
// Throws GraphError naming a forward op whose name is not "r<r>/[m<k>/]<op of base>".
ReplicaMap MapReplicas(const Graph& replicated, const Graph& base);

}  // namespace placer::graph
