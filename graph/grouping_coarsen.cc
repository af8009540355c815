// How MakeGrouping makes groups: the forward ops as a compact DAG, the co-location merges, and
// coarsening by rounds of acyclic matchings (the proofs of acyclicity are beside each rule).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <queue>
#include <set>
#include <tuple>

#include "graph/grouping.h"
#include "graph/ops.h"

namespace placer::graph {

namespace {

size_t At(int i) { return static_cast<size_t>(i); }

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// The forward ops as a compact DAG over their positions in the graph's topological order: grouping
// never looks at backward or update ops except to charge their cost to their forward op.
struct ForwardDag {
  std::vector<OpId> ops;                     // forward ops in topological order; index = position
  std::vector<int> position;                 // per op id: index into `ops`, -1 for other ops
  std::vector<std::vector<int>> succ, pred;  // distinct forward neighbours, ascending
  std::vector<double> cost;      // per position: FLOPs of the op, its backward op and its updates
  std::vector<bool> reads_data;  // depends, directly or not, on minibatch data
  // A tensor of a forward op read by other forward ops: what crosses devices when they differ.
  struct Transfer {
    int producer = 0;
    double bytes = 0;
    std::vector<int> consumers;  // distinct positions
  };
  std::vector<Transfer> transfers;
  double total_cost = 0;
  int size() const { return static_cast<int>(ops.size()); }
};

ForwardDag BuildForwardDag(const Graph& graph) {
  ForwardDag dag;
  dag.position.assign(At(graph.num_ops()), -1);
  for (OpId id : graph.TopologicalOrder()) {
    if (graph.op(id).phase != Phase::kForward) continue;
    dag.position[At(id)] = dag.size();
    dag.ops.push_back(id);
  }
  const int n = dag.size();
  dag.succ.resize(At(n));
  dag.pred.resize(At(n));
  dag.cost.assign(At(n), 0.0);
  dag.reads_data.assign(At(n), false);
  double flops = 0;
  for (OpId id = 0; id < graph.num_ops(); ++id) {
    const Op& op = graph.op(id);
    const OpId anchor = op.phase == Phase::kForward ? id : op.forward_op;
    if (anchor == kNoOp || dag.position[At(anchor)] < 0) continue;
    const double f = OpFlops(graph, op);
    dag.cost[At(dag.position[At(anchor)])] += f;
    flops += f;
  }
  // Ops without FLOPs (reshapes, constants) still cost a launch and a schedule slot: each op also
  // weighs a tenth of the mean op, so that balance is not blind to them.
  const double overhead = n > 0 && flops > 0 ? 0.1 * flops / n : 1.0;
  for (double& c : dag.cost) {
    c += overhead;
    dag.total_cost += c;
  }
  std::vector<int> consumers;
  for (int i = 0; i < n; ++i) {
    const Op& op = graph.op(dag.ops[At(i)]);
    for (TensorId in : op.inputs) {
      const Tensor& t = graph.tensor(in);
      if (t.kind == TensorKind::kInput || t.kind == TensorKind::kLabel)
        dag.reads_data[At(i)] = true;
      if (t.producer != kNoOp && dag.position[At(t.producer)] >= 0 &&
          dag.reads_data[At(dag.position[At(t.producer)])]) {
        dag.reads_data[At(i)] = true;  // producers come first in topological order
      }
    }
    for (TensorId out : op.outputs) {
      consumers.clear();
      for (OpId c : graph.tensor(out).consumers) {
        if (dag.position[At(c)] >= 0) consumers.push_back(dag.position[At(c)]);
      }
      if (consumers.empty()) continue;
      std::sort(consumers.begin(), consumers.end());
      consumers.erase(std::unique(consumers.begin(), consumers.end()), consumers.end());
      for (int c : consumers) {
        dag.succ[At(i)].push_back(c);
        dag.pred[At(c)].push_back(i);
      }
      dag.transfers.push_back({i, static_cast<double>(graph.tensor(out).bytes()), consumers});
    }
  }
  for (int i = 0; i < n; ++i) {
    for (auto* list : {&dag.succ[At(i)], &dag.pred[At(i)]}) {
      std::sort(list->begin(), list->end());
      list->erase(std::unique(list->begin(), list->end()), list->end());
    }
  }
  return dag;
}

// The co-location merges (GroupingMethod::kColocate), as (u, v): u joins v's group. Every such u
// has v as its only forward consumer, so any subset of these merges leaves each group with a
// single exit (the op all its members lead to) that every member reaches inside the group; a
// cycle of groups would then be a cycle of ops. Any subset is therefore safe.
std::vector<std::pair<int, int>> ColocationMerges(const ForwardDag& dag) {
  const int n = dag.size();
  std::vector<bool> absorbed(At(n), false);
  std::vector<std::pair<int, int>> merges;
  for (int u = 0; u < n; ++u) {
    // Rule 2: weight preprocessing (no minibatch data upstream) with a single consumer.
    if (!dag.reads_data[At(u)] && dag.succ[At(u)].size() == 1) {
      absorbed[At(u)] = true;
      merges.emplace_back(u, dag.succ[At(u)][0]);
    }
  }
  for (int u = 0; u < n; ++u) {
    // Rule 3: u's only consumer v has u as its only producer, absorbed weight ops aside.
    if (absorbed[At(u)] || dag.succ[At(u)].size() != 1) continue;
    const int v = dag.succ[At(u)][0];
    int producers = 0;
    for (int p : dag.pred[At(v)]) producers += absorbed[At(p)] ? 0 : 1;
    if (producers == 1) merges.emplace_back(u, v);
  }
  return merges;
}

// Union-find over op positions, with the cost of each set at its root.
class Sets {
 public:
  explicit Sets(const std::vector<double>& cost)
      : parent_(cost.size()), cost_(cost), count_(cost.size()) {
    std::iota(parent_.begin(), parent_.end(), 0);
  }
  int Find(int x) {
    while (parent_[At(x)] != x) {
      parent_[At(x)] = parent_[At(parent_[At(x)])];
      x = parent_[At(x)];
    }
    return x;
  }
  double Cost(int root) const { return cost_[At(root)]; }
  size_t count() const { return count_; }
  void Union(int a, int b) {
    a = Find(a);
    b = Find(b);
    if (a == b) return;
    if (b < a) std::swap(a, b);  // the smaller position stays the root: deterministic
    parent_[At(b)] = a;
    cost_[At(a)] += cost_[At(b)];
    --count_;
  }
  // Dense labels 0..count-1, in order of each set's first position.
  std::vector<int> Labels() {
    std::vector<int> label(parent_.size(), -1), of_root(parent_.size(), -1);
    int next = 0;
    for (size_t x = 0; x < parent_.size(); ++x) {
      const int root = Find(static_cast<int>(x));
      if (of_root[At(root)] < 0) of_root[At(root)] = next++;
      label[x] = of_root[At(root)];
    }
    return label;
  }

