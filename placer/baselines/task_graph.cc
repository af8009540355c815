#include "placer/baselines/task_graph.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <queue>
#include <set>
#include <utility>

#include "graph/grouping.h"
#include "graph/training_step.h"

namespace placer::baselines {

using graph::OpId;
using graph::Phase;
using graph::TensorId;
using graph::TensorKind;

namespace {

void CheckCost(double seconds, const std::string& what) {
  if (!(seconds >= 0) || !std::isfinite(seconds)) {
    throw std::invalid_argument(
        fmt::format("the cost model gives {} seconds for {}: costs must be non-negative and finite",
                    seconds, what));
  }
}

void CheckProblem(const PlacementProblem& problem) {
  if (problem.graph == nullptr) throw std::invalid_argument("the placement problem has no graph");
  if (problem.grouping == nullptr) {
    throw std::invalid_argument("the placement problem has no grouping");
  }
  if (problem.costs == nullptr) {
    throw std::invalid_argument("the placement problem has no cost model");
  }
  if (problem.devices.empty()) throw std::invalid_argument("the placement problem has no devices");
  std::set<std::string> names;
  for (const graph::Device& device : problem.devices) {
    if (!names.insert(device.name).second) {
      throw std::invalid_argument(fmt::format("device '{}' is listed twice", device.name));
    }
    if (device.memory_capacity < 0) {
      throw std::invalid_argument(
          fmt::format("device '{}' has a negative memory capacity", device.name));
    }
  }
  const graph::Graph& g = *problem.graph;
  const graph::Grouping& grouping = *problem.grouping;
  if (grouping.group_of_op.size() != Index(g.num_ops())) {
    throw std::invalid_argument(
        fmt::format("the grouping covers {} ops, the graph has {}: it belongs to another graph",
                    grouping.group_of_op.size(), g.num_ops()));
  }
  std::vector<int> members_seen(Index(grouping.num_groups()), 0);
  for (int group = 0; group < grouping.num_groups(); ++group) {
    for (OpId op : grouping.members[Index(group)]) {
      if (op < 0 || op >= g.num_ops() || grouping.group_of_op[Index(op)] != group) {
        throw std::invalid_argument(
            fmt::format("group {} lists op {} that the grouping does not put in it", group, op));
      }
      ++members_seen[Index(group)];
    }
  }
  for (OpId op = 0; op < g.num_ops(); ++op) {
    if (g.op(op).phase != Phase::kForward) continue;
    const int group = grouping.group_of_op[Index(op)];
    if (group < 0 || group >= grouping.num_groups()) {
      throw std::invalid_argument(
          fmt::format("forward op '{}' is in no group of the grouping", g.op(op).name));
    }
    --members_seen[Index(group)];
  }
  for (int group = 0; group < grouping.num_groups(); ++group) {
    if (members_seen[Index(group)] != 0) {
      throw std::invalid_argument(fmt::format(
          "group {} lists a different number of ops than the grouping assigns to it", group));
    }
  }
}

// The forward op each op runs with.
std::vector<OpId> Anchors(const graph::Graph& g) {
  std::vector<OpId> anchor(Index(g.num_ops()));
  for (OpId id = 0; id < g.num_ops(); ++id) {
    const graph::Op& op = g.op(id);
    if (op.phase == Phase::kForward) {
      anchor[Index(id)] = id;
    } else if (op.forward_op >= 0 && op.forward_op < g.num_ops() &&
               g.op(op.forward_op).phase == Phase::kForward) {
      anchor[Index(id)] = op.forward_op;
    } else {
      throw std::invalid_argument(fmt::format(
          "{} op '{}' does not name the forward op it belongs with", ToString(op.phase), op.name));
    }
  }
  return anchor;
}

// Strongly connected components of a directed graph (Kosaraju, iterative), as a component index
// per node.
std::vector<int> StronglyConnectedComponents(const std::vector<std::vector<int>>& successors) {
  const int n = static_cast<int>(successors.size());
  std::vector<std::vector<int>> predecessors(Index(n));
  for (int u = 0; u < n; ++u) {
    for (int v : successors[Index(u)]) predecessors[Index(v)].push_back(u);
  }
  std::vector<int> finish_order;
  std::vector<bool> visited(Index(n), false);
  for (int root = 0; root < n; ++root) {
    if (visited[Index(root)]) continue;
    std::vector<std::pair<int, size_t>> stack = {{root, 0}};
    visited[Index(root)] = true;
    while (!stack.empty()) {
      auto& [node, next] = stack.back();
      if (next < successors[Index(node)].size()) {
        const int child = successors[Index(node)][next++];
        if (!visited[Index(child)]) {
          visited[Index(child)] = true;
          stack.push_back({child, 0});
        }
      } else {
        finish_order.push_back(node);
        stack.pop_back();
      }
    }
  }
  std::vector<int> component(Index(n), -1);
  int components = 0;
  for (auto it = finish_order.rbegin(); it != finish_order.rend(); ++it) {
    if (component[Index(*it)] != -1) continue;
    std::vector<int> stack = {*it};
    component[Index(*it)] = components;
    while (!stack.empty()) {
      const int node = stack.back();
      stack.pop_back();
      for (int parent : predecessors[Index(node)]) {
        if (component[Index(parent)] == -1) {
          component[Index(parent)] = components;
          stack.push_back(parent);
        }
      }
    }
    ++components;
  }
  return component;
}

}  // namespace

int64_t TaskEdge::Bytes() const {
  return std::accumulate(forward_tensor_bytes.begin(), forward_tensor_bytes.end(), int64_t{0}) +
         std::accumulate(gradient_tensor_bytes.begin(), gradient_tensor_bytes.end(), int64_t{0});
}

TaskGraph::TaskGraph(const PlacementProblem& problem)
    // The problem is checked before any member reads through its pointers.
    : graph_((CheckProblem(problem), *problem.graph)),
      grouping_(*problem.grouping),
      devices_(problem.devices),
      memory_model_(problem.memory_model) {
  const graph::Graph& g = graph_;
  const int num_groups = grouping_.num_groups();
  const size_t devices = devices_.size();
  for (const graph::Device& device : devices_) device_names_.push_back(device.name);

  const std::vector<OpId> anchor = Anchors(g);
  const std::vector<OpId> order = g.TopologicalOrder();
  std::vector<int> rank(Index(g.num_ops()));
  for (size_t i = 0; i < order.size(); ++i) rank[Index(order[i])] = static_cast<int>(i);
  auto group_of_op = [&](OpId op) { return grouping_.group_of_op[Index(anchor[Index(op)])]; };

  // Where each value comes from: a group, or host memory.
  std::vector<int> source_group(Index(g.num_tensors()), kHostSource);
  std::vector<bool> is_gradient(Index(g.num_tensors()), false);
  for (TensorId t = 0; t < g.num_tensors(); ++t) {
    const graph::Tensor& tensor = g.tensor(t);
    if (tensor.producer != graph::kNoOp) {
      source_group[Index(t)] = group_of_op(tensor.producer);
      is_gradient[Index(t)] = g.op(tensor.producer).phase != Phase::kForward;
    } else if (tensor.kind == TensorKind::kParameter) {
      if (!tensor.consumers.empty()) source_group[Index(t)] = group_of_op(OwnerOf(g, t));
    } else if (tensor.kind != TensorKind::kInput && tensor.kind != TensorKind::kLabel &&
               !tensor.consumers.empty()) {
      throw std::invalid_argument(fmt::format("op '{}': input '{}' is dangling: no op produces it",
                                              g.op(tensor.consumers.front()).name, tensor.name));
    }
  }

  // Groups joined by forward values, then merged where they form cycles.
  std::vector<std::vector<int>> group_successors(Index(num_groups));
  for (TensorId t = 0; t < g.num_tensors(); ++t) {
    const int from = source_group[Index(t)];
    if (from == kHostSource || is_gradient[Index(t)]) continue;
    for (OpId consumer : g.tensor(t).consumers) {
      const int to = group_of_op(consumer);
      if (to != from) group_successors[Index(from)].push_back(to);
    }
  }
  const std::vector<int> component = StronglyConnectedComponents(group_successors);
  const int num_components =
      num_groups == 0 ? 0 : *std::max_element(component.begin(), component.end()) + 1;

  // Number the components topologically; among those ready, the one whose first op comes first
  // in the graph's own order goes first (empty groups last, by index), so that a grouping by op
  // keeps the graph's order.
  std::vector<int64_t> key(Index(num_components), std::numeric_limits<int64_t>::max());
  for (int group = 0; group < num_groups; ++group) {
    const auto& members = grouping_.members[Index(group)];
    int64_t group_key = static_cast<int64_t>(g.num_ops()) + group;
    for (OpId op : members) group_key = std::min<int64_t>(group_key, rank[Index(op)]);
    int64_t& k = key[Index(component[Index(group)])];
    k = std::min(k, group_key);
  }
  std::vector<std::set<int>> component_successors(Index(num_components));
  std::vector<int> pending(Index(num_components), 0);
  for (int from = 0; from < num_groups; ++from) {
    for (int to : group_successors[Index(from)]) {
      const int a = component[Index(from)], b = component[Index(to)];
      if (a != b && component_successors[Index(a)].insert(b).second) ++pending[Index(b)];
    }
  }
  using Entry = std::pair<int64_t, int>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> ready;
  for (int c = 0; c < num_components; ++c) {
    if (pending[Index(c)] == 0) ready.push({key[Index(c)], c});
  }
  std::vector<int> task_of_component(Index(num_components), -1);
  int next_task = 0;
  while (!ready.empty()) {
    const int c = ready.top().second;
    ready.pop();
    task_of_component[Index(c)] = next_task++;
    for (int succ : component_successors[Index(c)]) {
      if (--pending[Index(succ)] == 0) ready.push({key[Index(succ)], succ});
    }
  }
  groups_of_task_.resize(Index(num_components));
  task_of_group_.resize(Index(num_groups));
  for (int group = 0; group < num_groups; ++group) {
    const int task = task_of_component[Index(component[Index(group)])];
    task_of_group_[Index(group)] = task;
    groups_of_task_[Index(task)].push_back(group);
  }
  const int tasks = num_tasks();
  auto task_of_op = [&](OpId op) { return task_of_group_[Index(group_of_op(op))]; };
  std::vector<int> source_task(Index(g.num_tensors()), kHostSource);
  for (TensorId t = 0; t < g.num_tensors(); ++t) {
    if (source_group[Index(t)] != kHostSource) {
      source_task[Index(t)] = task_of_group_[Index(source_group[Index(t)])];
    }
  }

  // Compute time and own memory. The parameters-and-activations model leaves gradients out: what
  // backward ops write, and copies of it.
  const bool count_gradients = memory_model_ == MemoryModel::kEverythingWritten;
  compute_seconds_.assign(Index(tasks) * devices, 0.0);
  memory_bytes_.assign(Index(tasks), 0);
  for (OpId op = 0; op < g.num_ops(); ++op) {
    const int task = task_of_op(op);
    for (size_t d = 0; d < devices; ++d) {
      const double seconds = problem.costs->OpSeconds(g, op, devices_[d]);
      CheckCost(seconds, fmt::format("op '{}' on {}", g.op(op).name, devices_[d].name));
      compute_seconds_[Index(task) * devices + d] += seconds;
    }
    if (!count_gradients && g.op(op).phase != Phase::kForward) continue;
    for (TensorId out : g.op(op).outputs) memory_bytes_[Index(task)] += g.tensor(out).bytes();
  }
  for (TensorId t = 0; t < g.num_tensors(); ++t) {
    if (g.tensor(t).kind == TensorKind::kParameter && g.tensor(t).producer == graph::kNoOp &&
        source_task[Index(t)] != kHostSource) {
      memory_bytes_[Index(source_task[Index(t)])] += g.tensor(t).bytes();
    }
  }

  // What each task reads from elsewhere; minibatch loads count as compute on their device.
  foreign_reads_.resize(Index(tasks));
  remote_readers_.resize(Index(tasks));
  std::vector<int> read_by(Index(g.num_tensors()), -1);  // last task recorded reading it
  std::vector<std::vector<OpId>> ops_of_task(Index(tasks));
  for (OpId op = 0; op < g.num_ops(); ++op) ops_of_task[Index(task_of_op(op))].push_back(op);
  for (int task = 0; task < tasks; ++task) {
    for (OpId op : ops_of_task[Index(task)]) {
      for (TensorId t : g.op(op).inputs) {
        if (source_task[Index(t)] == task || read_by[Index(t)] == task) continue;
        read_by[Index(t)] = task;
        const int64_t bytes = g.tensor(t).bytes();
        const bool counted = count_gradients || !is_gradient[Index(t)];
        if (counted) foreign_reads_[Index(task)].push_back({t, bytes, source_task[Index(t)]});
        if (source_task[Index(t)] != kHostSource) {
          if (counted) remote_readers_[Index(source_task[Index(t)])].push_back({t, bytes, task});
          continue;
        }
        for (size_t d = 0; d < devices; ++d) {
          const double seconds = problem.costs->TransferSeconds(bytes, nullptr, devices_[d]);
          CheckCost(seconds,
                    fmt::format("{} bytes from {} to {}", bytes, sim::kHostName, devices_[d].name));
          compute_seconds_[Index(task) * devices + d] += seconds;
        }
      }
    }
  }

  // Edges: forward values by (from, to), then their gradients; gradients with no forward edge
  // are side traffic.
  std::map<std::pair<int, int>, int> edge_index;
  std::map<std::pair<int, int>, std::vector<int64_t>> gradients;
  for (TensorId t = 0; t < g.num_tensors(); ++t) {
    const int from = source_task[Index(t)];
    if (from == kHostSource) continue;
    std::set<int> readers;
    for (OpId consumer : g.tensor(t).consumers) {
      const int to = task_of_op(consumer);
      if (to != from) readers.insert(to);
    }
    for (int to : readers) {
      if (is_gradient[Index(t)]) {
        gradients[{to, from}].push_back(g.tensor(t).bytes());
        continue;
      }
      auto [it, inserted] = edge_index.try_emplace({from, to}, static_cast<int>(edges_.size()));
      if (inserted) edges_.push_back({.from = from, .to = to});
      edges_[Index(it->second)].forward_tensor_bytes.push_back(g.tensor(t).bytes());
    }
  }
  for (auto& [pair, bytes] : gradients) {
    auto it = edge_index.find(pair);
    if (it != edge_index.end()) {
      auto& list = edges_[Index(it->second)].gradient_tensor_bytes;
      list.insert(list.end(), bytes.begin(), bytes.end());
    } else {
      side_traffic_.push_back({.task_a = pair.first,
                               .task_b = pair.second,
                               .bytes = std::accumulate(bytes.begin(), bytes.end(), int64_t{0})});
    }
  }
  // Edges in (from, to) order: deterministic, and the LP's rows follow it.
  std::sort(edges_.begin(), edges_.end(), [](const TaskEdge& a, const TaskEdge& b) {
    return std::pair(a.from, a.to) < std::pair(b.from, b.to);
  });
  in_edges_.resize(Index(tasks));
  out_edges_.resize(Index(tasks));
  communication_seconds_.assign(edges_.size() * devices * devices, 0.0);
  for (size_t e = 0; e < edges_.size(); ++e) {
    const TaskEdge& edge = edges_[e];
    out_edges_[Index(edge.from)].push_back(static_cast<int>(e));
    in_edges_[Index(edge.to)].push_back(static_cast<int>(e));
    for (size_t a = 0; a < devices; ++a) {
      for (size_t b = 0; b < devices; ++b) {
        if (a == b) continue;
        double seconds = 0;
        auto add = [&](int64_t bytes, size_t from, size_t to) {
          const double s = problem.costs->TransferSeconds(bytes, &devices_[from], devices_[to]);
          CheckCost(s, fmt::format("{} bytes from {} to {}", bytes, devices_[from].name,
                                   devices_[to].name));
          seconds += s;
        };
        for (int64_t bytes : edge.forward_tensor_bytes) add(bytes, a, b);
        for (int64_t bytes : edge.gradient_tensor_bytes) add(bytes, b, a);
        communication_seconds_[(e * devices + a) * devices + b] = seconds;
      }
    }
  }
}

double TaskGraph::MeanComputeSeconds(int task) const {
  double sum = 0;
  for (int d = 0; d < num_devices(); ++d) sum += ComputeSeconds(task, d);
  return sum / num_devices();
}

double TaskGraph::MeanCommunicationSeconds(int edge) const {
  const int n = num_devices();
  if (n < 2) return 0;
  double sum = 0;
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) sum += CommunicationSeconds(edge, a, b);
  }
  return sum / (n * (n - 1));
}

