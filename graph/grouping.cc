#include "graph/grouping.h"

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

#include "graph/ops.h"

namespace placer::graph {

Grouping OpPerGroup(const Graph& graph) {
  Grouping grouping;
  grouping.group_of_op.assign(static_cast<size_t>(graph.num_ops()), -1);
  for (OpId id : graph.TopologicalOrder()) {
    if (graph.op(id).phase != Phase::kForward) continue;
    grouping.group_of_op[static_cast<size_t>(id)] = grouping.num_groups();
    grouping.members.push_back({id});
  }
  return grouping;
}

const char* ToString(GroupingMethod method) {
  switch (method) {
    case GroupingMethod::kOpPerGroup:
      return "op";
    case GroupingMethod::kColocate:
      return "colocate";
    case GroupingMethod::kCoarsen:
      return "coarsen";
  }
  return "?";
}

std::optional<GroupingMethod> ParseGroupingMethod(std::string_view name) {
  for (GroupingMethod method :
       {GroupingMethod::kOpPerGroup, GroupingMethod::kColocate, GroupingMethod::kCoarsen}) {
    if (name == ToString(method)) return method;
  }
  return std::nullopt;
}

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

std::vector<int> NameClasses(const Graph& graph, int depth) {
  std::vector<int> classes(At(graph.num_ops()), -1);
  std::map<std::string, int> index;
  for (OpId id : graph.OpsInPhase(Phase::kForward)) {
    const std::string& name = graph.op(id).name;
    std::string prefix;
    int components = 0;
    size_t begin = 0;
    while (components < depth && begin <= name.size()) {
      size_t end = name.find('/', begin);
      if (end == std::string::npos) end = name.size();
      if (end > begin) {
        prefix += "/" + name.substr(begin, end - begin);
        ++components;
      }
      begin = end + 1;
    }
    classes[At(id)] = index.emplace(prefix, static_cast<int>(index.size())).first->second;
  }
  return classes;
}

std::vector<int> CombineClasses(const std::vector<int>& a, const std::vector<int>& b) {
  if (a.empty()) return b;
  if (b.empty()) return a;
  if (a.size() != b.size()) throw GraphError("combined classes need one class per op each");
  std::vector<int> combined(a.size(), -1);
  std::map<std::pair<int, int>, int> index;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == -1 && b[i] == -1) continue;
    combined[i] =
        index.emplace(std::pair(a[i], b[i]), static_cast<int>(index.size())).first->second;
  }
  return combined;
}

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

void CheckGrouping(const Graph& graph, const Grouping& grouping) {
  if (grouping.group_of_op.size() != At(graph.num_ops())) {
    throw GraphError(fmt::format("the grouping covers {} ops, the graph has {}",
                                 grouping.group_of_op.size(), graph.num_ops()));
  }
  const std::vector<OpId> order = graph.TopologicalOrder();
  std::vector<int> position(At(graph.num_ops()));
  for (size_t k = 0; k < order.size(); ++k) position[At(order[k])] = static_cast<int>(k);
  std::vector<int> seen(At(graph.num_ops()), 0);
  for (int g = 0; g < grouping.num_groups(); ++g) {
    const std::vector<OpId>& members = grouping.members[At(g)];
    if (members.empty()) throw GraphError(fmt::format("group {} is empty", g));
    for (size_t k = 0; k < members.size(); ++k) {
      const OpId id = members[k];
      if (id < 0 || id >= graph.num_ops()) {
        throw GraphError(fmt::format("group {} lists op id {}, not in the graph", g, id));
      }
      if (graph.op(id).phase != Phase::kForward) {
        throw GraphError(fmt::format("group {} lists {} op '{}'; only forward ops are grouped", g,
                                     ToString(graph.op(id).phase), graph.op(id).name));
      }
      if (grouping.group_of_op[At(id)] != g || ++seen[At(id)] != 1) {
        throw GraphError(fmt::format("op '{}' is listed in group {} but belongs to group {}",
                                     graph.op(id).name, g, grouping.group_of_op[At(id)]));
      }
      if (k > 0 && position[At(members[k - 1])] > position[At(id)]) {
        throw GraphError(fmt::format("group {}: members are not in topological order at '{}'", g,
                                     graph.op(id).name));
      }
    }
  }
  for (OpId id = 0; id < graph.num_ops(); ++id) {
    const Op& op = graph.op(id);
    const bool forward = op.phase == Phase::kForward;
    if (forward && seen[At(id)] != 1) {
      throw GraphError(fmt::format("forward op '{}' is in no group", op.name));
    }
    if (!forward && grouping.group_of_op[At(id)] != -1) {
      throw GraphError(fmt::format("{} op '{}' has a group; it follows its forward op",
                                   ToString(op.phase), op.name));
    }
    if (!forward) continue;
    const int from = grouping.group_of_op[At(id)];
    for (TensorId out : op.outputs) {
      for (OpId consumer : graph.tensor(out).consumers) {
        const int to = grouping.group_of_op[At(consumer)];
        // Numbered in topological order: every edge between groups climbs, so no cycle.
        if (to >= 0 && to < from) {
          throw GraphError(fmt::format(
              "op '{}' (group {}) feeds op '{}' (group {}): groups are not numbered in a "
              "topological order of an acyclic group graph",
              op.name, from, graph.op(consumer).name, to));
        }
      }
    }
  }
}

