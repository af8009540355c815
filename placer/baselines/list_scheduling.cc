#include "placer/baselines/list_scheduling.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <queue>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

namespace placer::baselines {

namespace {

constexpr double kNever = std::numeric_limits<double>::infinity();

// The state of the event-driven m-ETF / m-SCT scheduler.
class EtfScheduler {
 public:
  EtfScheduler(const TaskGraph& tasks, const std::vector<int>& favourite_child,
               std::string_view algorithm)
      : tasks_(tasks),
        favourite_child_(favourite_child),
        algorithm_(algorithm),
        num_tasks_(tasks.num_tasks()),
        num_devices_(tasks.num_devices()),
        ledger_(tasks),
        free_at_(Index(num_devices_), 0.0),
        last_task_(Index(num_devices_), -1),
        unfinished_predecessors_(Index(num_tasks_), 0),
        arrival_(Index(num_tasks_) * Index(num_devices_), 0.0),
        schedule_ts_(Index(num_tasks_) * Index(num_devices_), kNever) {
    schedule_.device.assign(Index(num_tasks_), -1);
    schedule_.start_seconds.assign(Index(num_tasks_), 0.0);
    schedule_.end_seconds.assign(Index(num_tasks_), 0.0);
  }

  TaskSchedule Run() {
    for (int task = 0; task < num_tasks_; ++task) {
      unfinished_predecessors_[Index(task)] = static_cast<int>(tasks_.in_edges(task).size());
      if (unfinished_predecessors_[Index(task)] == 0) Release(task);
    }
    double now = 0;
    int placed = 0;
    while (placed < num_tasks_) {
      while (!running_.empty() && running_.top().first <= now) {
        const int task = running_.top().second;
        running_.pop();
        for (int e : tasks_.out_edges(task)) {
          const int successor = tasks_.edges()[Index(e)].to;
          if (--unfinished_predecessors_[Index(successor)] == 0) Release(successor);
        }
      }
      while (true) {
        UpdateScheduleTimes(now);
        const Choice choice = Choose(now);
        if (choice.task == -1) break;
        Start(choice.task, choice.device, now);
        ++placed;
      }
      if (placed == num_tasks_) break;
      const double next = NextEventTime(now);
      if (next == kNever) {
        throw std::logic_error(
            fmt::format("{}: no task can start and none is running", algorithm_));
      }
      now = next;
    }
    for (double end : schedule_.end_seconds) {
      schedule_.makespan_seconds = std::max(schedule_.makespan_seconds, end);
    }
    return std::move(schedule_);
  }

 private:
  struct Choice {
    int task = -1;
    int device = -1;
    double schedule_ts = kNever;
    double end = kNever;
  };

  double& ScheduleTs(int task, int device) {
    return schedule_ts_[Index(task) * Index(num_devices_) + Index(device)];
  }
  double ScheduleTs(int task, int device) const {
    return schedule_ts_[Index(task) * Index(num_devices_) + Index(device)];
  }

  // Every predecessor has finished: when its inputs would be on each device is now fixed.
  void Release(int task) {
    for (int d = 0; d < num_devices_; ++d) {
      double arrival = 0;
      for (int e : tasks_.in_edges(task)) {
        const int from = tasks_.edges()[Index(e)].from;
        const int from_device = schedule_.device[Index(from)];
        arrival = std::max(arrival, schedule_.end_seconds[Index(from)] +
                                        tasks_.CommunicationSeconds(e, from_device, d));
      }
      arrival_[Index(task) * Index(num_devices_) + Index(d)] = arrival;
    }
    ready_.insert(std::upper_bound(ready_.begin(), ready_.end(), task), task);
  }

  // schedule_ts of every ready task on every device, kNever where it does not fit. A device that is
  // already free is free from `now` on (Baechi advances its clock). Throws when a ready task fits
  // nowhere.
  void UpdateScheduleTimes(double now) {
    for (int task : ready_) {
      bool fits_somewhere = false;
      for (int d = 0; d < num_devices_; ++d) {
        double& ts = ScheduleTs(task, d);
        ts = kNever;
        if (!ledger_.Fits(task, d)) continue;
        ts = std::max(
            {arrival_[Index(task) * Index(num_devices_) + Index(d)], free_at_[Index(d)], now});
        fits_somewhere = true;
      }
      if (!fits_somewhere) {
        std::vector<std::string> reasons;
        for (int d = 0; d < num_devices_; ++d) reasons.push_back(ledger_.WhyItDoesNotFit(task, d));
        throw BaselineError(fmt::format("{} found no device that holds {}: {}", algorithm_,
                                        tasks_.Describe(task), fmt::join(reasons, "; ")));
      }
    }
  }