std::string TaskGraph::Describe(int task) const {
  const std::vector<int>& groups = groups_of_task(task);
  std::vector<std::string> ops;
  size_t num_ops = 0;
  for (int group : groups) {
    for (OpId op : grouping_.members[Index(group)]) {
      if (ops.size() < 2) ops.push_back(graph_.op(op).name);
      ++num_ops;
    }
  }
  std::string names = fmt::format("{}", fmt::join(ops, ", "));
  if (num_ops > ops.size()) names += fmt::format(", +{} more", num_ops - ops.size());
  if (num_ops == 0) names = "no ops";
  return fmt::format("{} {} ({})", groups.size() == 1 ? "group" : "groups", fmt::join(groups, ", "),
                     names);
}

std::vector<int> TaskGraph::GroupDevices(const std::vector<int>& task_devices) const {
  std::vector<int> group_devices(task_of_group_.size());
  for (size_t group = 0; group < task_of_group_.size(); ++group) {
    group_devices[group] = task_devices[Index(task_of_group_[group])];
  }
  return group_devices;
}

graph::Placement TaskGraph::ToPlacement(const std::vector<int>& task_devices) const {
  return graph::ToPlacement(graph_, grouping_, GroupDevices(task_devices), device_names_);
}

MemoryLedger::MemoryLedger(const TaskGraph& tasks)
    : tasks_(tasks),
      device_of_(Index(tasks.num_tasks()), -1),
      used_bytes_(Index(tasks.num_devices()), 0) {
  graph::TensorId max_tensor = -1;
  for (int task = 0; task < tasks.num_tasks(); ++task) {
    for (const ForeignRead& read : tasks.foreign_reads(task)) {
      max_tensor = std::max(max_tensor, read.tensor);
    }
  }
  resident_.assign(Index(tasks.num_devices()), std::vector<bool>(Index(max_tensor + 1), false));
}