 private:
  std::vector<int> parent_;
  std::vector<double> cost_;
  size_t count_;
};

// The group DAG of a labelling of the forward ops: adjacency both ways with the bytes each edge
// carries (a tensor counts once per consuming group), sorted heaviest first; a topological order
// (Kahn, smallest first op first, so deterministic and close to the graph's own order) and the
// depth of every group (longest path from a source).
struct Quotient {
  int n = 0;
  std::vector<double> cost;
  std::vector<int> first;  // smallest op position in the group
  struct Arc {
    int to;
    double bytes;
  };
  std::vector<std::vector<Arc>> out, in;
  std::vector<int> order, level;
};

Quotient BuildQuotient(const ForwardDag& dag, const std::vector<int>& label, int n) {
  Quotient q;
  q.n = n;
  q.cost.assign(At(n), 0.0);
  q.first.assign(At(n), std::numeric_limits<int>::max());
  for (int i = 0; i < dag.size(); ++i) {
    const int g = label[At(i)];
    q.cost[At(g)] += dag.cost[At(i)];
    q.first[At(g)] = std::min(q.first[At(g)], i);
  }
  struct Edge {
    int from, to;
    double bytes;
  };
  std::vector<Edge> edges;
  edges.reserve(dag.transfers.size() * 2);
  std::vector<int> groups;
  for (const ForwardDag::Transfer& t : dag.transfers) {
    const int from = label[At(t.producer)];
    groups.clear();
    for (int c : t.consumers) {
      if (label[At(c)] != from) groups.push_back(label[At(c)]);
    }
    std::sort(groups.begin(), groups.end());
    groups.erase(std::unique(groups.begin(), groups.end()), groups.end());
    for (int to : groups) edges.push_back({from, to, t.bytes});
  }
  std::sort(edges.begin(), edges.end(), [](const Edge& a, const Edge& b) {
    return std::tie(a.from, a.to) < std::tie(b.from, b.to);
  });
  q.out.resize(At(n));
  q.in.resize(At(n));
  for (size_t k = 0; k < edges.size();) {
    Edge merged = edges[k];
    for (++k; k < edges.size() && edges[k].from == merged.from && edges[k].to == merged.to; ++k) {
      merged.bytes += edges[k].bytes;
    }
    q.out[At(merged.from)].push_back({merged.to, merged.bytes});
    q.in[At(merged.to)].push_back({merged.from, merged.bytes});
  }
  auto heaviest_first = [&](const Quotient::Arc& a, const Quotient::Arc& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : q.first[At(a.to)] < q.first[At(b.to)];
  };
  for (int g = 0; g < n; ++g) {
    std::sort(q.out[At(g)].begin(), q.out[At(g)].end(), heaviest_first);
    std::sort(q.in[At(g)].begin(), q.in[At(g)].end(), heaviest_first);
  }
  std::vector<int> pending(At(n));
  using Entry = std::pair<int, int>;  // (first op position, group)
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> ready;
  for (int g = 0; g < n; ++g) {
    pending[At(g)] = static_cast<int>(q.in[At(g)].size());
    if (pending[At(g)] == 0) ready.emplace(q.first[At(g)], g);
  }
  q.level.assign(At(n), 0);
  q.order.reserve(At(n));
  while (!ready.empty()) {
    const int g = ready.top().second;
    ready.pop();
    q.order.push_back(g);
    for (const Quotient::Arc& arc : q.out[At(g)]) {
      q.level[At(arc.to)] = std::max(q.level[At(arc.to)], q.level[At(g)] + 1);
      if (--pending[At(arc.to)] == 0) ready.emplace(q.first[At(arc.to)], arc.to);
    }
  }
  if (q.order.size() != At(n)) {
    // Every merge below is proven safe; reaching this is a bug in this file, not a user error.
    throw GraphError("internal error: grouping produced a cyclic group graph");
  }
  return q;
}

// One round of coarsening: a matching of the groups of `q`, every pair merged at once; returns how
// many pairs (at most `wanted`). In a round, groups pair up only as:
//  (a) an edge u -> v with level(v) = level(u) + 1 where u is v's only predecessor one level up
//      ("type 1") or v is u's only successor one level down ("type 2"), or
//  (b) two groups on the same level (never connected: every edge climbs at least one level).
// Why merging all pairs at once stays acyclic: give each merged cluster C the key
// (m(C), r(C)), m = its lowest level, r = 1 for a pair of kind (a) that is type 2 only, else 0.
// Clusters span at most one level, so an edge x -> y between clusters A and B has
// m(B) >= level(y) - 1 >= level(x) >= m(A). With equality, y is the upper op of a pair B and x, an
// op one level below y outside B, is a second predecessor of y: B is not type 1, r(B) = 1; and if
// A were a type-2-only pair, x (its lower op) would have two successors one level down. So
// r(A) = 0 < r(B) and keys strictly increase along every edge: no cycle.
int MatchRound(const Quotient& q, double cap, int wanted, const std::vector<int>& color,
               std::vector<int>& match) {
  const int n = q.n;
  match.assign(At(n), -1);
  std::vector<int> preds_one_up(At(n), 0), succs_one_down(At(n), 0);
  for (int u = 0; u < n; ++u) {
    for (const Quotient::Arc& arc : q.out[At(u)]) {
      if (q.level[At(arc.to)] == q.level[At(u)] + 1) {
        ++succs_one_down[At(u)];
        ++preds_one_up[At(arc.to)];
      }
    }
  }
  std::vector<int> visit(At(n));
  std::iota(visit.begin(), visit.end(), 0);
  // Lightest groups first, as METIS visits light vertices first: they are the ones to absorb.
  std::sort(visit.begin(), visit.end(), [&](int a, int b) {
    return q.cost[At(a)] != q.cost[At(b)] ? q.cost[At(a)] < q.cost[At(b)]
                                          : q.first[At(a)] < q.first[At(b)];
  });
  // Where each group's adjacency lists stop holding matched groups: siblings are searched from
  // there, so that a hub with thousands of neighbours is scanned once per round, not once per
  // neighbour.
  std::vector<size_t> out_cursor(At(n), 0), in_cursor(At(n), 0);
  constexpr int kHubs = 4;          // heaviest neighbours whose other neighbours are siblings
  constexpr int kSiblingScan = 16;  // siblings looked at per hub
  int merges = 0;
  for (int u : visit) {
    if (merges == wanted) break;
    if (match[At(u)] >= 0) continue;
    int best = -1;
    std::tuple<double, int, double, int> best_rank;  // (-bytes saved, kind, cost, first)
    auto consider = [&](int v, double bytes, int kind) {
      if (v == u || match[At(v)] >= 0 || q.cost[At(u)] + q.cost[At(v)] > cap) return;
      if (!color.empty() && color[At(u)] != color[At(v)]) return;
      auto rank = std::make_tuple(-bytes, kind, q.cost[At(v)], q.first[At(v)]);
      if (best < 0 || rank < best_rank) {
        best = v;
        best_rank = rank;
      }
    };
    const int level = q.level[At(u)];
    for (const Quotient::Arc& arc : q.out[At(u)]) {
      if (q.level[At(arc.to)] == level + 1 &&
          (preds_one_up[At(arc.to)] == 1 || succs_one_down[At(u)] == 1)) {
        consider(arc.to, arc.bytes, 0);
      }
    }
    for (const Quotient::Arc& arc : q.in[At(u)]) {
      if (q.level[At(arc.to)] + 1 == level &&
          (preds_one_up[At(u)] == 1 || succs_one_down[At(arc.to)] == 1)) {
        consider(arc.to, arc.bytes, 0);
      }
    }
    // Siblings through a common producer share its tensor: merged, it crosses devices once.
    // Through a common consumer nothing is saved but a group; ranked last.
    auto siblings = [&](const std::vector<Quotient::Arc>& hubs,
                        const std::vector<std::vector<Quotient::Arc>>& lists,
                        std::vector<size_t>& cursor, bool shared) {
      for (size_t h = 0; h < hubs.size() && h < At(kHubs); ++h) {
        const int hub = hubs[h].to;
        const std::vector<Quotient::Arc>& list = lists[At(hub)];
        size_t& k = cursor[At(hub)];
        while (k < list.size() && match[At(list[k].to)] >= 0) ++k;
        for (size_t j = k; j < list.size() && j < k + At(kSiblingScan); ++j) {
          if (q.level[At(list[j].to)] == level) {
            consider(list[j].to, shared ? std::min(hubs[h].bytes, list[j].bytes) : 0.0,
                     shared ? 1 : 2);
          }
        }
      }
    };
    siblings(q.in[At(u)], q.out, out_cursor, true);
    siblings(q.out[At(u)], q.in, in_cursor, false);
    if (best >= 0) {
      match[At(u)] = best;
      match[At(best)] = u;
      ++merges;
    }
  }
  return merges;
}

// The fallback when no pair of kind (a) or (b) is left (groups of unrelated components at
// different depths): merge groups adjacent in the topological order, cheapest pairs first. Any
// set of disjoint adjacent pairs is safe: clusters are intervals of a topological order, and every
// edge runs from an earlier interval to a later one.
int MatchAdjacentInOrder(const Quotient& q, int wanted, const std::vector<int>& color,
                         std::vector<int>& match) {
  match.assign(At(q.n), -1);
  std::vector<int> candidates(q.order.empty() ? 0 : q.order.size() - 1);
  std::iota(candidates.begin(), candidates.end(), 0);
  auto pair_cost = [&](int k) {
    return q.cost[At(q.order[At(k)])] + q.cost[At(q.order[At(k + 1)])];
  };
  std::sort(candidates.begin(), candidates.end(), [&](int a, int b) {
    return pair_cost(a) != pair_cost(b) ? pair_cost(a) < pair_cost(b) : a < b;
  });
  int merges = 0;
  for (int k : candidates) {
    if (merges == wanted) break;
    const int a = q.order[At(k)], b = q.order[At(k + 1)];
    if (match[At(a)] >= 0 || match[At(b)] >= 0) continue;
    if (!color.empty() && color[At(a)] != color[At(b)]) continue;
    match[At(a)] = b;
    match[At(b)] = a;
    ++merges;
  }
  return merges;
}

// Relabels after a matching: a pair becomes one group.
int Contract(const std::vector<int>& match, std::vector<int>& label) {
  std::vector<int> renamed(match.size(), -1);
  int next = 0;
  for (size_t g = 0; g < match.size(); ++g) {
    if (renamed[g] >= 0) continue;
    renamed[g] = next;
    if (match[g] >= 0) renamed[At(match[g])] = next;
    ++next;
  }
  for (int& l : label) l = renamed[At(l)];
  return next;
}

// The class of every group (its members', all alike while classes are respected).
std::vector<int> GroupClasses(const std::vector<int>& op_class, const std::vector<int>& label,
                              int groups) {
  std::vector<int> classes(At(groups), -1);
  for (size_t i = 0; i < label.size(); ++i) classes[At(label[i])] = op_class[i];
  return classes;
}

// `op_class` per position (empty: no classes); see GroupingOptions::keep_apart.
std::vector<int> Coarsen(const ForwardDag& dag, int max_groups, std::vector<int> op_class) {
  const int n = dag.size();
  std::vector<int> label(At(n));
  std::iota(label.begin(), label.end(), 0);
  if (n <= max_groups) return label;
  // Groups are kept under 1.5x the mean group cost while possible (METIS's coarsening bound), so
  // that no group becomes too heavy for one device before the placer has a say.
  double cap = 1.5 * dag.total_cost / max_groups;
  Sets sets(dag.cost);
  std::vector<std::pair<int, int>> chains = ColocationMerges(dag);
  std::stable_sort(chains.begin(), chains.end(), [&](const auto& a, const auto& b) {
    return dag.cost[At(a.first)] + dag.cost[At(a.second)] <
           dag.cost[At(b.first)] + dag.cost[At(b.second)];
  });
  for (const auto& [u, v] : chains) {
    if (sets.count() <= At(max_groups)) break;
    if (!op_class.empty() && op_class[At(u)] != op_class[At(v)]) continue;
    const int a = sets.Find(u), b = sets.Find(v);
    if (a != b && sets.Cost(a) + sets.Cost(b) <= cap) sets.Union(a, b);
  }
  label = sets.Labels();
  int groups = static_cast<int>(sets.count());
  std::vector<int> match;
  bool adjacent_next = false;
  while (groups > max_groups) {
    const Quotient q = BuildQuotient(dag, label, groups);
    const int wanted = groups - max_groups;
    const std::vector<int> classes =
        op_class.empty() ? std::vector<int>() : GroupClasses(op_class, label, groups);
    if (adjacent_next) {
      MatchAdjacentInOrder(q, wanted, classes, match);
      adjacent_next = false;
      groups = Contract(match, label);
      continue;
    }
    const int merges = MatchRound(q, cap, wanted, classes, match);
    if (merges * 8 < wanted) {
      if (cap < kInfinity) {
        // Too few merges fit under the cost bound: loosen it (for the next rounds too).
        cap = cap * 2 > dag.total_cost ? kInfinity : cap * 2;
        if (merges == 0) continue;
      } else if (merges == 0) {
        if (MatchAdjacentInOrder(q, wanted, classes, match) == 0) {
          // Nothing of one class is left to merge: classes mix from now on.
          op_class.clear();
          continue;
        }
      } else if (wanted > 64) {
        // Rounds this unproductive could number in the thousands on a large graph; one round of
        // the fallback (which pairs up about half the groups) keeps the count logarithmic.
        adjacent_next = true;
      }
    }
    groups = Contract(match, label);
  }
  return label;
}

// Groups numbered in a topological order of their DAG, members in the graph's topological order.
Grouping Finish(const Graph& graph, const ForwardDag& dag, const std::vector<int>& label,
                int groups) {
  const Quotient q = BuildQuotient(dag, label, groups);
  std::vector<int> number(At(groups));
  for (size_t k = 0; k < q.order.size(); ++k) number[At(q.order[k])] = static_cast<int>(k);
  Grouping grouping;
  grouping.group_of_op.assign(At(graph.num_ops()), -1);
  grouping.members.resize(At(groups));
  for (int i = 0; i < dag.size(); ++i) {
    const int g = number[At(label[At(i)])];
    grouping.group_of_op[At(dag.ops[At(i)])] = g;
    grouping.members[At(g)].push_back(dag.ops[At(i)]);
  }
  return grouping;
}

}  // namespace

Grouping MakeGrouping(const Graph& graph, const GroupingOptions& options) {
  if (options.max_groups < 1) {
    throw GraphError(fmt::format("max_groups must be >= 1, got {}", options.max_groups));
  }
  if (options.method == GroupingMethod::kOpPerGroup) return OpPerGroup(graph);
  const ForwardDag dag = BuildForwardDag(graph);
  std::vector<int> label;
  int groups = 0;
  if (options.method == GroupingMethod::kColocate) {
    Sets sets(dag.cost);
    for (const auto& [u, v] : ColocationMerges(dag)) sets.Union(u, v);
    label = sets.Labels();
    groups = static_cast<int>(sets.count());
  } else {
    std::vector<int> op_class;
    if (!options.keep_apart.empty()) {
      if (options.keep_apart.size() != At(graph.num_ops())) {
        throw GraphError("keep_apart needs one class per op");
      }
      for (OpId id : dag.ops) op_class.push_back(options.keep_apart[At(id)]);
    }
    label = Coarsen(dag, options.max_groups, std::move(op_class));
    groups = label.empty() ? 0 : *std::max_element(label.begin(), label.end()) + 1;
  }
  return Finish(graph, dag, label, groups);
}

}  // namespace placer::graph
