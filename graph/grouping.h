// Groups of forward ops that the placer assigns to a device together. The policy sees groups, never
// ops; exported placements are per op. Backward and update ops follow their forward op anyway.
//
// Every grouping below keeps the graph of groups (the quotient DAG: an edge g -> h when an op of h
// reads a tensor an op of g produced) acyclic, so that any device per group is a placement the
// executor can run without a cross-device deadlock, and numbers groups in a topological order of
// that DAG.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "graph/ir.h"
#include "graph/placement.h"

namespace placer::graph {

struct Grouping {
  std::vector<int> group_of_op;            // per op id: its group, -1 for non-forward ops
  std::vector<std::vector<OpId>> members;  // per group, in topological order
  int num_groups() const { return static_cast<int>(members.size()); }
  bool operator==(const Grouping&) const = default;
};

// Every forward op (with its parameters, gradient and update) is its own group; groups are
// numbered in topological order.
Grouping OpPerGroup(const Graph& graph);

enum class GroupingMethod {
  // One group per forward op: OpPerGroup.
  kOpPerGroup,
  // The co-location rules of the 2017 paper (ColocRL), on the forward DAG whose edges are
  // "op v reads an output of forward op u" (parallel edges collapsed):
  //  1. an op, its parameters, its backward op and its updates are one unit (always so here);
  //  2. an op that does not depend on minibatch data (it computes from parameters and constants
  //     only: a Constant, a weight transpose) and whose outputs feed exactly one forward op joins
  //     that op;
  //  3. a single-consumer chain is merged: u joins v when v is u's only forward consumer and u is
  //     v's only forward producer (not counting the ops absorbed by rule 2).
  // Every merge joins an op to its only consumer, so each group has one exit (its last op, which
  // all members reach inside the group) and the groups stay acyclic. The number of groups is not
  // bounded: max_groups is ignored.
  kColocate,
  // Coarsening by cost (multilevel, as METIS coarsens), to at most max_groups groups. Nothing is
  // merged when the graph has no more forward ops than max_groups. Otherwise the co-location merges
  // above are applied first (cheapest first, while groups remain above max_groups: a chain holds no
  // parallelism to lose), then rounds of heavy-edge matching on the group DAG: the lightest groups
  // first, each merged with the unmatched neighbour it exchanges the most bytes with, or with a
  // group at the same depth that reads the same tensor. Merged groups stay below 1.5x the mean
  // group cost while possible. See grouping.cc for why every round keeps the DAG acyclic.
  kCoarsen,
  // Not there yet: a grouper learned jointly with the placer (the 2018 hierarchical planner)
  // would be another method behind MakeGrouping.
};
const char* ToString(GroupingMethod method);  // "op", "colocate", "coarsen" (the config values)
std::optional<GroupingMethod> ParseGroupingMethod(std::string_view name);

struct GroupingOptions {
  GroupingMethod method = GroupingMethod::kCoarsen;
  int max_groups = 256;  // kCoarsen only; >= 1. The 2018 hierarchical planner used 256.
  // kCoarsen only: per op id, a class (e.g. the device of a hand-crafted placement; -1 for none).
  // Coarsening merges only ops of one class for as long as that still reduces the group count,
  // so that the known placement stays expressible over the groups and the search can start from
  // it; only then, if groups are still too many, classes mix.
  std::vector<int> keep_apart;
};

// Per op id, a class for GroupingOptions::keep_apart: forward ops whose names share their first
// `depth` path components ("enc/l2" of "enc/l2/t7/gate_o/act", "layer1/layer1.0" of ONNX's
// "/layer1/layer1.0/conv1/Conv") share a class, so that coarsening merges within a layer, a
// block or a branch of the model before it mixes them. -1 for other ops.
std::vector<int> NameClasses(const Graph& graph, int depth);
// Classes that separate what `a` or `b` separates (a class per distinct pair; -1 stays -1 only
// where both are -1). Either may be empty (then the other is returned).
std::vector<int> CombineClasses(const std::vector<int>& a, const std::vector<int>& b);

// The one entry point for every grouping method. Deterministic: the same graph and options give
// the same grouping. Throws GraphError when max_groups < 1.
Grouping MakeGrouping(const Graph& graph, const GroupingOptions& options);

// Checks that `grouping` is a grouping of `graph`: every forward op in exactly one group, no other
// op in any, members in topological order, groups numbered in a topological order of an acyclic
// group DAG. Throws GraphError saying what is wrong (tests and callers with hand-made groupings).
void CheckGrouping(const Graph& graph, const Grouping& grouping);

// A short fingerprint of the grouping (hex), stored in search checkpoints so that a resume under
// another grouping is refused instead of mapping old decisions onto different groups.
std::string GroupingFingerprint(const Grouping& grouping);

// The op-level placement of one device index per group.
Placement ToPlacement(const Graph& graph, const Grouping& grouping,
                      const std::vector<int>& group_devices, std::vector<std::string> devices);

// The group-level view of an op-level placement (the inverse of ToPlacement where groups are
// placed whole): each group goes to the device that runs most of its forward FLOPs (ties and
// FLOP-free groups: the device of its first op). Used to warm-start the search from a
// hand-crafted placement.
std::vector<int> GroupDevices(const Graph& graph, const Grouping& grouping,
                              const Placement& placement);

}  // namespace placer::graph