int64_t MemoryLedger::capacity(int device) const {
  return tasks_.devices()[Index(device)].memory_capacity;
}

std::vector<int64_t> MemoryLedger::AddedBytes(int task, int device) const {
  std::vector<int64_t> added(Index(tasks_.num_devices()), 0);
  added[Index(device)] += tasks_.memory_bytes(task);
  for (const ForeignRead& read : tasks_.foreign_reads(task)) {
    const bool source_placed_elsewhere =
        read.source_task == kHostSource || (device_of_[Index(read.source_task)] != -1 &&
                                            device_of_[Index(read.source_task)] != device);
    if (source_placed_elsewhere && !resident_[Index(device)][Index(read.tensor)]) {
      added[Index(device)] += read.bytes;
    }
  }
  // Copies of this task's values to placed readers elsewhere, once per (value, device).
  std::set<std::pair<int, graph::TensorId>> copies;
  for (const RemoteReader& reader : tasks_.remote_readers(task)) {
    const int reader_device = device_of_[Index(reader.reader_task)];
    if (reader_device == -1 || reader_device == device ||
        resident_[Index(reader_device)][Index(reader.tensor)]) {
      continue;
    }
    if (copies.insert({reader_device, reader.tensor}).second) {
      added[Index(reader_device)] += reader.bytes;
    }
  }
  return added;
}