std::string GroupingFingerprint(const Grouping& grouping) {
  // FNV-1a, 64 bits, over the group of every op: stable across platforms and runs.
  uint64_t hash = 14695981039346656037ull;
  auto mix = [&](int64_t value) {
    for (int byte = 0; byte < 8; ++byte) {
      hash ^= static_cast<uint64_t>(value >> (8 * byte)) & 0xff;
      hash *= 1099511628211ull;
    }
  };
  mix(grouping.num_groups());
  for (int g : grouping.group_of_op) mix(g);
  return fmt::format("{:016x}", hash);
}

std::vector<int> GroupDevices(const Graph& graph, const Grouping& grouping,
                              const Placement& placement) {
  std::vector<int> devices;
  devices.reserve(grouping.members.size());
  for (const std::vector<OpId>& members : grouping.members) {
    std::vector<double> flops(placement.devices.size(), 0.0);
    for (OpId id : members) {
      const int device = placement.device_of_op.at(static_cast<size_t>(id));
      if (device < 0 || static_cast<size_t>(device) >= flops.size()) {
        throw GraphError(fmt::format("op '{}' is not placed", graph.op(id).name));
      }
      flops[static_cast<size_t>(device)] += OpFlops(graph, graph.op(id));
    }
    int best = placement.device_of_op.at(static_cast<size_t>(members.front()));
    for (size_t d = 0; d < flops.size(); ++d) {
      if (flops[d] > flops[static_cast<size_t>(best)]) best = static_cast<int>(d);
    }
    devices.push_back(best);
  }
  return devices;
}

Placement ToPlacement(const Graph& graph, const Grouping& grouping,
                      const std::vector<int>& group_devices, std::vector<std::string> devices) {
  if (group_devices.size() != static_cast<size_t>(grouping.num_groups())) {
    throw GraphError("one device per group is needed");
  }
  Placement placement{std::move(devices),
                      std::vector<int>(static_cast<size_t>(graph.num_ops()), -1)};
  for (int g = 0; g < grouping.num_groups(); ++g) {
    for (OpId id : grouping.members[static_cast<size_t>(g)]) {
      placement.device_of_op[static_cast<size_t>(id)] = group_devices[static_cast<size_t>(g)];
    }
  }
  return placement;
}

namespace {

// log2(1 + x) / scale keeps features of very different magnitudes near [0, 1].
float Log(double x, double scale) { return static_cast<float>(std::log2(1.0 + x) / scale); }

constexpr int kShapeDims = 4;
constexpr int kNeighbours = 6;  // in- and out-neighbours listed, as in the hierarchical planner

}  // namespace

