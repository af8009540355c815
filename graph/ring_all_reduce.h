// The op schedule of a ring all-reduce, shared by the data-parallel gradient buckets
// (graph/training_step.cc) and the tensor-parallel sums (graph/tensor_parallel.cc): NCCL's
// bandwidth-optimal ring. Each member's value is cut into chunks; chunk j is summed hop by hop
// around the ring, ending on member j (reduce-scatter), then passed on hop by hop until every
// member holds it (all-gather); each member concatenates the summed chunks. Every member sends
// 2 (R - 1) chunks of about 1/R of the value, all to its successor.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "graph/ir.h"

namespace placer::graph {

// One op of the ring, for the caller to add with its own names, phase and device. Its attributes
// already carry kCollectiveHop (graph/training_step.h), and axis and sizes where they apply.
struct RingOp {
  size_t member = 0;  // the ring member whose device runs it
  std::string step;   // "split", "reduce<j>", "gather<j>" or "concat"
  std::string type;   // op_types::kSplit, kAddN, kIdentity or kConcat
  std::vector<TensorId> inputs;
  Attributes attrs;
};
// Adds `op` to the graph and returns its outputs (one per chunk for a split, else one).
using AddRingOp = std::function<std::vector<TensorId>(RingOp op)>;

// The ring all-reduce of `values` (one per member in ring order, all of one shape) along `axis`,
// in min(members, length of the axis) chunks. Returns each member's sum: the concatenation, or
// with one chunk the last op that touched it (the member's value itself when there is one member).
std::vector<TensorId> RingAllReduce(const Graph& graph, const std::vector<TensorId>& values,
                                    int axis, const AddRingOp& add);

}  // namespace placer::graph