bool MemoryLedger::Fits(int task, int device) const {
  return WhyItDoesNotFit(task, device).empty();
}

std::string MemoryLedger::WhyItDoesNotFit(int task, int device) const {
  const std::vector<int64_t> added = AddedBytes(task, device);
  for (int d = 0; d < tasks_.num_devices(); ++d) {
    const int64_t limit = capacity(d);
    if (limit > 0 && used_bytes(d) + added[Index(d)] > limit) {
      const std::string& name = tasks_.device_names()[Index(d)];
      const std::string where =
          d == device ? fmt::format("on {}", name)
                      : fmt::format("on {} for copies of its values read there, if placed on {}",
                                    name, tasks_.device_names()[Index(device)]);
      return fmt::format("{} needs {} bytes {}, which has {} of its {} bytes free",
                         tasks_.Describe(task), added[Index(d)], where, limit - used_bytes(d),
                         limit);
    }
  }
  return "";
}

void MemoryLedger::Place(int task, int device) {
  const std::vector<int64_t> added = AddedBytes(task, device);
  for (int d = 0; d < tasks_.num_devices(); ++d) used_bytes_[Index(d)] += added[Index(d)];
  device_of_[Index(task)] = device;
  for (const ForeignRead& read : tasks_.foreign_reads(task)) {
    const bool source_elsewhere =
        read.source_task == kHostSource || (device_of_[Index(read.source_task)] != -1 &&
                                            device_of_[Index(read.source_task)] != device);
    if (source_elsewhere) resident_[Index(device)][Index(read.tensor)] = true;
  }
  for (const RemoteReader& reader : tasks_.remote_readers(task)) {
    const int reader_device = device_of_[Index(reader.reader_task)];
    if (reader_device != -1 && reader_device != device) {
      resident_[Index(reader_device)][Index(reader.tensor)] = true;
    }
  }
}

