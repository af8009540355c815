#include "graph/grouping.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <map>

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
        prefix.append(1, '/').append(name, begin, end - begin);
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

}  // namespace placer::graph
