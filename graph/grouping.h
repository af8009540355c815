// Groups of forward ops that the placer assigns to a device together. The policy sees groups, never
// ops; exported placements are per op. Backward and update ops follow their forward op anyway.
#pragma once

#include <string>
#include <vector>

#include "graph/ir.h"
#include "graph/placement.h"

namespace placer::graph {

struct Grouping {
  std::vector<int> group_of_op;            // per op id: its group, -1 for non-forward ops
  std::vector<std::vector<OpId>> members;  // per group, in topological order
  int num_groups() const { return static_cast<int>(members.size()); }
};

// Every forward op (with its parameters, gradient and update) is its own group; groups are
// numbered in topological order.
Grouping OpPerGroup(const Graph& graph);

// The op-level placement of one device index per group.
Placement ToPlacement(const Graph& graph, const Grouping& grouping,
                      const std::vector<int>& group_devices, std::vector<std::string> devices);

// Per-group inputs of the placement policy (features of the 2017/2018 papers: op type, output
// shape, cost, and where the group sits in the graph).
struct GroupFeatures {
  std::vector<std::string> type_names;  // vocabulary of op types, index = type id
  std::vector<int64_t> type_ids;        // per group: type of its heaviest op
  int feature_dim = 0;
  std::vector<float> values;  // num_groups x feature_dim, row-major
};
GroupFeatures ComputeGroupFeatures(const Graph& graph, const Grouping& grouping);

}  // namespace placer::graph