void CheckMemoryCanFit(const TaskGraph& tasks) {
  const graph::DeviceSet& devices = tasks.devices();
  // A device without a capacity holds anything.
  for (const graph::Device& device : devices) {
    if (device.memory_capacity == 0) return;
  }
  const graph::Device& largest = *std::max_element(
      devices.begin(), devices.end(), [](const graph::Device& a, const graph::Device& b) {
        return a.memory_capacity < b.memory_capacity;
      });
  int64_t total_capacity = 0;
  for (const graph::Device& device : devices) total_capacity += device.memory_capacity;
  int64_t total = 0;
  for (int task = 0; task < tasks.num_tasks(); ++task) {
    total += tasks.memory_bytes(task);
    if (tasks.memory_bytes(task) > largest.memory_capacity) {
      throw BaselineError(fmt::format(
          "{} needs {} bytes for its parameters and values, more than any device holds (the "
          "largest, {}, holds {} bytes)",
          tasks.Describe(task), tasks.memory_bytes(task), largest.name, largest.memory_capacity));
    }
  }
  if (total > total_capacity) {
    throw BaselineError(fmt::format(
        "the groups need {} bytes for their parameters and values, the devices hold {} bytes in "
        "all",
        total, total_capacity));
  }
}

std::string MemoryWarning(const TaskGraph& tasks, const std::vector<int>& task_devices) {
  MemoryLedger ledger(tasks);
  for (int task = 0; task < tasks.num_tasks(); ++task)
    ledger.Place(task, task_devices[Index(task)]);
  std::vector<std::string> over;
  for (int d = 0; d < tasks.num_devices(); ++d) {
    if (ledger.capacity(d) > 0 && ledger.used_bytes(d) > ledger.capacity(d)) {
      over.push_back(
          fmt::format("{} may run out of memory: its groups need up to {} bytes, its "
                      "capacity is {} bytes",
                      tasks.device_names()[Index(d)], ledger.used_bytes(d), ledger.capacity(d)));
    }
  }
  return fmt::format("{}", fmt::join(over, "; "));
}

BaselineResult MakeResult(std::string algorithm, const TaskGraph& tasks,
                          const std::vector<int>& task_devices, const Stopwatch& stopwatch) {
  BaselineResult result;
  result.algorithm = std::move(algorithm);
  result.placement = tasks.ToPlacement(task_devices);
  result.group_devices = tasks.GroupDevices(task_devices);
  result.memory_warning = MemoryWarning(tasks, task_devices);
  result.seconds_to_place = stopwatch.Seconds();
  return result;
}

}  // namespace placer::baselines