  // The latest schedule_ts of `task` over the devices that hold it: once that time has come the
  // task could have started anywhere, so an awake device must not keep it waiting.
  double UrgentTs(int task) const {
    double urgent = 0;
    for (int d = 0; d < num_devices_; ++d) {
      if (ScheduleTs(task, d) != kNever) urgent = std::max(urgent, ScheduleTs(task, d));
    }
    return urgent;
  }

  bool IsReady(int task) const { return std::binary_search(ready_.begin(), ready_.end(), task); }

  // m-SCT: the favourite child `device` stays awake for, or -1.
  int AwaitedFavourite(int device) const {
    if (favourite_child_.empty() || last_task_[Index(device)] == -1) return -1;
    const int child = favourite_child_[Index(last_task_[Index(device)])];
    if (child == -1 || !IsReady(child) || ScheduleTs(child, device) == kNever) return -1;
    for (int d = 0; d < num_devices_; ++d) {
      if (ScheduleTs(child, d) < ScheduleTs(child, device)) return -1;
    }
    return child;
  }

  // The ready task with the smallest (key, topological index) among those `device` holds.
  template <typename Key>
  std::pair<int, double> Smallest(int device, Key key) const {
    int best = -1;
    double best_key = kNever;
    for (int task : ready_) {  // ascending, so the first of equal keys wins
      if (ScheduleTs(task, device) == kNever) continue;
      const double k = key(task);
      if (k < best_key) {
        best = task;
        best_key = k;
      }
    }
    return {best, best_key};
  }

  // The task free device `device` takes at `now`, or -1.
  int Pick(int device, double now) const {
    const int favourite = AwaitedFavourite(device);
    if (favourite == -1) {
      const auto [task, ts] = Smallest(device, [&](int t) { return ScheduleTs(t, device); });
      return ts <= now ? task : -1;
    }
    // Awake: an urgent task first, then the favourite child once its inputs are here.
    const auto [urgent, urgent_ts] = Smallest(device, [&](int t) { return UrgentTs(t); });
    if (urgent_ts <= now) return urgent;
    return ScheduleTs(favourite, device) <= now ? favourite : -1;
  }

  // When free device `device` could next take a task, if nothing else happens first.
  double WakeTime(int device) const {
    const int favourite = AwaitedFavourite(device);
    if (favourite == -1) {
      return Smallest(device, [&](int t) { return ScheduleTs(t, device); }).second;
    }
    return std::min(ScheduleTs(favourite, device),
                    Smallest(device, [&](int t) { return UrgentTs(t); }).second);
  }

  Choice Choose(double now) const {
    Choice best;
    for (int d = 0; d < num_devices_; ++d) {
      if (free_at_[Index(d)] > now) continue;
      const int task = Pick(d, now);
      if (task == -1) continue;
      const Choice choice{.task = task,
                          .device = d,
                          .schedule_ts = ScheduleTs(task, d),
                          .end = now + tasks_.ComputeSeconds(task, d)};
      if (std::tie(choice.schedule_ts, choice.task, choice.end, choice.device) <
          std::tie(best.schedule_ts, best.task, best.end, best.device)) {
        best = choice;
      }
    }
    return best;
  }

  void Start(int task, int device, double now) {
    ledger_.Place(task, device);
    schedule_.device[Index(task)] = device;
    schedule_.start_seconds[Index(task)] = now;
    const double end = now + tasks_.ComputeSeconds(task, device);
    schedule_.end_seconds[Index(task)] = end;
    free_at_[Index(device)] = end;
    last_task_[Index(device)] = task;
    running_.push({end, task});
    ready_.erase(std::lower_bound(ready_.begin(), ready_.end(), task));
  }

  // The next moment anything can change: a task finishes, or a free device's candidate can start.
  double NextEventTime(double now) const {
    double next = running_.empty() ? kNever : running_.top().first;
    for (int d = 0; d < num_devices_; ++d) {
      if (free_at_[Index(d)] > now) continue;
      const double ts = WakeTime(d);
      if (ts > now) next = std::min(next, ts);
    }
    return next;
  }

