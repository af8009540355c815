// CPOP, the critical-path-on-a-processor list scheduler of the paper that gave HEFT (Topcuoglu,
// Hariri, Wu, IEEE TPDS 2002, section 4.2).
#include <algorithm>
#include <queue>
#include <tuple>
#include <vector>

#include "placer/baselines/baselines.h"

namespace placer::baselines {

namespace {

// Priorities are sums of floating-point times: a task is on the critical path when its priority is
// the largest within this relative tolerance.
constexpr double kSamePriority = 1e-9;

// Each task's downward rank: the longest mean time from an entry task to its start.
std::vector<double> DownwardRanks(const TaskGraph& tasks) {
  std::vector<double> rank(Index(tasks.num_tasks()), 0.0);
  for (int task = 0; task < tasks.num_tasks(); ++task) {  // topological: predecessors first
    for (int e : tasks.in_edges(task)) {
      const int from = tasks.edges()[Index(e)].from;
      rank[Index(task)] =
          std::max(rank[Index(task)], rank[Index(from)] + tasks.MeanComputeSeconds(from) +
                                          tasks.MeanCommunicationSeconds(e));
    }
  }
  return rank;
}

}  // namespace

TaskSchedule ScheduleCpop(const TaskGraph& tasks) {
  const int num_tasks = tasks.num_tasks();
  const std::vector<double> upward = UpwardRanks(tasks), downward = DownwardRanks(tasks);
  std::vector<double> priority(Index(num_tasks));
  for (int t = 0; t < num_tasks; ++t) priority[Index(t)] = upward[Index(t)] + downward[Index(t)];
  const double critical = num_tasks == 0 ? 0 : *std::max_element(priority.begin(), priority.end());
  auto on_critical_path = [&](int t) {
    return priority[Index(t)] >= critical * (1 - kSamePriority);
  };
  // The critical path: from its first entry task, each time its first successor of the same
  // priority.
  std::vector<bool> critical_path(Index(num_tasks), false);
  int task = -1;
  for (int t = 0; t < num_tasks && task < 0; ++t) {
    if (tasks.in_edges(t).empty() && on_critical_path(t)) task = t;
  }
  while (task >= 0) {
    critical_path[Index(task)] = true;
    int next = -1;
    for (int e : tasks.out_edges(task)) {
      const int to = tasks.edges()[Index(e)].to;
      if (on_critical_path(to) && (next < 0 || to < next)) next = to;
    }
    task = next;
  }
  // Its device: the one that computes the whole path soonest.
  int path_device = 0;
  double path_seconds = 0;
  for (int d = 0; d < tasks.num_devices(); ++d) {
    double seconds = 0;
    for (int t = 0; t < num_tasks; ++t) {
      if (critical_path[Index(t)]) seconds += tasks.ComputeSeconds(t, d);
    }
    if (d == 0 || seconds < path_seconds) {
      path_device = d;
      path_seconds = seconds;
    }
  }
  // Ready tasks by priority (ties: the lower index); the path's on its device, every other one
  // where it finishes first, both into the earliest idle gap.
  std::priority_queue<std::tuple<double, int>> ready;
  std::vector<int> waiting_for(Index(num_tasks));
  for (int t = 0; t < num_tasks; ++t) {
    waiting_for[Index(t)] = static_cast<int>(tasks.in_edges(t).size());
    if (waiting_for[Index(t)] == 0) ready.emplace(priority[Index(t)], -t);
  }
  GapFiller filler(tasks);
  while (!ready.empty()) {
    const int t = -std::get<1>(ready.top());
    ready.pop();
    if (critical_path[Index(t)]) {
      filler.Place(t, path_device);
    } else {
      filler.PlaceWhereItFinishesFirst(t);
    }
    for (int e : tasks.out_edges(t)) {
      const int to = tasks.edges()[Index(e)].to;
      if (--waiting_for[Index(to)] == 0) ready.emplace(priority[Index(to)], -to);
    }
  }
  return filler.schedule();
}

BaselineResult Cpop(const PlacementProblem& problem) {
  return ScheduledBaseline("CPOP", problem, ScheduleCpop);
}

}  // namespace placer::baselines
