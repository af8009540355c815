#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "placer/baselines/partitioners.h"

namespace placer::baselines {

std::vector<double> DeviceSpeedShares(const TaskGraph& tasks) {
  const int devices = tasks.num_devices();
  std::vector<double> shares(static_cast<size_t>(devices), 1.0 / devices);
  std::vector<double> speed(static_cast<size_t>(devices), 0.0);
  double total_speed = 0;
  for (int d = 0; d < devices; ++d) {
    double seconds = 0;
    for (int task = 0; task < tasks.num_tasks(); ++task) seconds += tasks.ComputeSeconds(task, d);
    if (seconds == 0) return shares;  // nothing to weigh the devices by
    speed[static_cast<size_t>(d)] = 1 / seconds;
    total_speed += 1 / seconds;
  }
  for (int d = 0; d < devices; ++d) {
    shares[static_cast<size_t>(d)] = speed[static_cast<size_t>(d)] / total_speed;
  }
  return shares;
}

PartitionGraph BuildPartitionGraph(const TaskGraph& tasks) {
  const int num_tasks = tasks.num_tasks();
  const int devices = tasks.num_devices();
  PartitionGraph graph;

  std::vector<double> device_seconds(static_cast<size_t>(devices), 0.0);
  for (int d = 0; d < devices; ++d) {
    for (int task = 0; task < num_tasks; ++task) {
      device_seconds[static_cast<size_t>(d)] += tasks.ComputeSeconds(task, d);
    }
  }
  for (int task = 0; task < num_tasks; ++task) {
    double work = 0;  // the task's fraction of all work, averaged over the devices
    for (int d = 0; d < devices; ++d) {
      const double total = device_seconds[static_cast<size_t>(d)];
      work += total > 0 ? tasks.ComputeSeconds(task, d) / total : 1.0 / num_tasks;
    }
    work /= devices;
    graph.vertex_weights.push_back(static_cast<int32_t>(std::max<int64_t>(
        1, std::llround(work * static_cast<double>(PartitionGraph::kTotalVertexWeight)))));
  }

  // Bytes per unordered pair of tasks.
  std::map<std::pair<int, int>, int64_t> bytes;
  auto add = [&](int a, int b, int64_t n) {
    if (a != b) bytes[{std::min(a, b), std::max(a, b)}] += n;
  };
  for (const TaskEdge& edge : tasks.edges()) add(edge.from, edge.to, edge.Bytes());
  for (const SideTraffic& traffic : tasks.side_traffic()) {
    add(traffic.task_a, traffic.task_b, traffic.bytes);
  }
  double total_bytes = 0;
  for (const auto& [pair, n] : bytes) total_bytes += static_cast<double>(n);
  const double scale = total_bytes > PartitionGraph::kTotalEdgeWeight
                           ? static_cast<double>(PartitionGraph::kTotalEdgeWeight) / total_bytes
                           : 1.0;

  std::vector<std::vector<std::pair<int32_t, int32_t>>> adjacency(static_cast<size_t>(num_tasks));
  for (const auto& [pair, n] : bytes) {
    const auto weight =
        static_cast<int32_t>(std::max<int64_t>(1, std::llround(static_cast<double>(n) * scale)));
    adjacency[static_cast<size_t>(pair.first)].push_back({pair.second, weight});
    adjacency[static_cast<size_t>(pair.second)].push_back({pair.first, weight});
  }
  graph.offsets.push_back(0);
  for (const auto& neighbours : adjacency) {
    for (const auto& [neighbour, weight] : neighbours) {
      graph.neighbours.push_back(neighbour);
      graph.edge_weights.push_back(weight);
    }
    graph.offsets.push_back(static_cast<int32_t>(graph.neighbours.size()));
  }
  return graph;
}

}  // namespace placer::baselines