GroupFeatures ComputeGroupFeatures(const Graph& graph, const Grouping& grouping) {
  GroupFeatures f;
  const int groups = grouping.num_groups();
  std::map<std::string, int64_t> vocabulary;
  for (const std::string& type : KnownOpTypes()) {
    vocabulary.emplace(type, static_cast<int64_t>(f.type_names.size()));
    f.type_names.push_back(type);
  }
  // Backward and update costs belong to the group of their forward op.
  std::vector<double> flops(static_cast<size_t>(groups), 0), bytes(static_cast<size_t>(groups), 0),
      param_bytes(static_cast<size_t>(groups), 0);
  double total_flops = 0;
  for (OpId id = 0; id < graph.num_ops(); ++id) {
    const Op& op = graph.op(id);
    OpId anchor = op.phase == Phase::kForward ? id : op.forward_op;
    int g = grouping.group_of_op[static_cast<size_t>(anchor)];
    double op_flops = OpFlops(graph, op);
    flops[static_cast<size_t>(g)] += op_flops;
    total_flops += op_flops;
    if (op.phase == Phase::kForward) {
      bytes[static_cast<size_t>(g)] += static_cast<double>(OpOutputBytes(graph, op));
      for (TensorId in : op.inputs) {
        if (graph.tensor(in).kind == TensorKind::kParameter) {
          param_bytes[static_cast<size_t>(g)] += static_cast<double>(graph.tensor(in).bytes());
        }
      }
    }
  }
  // Group-level neighbours through forward tensors.
  std::vector<std::set<int>> in(static_cast<size_t>(groups)), out(static_cast<size_t>(groups));
  for (int g = 0; g < groups; ++g) {
    for (OpId id : grouping.members[static_cast<size_t>(g)]) {
      for (TensorId t : graph.op(id).outputs) {
        for (OpId consumer : graph.tensor(t).consumers) {
          int h = grouping.group_of_op[static_cast<size_t>(consumer)];
          if (h >= 0 && h != g) {
            out[static_cast<size_t>(g)].insert(h);
            in[static_cast<size_t>(h)].insert(g);
          }
        }
      }
    }
  }
  f.feature_dim = kShapeDims + 6 + 2 * kNeighbours;
  f.values.assign(static_cast<size_t>(groups * f.feature_dim), 0.0f);
  const double scale = std::max(1, groups);
  for (int g = 0; g < groups; ++g) {
    const auto& members = grouping.members[static_cast<size_t>(g)];
    OpId heaviest = *std::max_element(members.begin(), members.end(), [&](OpId a, OpId b) {
      return OpFlops(graph, graph.op(a)) < OpFlops(graph, graph.op(b));
    });
    f.type_ids.push_back(vocabulary.at(graph.op(heaviest).type));
    float* row = &f.values[static_cast<size_t>(g * f.feature_dim)];
    const Op& last = graph.op(members.back());
    Shape shape = last.outputs.empty() ? Shape{} : graph.tensor(last.outputs[0]).shape;
    for (int d = 0; d < kShapeDims; ++d) {
      row[d] = d < static_cast<int>(shape.size())
                   ? Log(static_cast<double>(shape[static_cast<size_t>(d)]), 16)
                   : -0.1f;
    }
    int k = kShapeDims;
    row[k++] = Log(flops[static_cast<size_t>(g)], 40);
    row[k++] =
        static_cast<float>(total_flops > 0 ? flops[static_cast<size_t>(g)] / total_flops : 0);
    row[k++] = Log(bytes[static_cast<size_t>(g)], 32);
    row[k++] = Log(param_bytes[static_cast<size_t>(g)], 32);
    row[k++] = static_cast<float>(g / scale);
    row[k++] = static_cast<float>(
        std::log2(1.0 + static_cast<double>(in[static_cast<size_t>(g)].size() +
                                            out[static_cast<size_t>(g)].size())) /
        4);
    auto list = [&](const std::set<int>& neighbours) {
      int written = 0;
      for (int h : neighbours) {
        if (written == kNeighbours) break;
        row[k + written++] = static_cast<float>((h - g) / scale);
      }
      k += kNeighbours;
    };
    list(in[static_cast<size_t>(g)]);
    list(out[static_cast<size_t>(g)]);
  }
  std::map<std::pair<int, int>, int64_t> traffic;
  for (TensorId t = 0; t < graph.num_tensors(); ++t) {
    const Tensor& tensor = graph.tensor(t);
    if (tensor.producer == kNoOp || graph.op(tensor.producer).phase != Phase::kForward) continue;
    const int from = grouping.group_of_op[static_cast<size_t>(tensor.producer)];
    std::set<int> readers;
    for (OpId consumer : tensor.consumers) {
      const int to = grouping.group_of_op[static_cast<size_t>(consumer)];
      if (to >= 0 && to != from) readers.insert(to);
    }
    for (int to : readers) traffic[{from, to}] += tensor.bytes();
  }
  for (const auto& [pair, bytes] : traffic) f.edges.push_back({pair.first, pair.second, bytes});
  return f;
}

}  // namespace placer::graph
