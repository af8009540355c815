// What the placement policy sees of each group: features of the 2017/2018 papers (op type, output
// shape, cost, and where the group sits in the graph) and the group DAG with its traffic.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/grouping.h"
#include "graph/ir.h"

namespace placer::graph {

// Per-group inputs of the placement policy (features of the 2017/2018 papers: op type, output
// shape, cost, and where the group sits in the graph).
struct GroupEdge {
  int from = 0;       // the producing group
  int to = 0;         // a group that reads it (from < to: groups are topologically numbered)
  int64_t bytes = 0;  // forward values crossing from `from` to `to` per step, each tensor once
  int tensors = 0;    // how many tensors those bytes are (each crossing is a copy of its own)
};
struct GroupFeatures {
  std::vector<std::string> type_names;  // vocabulary of op types, index = type id
  std::vector<int64_t> type_ids;        // per group: type of its heaviest op
  int feature_dim = 0;
  std::vector<float> values;  // num_groups x feature_dim, row-major
  // The group DAG with its traffic, by (from, to): where a group's producers and consumers are
  // placed is an input of the policy that depends on the placement being decoded.
  std::vector<GroupEdge> edges;
  // Per group, raw: FLOPs of its forward, backward and update ops, bytes its forward ops write,
  // and bytes of the parameters they read (what edit features estimate loads and traffic from).
  std::vector<double> flops, output_bytes, param_bytes;
  // Per group: how many forward ops, and backward and update ops, it has (every op launch costs
  // a device its overhead whatever its size).
  std::vector<int> forward_ops, backward_ops;
};
GroupFeatures ComputeGroupFeatures(const Graph& graph, const Grouping& grouping);

}  // namespace placer::graph