  const TaskGraph& tasks_;
  const std::vector<int>& favourite_child_;
  std::string_view algorithm_;
  const int num_tasks_;
  const int num_devices_;
  MemoryLedger ledger_;
  TaskSchedule schedule_;
  std::vector<double> free_at_;
  std::vector<int> last_task_;
  std::vector<int> unfinished_predecessors_;
  std::vector<double> arrival_;            // [task * devices + device], set on release
  std::vector<double> schedule_ts_;        // [task * devices + device], for ready tasks
  std::vector<int> ready_;                 // sorted: a task's number is its topological index
  using Running = std::pair<double, int>;  // (end, task)
  std::priority_queue<Running, std::vector<Running>, std::greater<>> running_;
};

}  // namespace

TaskSchedule ScheduleEarliestTaskFirst(const TaskGraph& tasks,
                                       const std::vector<int>& favourite_child,
                                       std::string_view algorithm) {
  if (!favourite_child.empty() && favourite_child.size() != Index(tasks.num_tasks())) {
    throw std::invalid_argument("one favourite child (or -1) per task is needed");
  }
  return EtfScheduler(tasks, favourite_child, algorithm).Run();
}

BaselineResult ScheduledBaseline(std::string algorithm, const PlacementProblem& problem,
                                 const std::function<TaskSchedule(const TaskGraph&)>& schedule) {
  const Stopwatch stopwatch;
  const TaskGraph tasks(problem);
  CheckMemoryCanFit(tasks);
  const TaskSchedule scheduled = schedule(tasks);
  BaselineResult result = MakeResult(std::move(algorithm), tasks, scheduled.device, stopwatch);
  result.estimated_step_seconds = scheduled.makespan_seconds;
  return result;
}

BaselineResult MEtf(const PlacementProblem& problem) {
  return ScheduledBaseline("m-ETF", problem, [](const TaskGraph& tasks) {
    return ScheduleEarliestTaskFirst(tasks, {}, "m-ETF");
  });
}

std::vector<double> UpwardRanks(const TaskGraph& tasks) {
  // Tasks are numbered topologically, so a reverse sweep sees every successor first.
  std::vector<double> rank(Index(tasks.num_tasks()), 0.0);
  for (int task = tasks.num_tasks() - 1; task >= 0; --task) {
    double longest_tail = 0;
    for (int e : tasks.out_edges(task)) {
      longest_tail = std::max(longest_tail, tasks.MeanCommunicationSeconds(e) +
                                                rank[Index(tasks.edges()[Index(e)].to)]);
    }
    rank[Index(task)] = tasks.MeanComputeSeconds(task) + longest_tail;
  }
  return rank;
}

GapFiller::GapFiller(const TaskGraph& tasks) : tasks_(tasks), busy_(Index(tasks.num_devices())) {
  schedule_.device.assign(Index(tasks.num_tasks()), -1);
  schedule_.start_seconds.assign(Index(tasks.num_tasks()), 0.0);
  schedule_.end_seconds.assign(Index(tasks.num_tasks()), 0.0);
}

double GapFiller::EarliestStart(int task, int device) const {
  double ready = 0;
  for (int e : tasks_.in_edges(task)) {
    const int from = tasks_.edges()[Index(e)].from;
    ready =
        std::max(ready, schedule_.end_seconds[Index(from)] +
                            tasks_.CommunicationSeconds(e, schedule_.device[Index(from)], device));
  }
  const double duration = tasks_.ComputeSeconds(task, device);
  double start = ready;
  for (const auto& [busy_start, busy_end] : busy_[Index(device)]) {
    if (start + duration <= busy_start) break;  // fits in the gap before this interval
    start = std::max(start, busy_end);
  }
  return start;
}

void GapFiller::Place(int task, int device) {
  const double start = EarliestStart(task, device);
  const double end = start + tasks_.ComputeSeconds(task, device);
  schedule_.device[Index(task)] = device;
  schedule_.start_seconds[Index(task)] = start;
  schedule_.end_seconds[Index(task)] = end;
  auto& intervals = busy_[Index(device)];
  intervals.insert(std::upper_bound(intervals.begin(), intervals.end(), std::pair(start, end)),
                   {start, end});
  schedule_.makespan_seconds = std::max(schedule_.makespan_seconds, end);
}

void GapFiller::PlaceWhereItFinishesFirst(int task) {
  int best_device = -1;
  double best_end = kNever;
  for (int d = 0; d < tasks_.num_devices(); ++d) {
    const double end = EarliestStart(task, d) + tasks_.ComputeSeconds(task, d);
    if (end < best_end) {
      best_device = d;
      best_end = end;
    }
  }
  Place(task, best_device);
}

TaskSchedule ScheduleHeft(const TaskGraph& tasks) {
  const std::vector<double> upward_rank = UpwardRanks(tasks);
  // Costs are non-negative, so a predecessor's rank is never below its successor's; the index
  // breaks ties in topological order, which keeps the order a valid one.
  std::vector<int> order(Index(tasks.num_tasks()));
  for (int task = 0; task < tasks.num_tasks(); ++task) order[Index(task)] = task;
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return upward_rank[Index(a)] > upward_rank[Index(b)]; });
  GapFiller filler(tasks);
  for (int task : order) filler.PlaceWhereItFinishesFirst(task);
  return filler.schedule();
}

BaselineResult Heft(const PlacementProblem& problem) {
  return ScheduledBaseline("HEFT", problem, ScheduleHeft);
}

}  // namespace placer::baselines
