// List schedulers: Baechi's m-ETF (and the engine m-SCT shares with it) and HEFT. Each schedules
// the task graph (task_graph.h) on the devices and places every group where its task ran.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "placer/baselines/problem.h"
#include "placer/baselines/task_graph.h"

namespace placer::baselines {

struct TaskSchedule {
  std::vector<int> device;  // per task
  std::vector<double> start_seconds, end_seconds;
  double makespan_seconds = 0;
};

// A list scheduler as a baseline: `schedule` of the problem's task graph (after checking that
// every task fits some device), each group where its task ran, the makespan as the estimated step.
BaselineResult ScheduledBaseline(std::string algorithm, const PlacementProblem& problem,
                                 const std::function<TaskSchedule(const TaskGraph&)>& schedule);

// Baechi's m-ETF (beomyeol/baechi placer/m_etf.py), event-driven: a task becomes ready when its
// predecessors have finished. At each moment, for every ready task and every device that can hold
// it (MemoryLedger), schedule_ts = max(the latest arrival of its inputs on that device, the
// device's free time); each free device takes its ready task with the smallest (schedule_ts,
// topological index) if that time has come, and the earliest such pair starts first (ties: the
// earlier finish, then the lower device index). Time then advances to the next finish or
// schedule_ts.
//
// With `favourite_child` (per task, a task or -1; empty for plain m-ETF) the engine applies
// m-SCT's rule (m_sct.h): a device that has just finished a task whose favourite child is ready and
// starts earliest on this device stays "awake" for it, taking another task only when that task is
// urgent (its urgent_ts, the largest schedule_ts over the devices, has come).
//
// Throws BaselineError naming the task and every device's free memory when a ready task fits on no
// device (memory is never freed in the ledger's model, so waiting would not help).
TaskSchedule ScheduleEarliestTaskFirst(const TaskGraph& tasks,
                                       const std::vector<int>& favourite_child,
                                       std::string_view algorithm);

// m-ETF on the problem; estimated_step_seconds is the schedule's makespan.
BaselineResult MEtf(const PlacementProblem& problem);

// Each task's upward rank: its mean compute time plus the largest, over its successors, of the
// mean communication time to it and its rank (HEFT's and CPOP's priority).
std::vector<double> UpwardRanks(const TaskGraph& tasks);

// HEFT's insertion policy, shared by the list schedulers that use it: tasks placed one at a time,
// each (after its predecessors) into the earliest idle gap of a device that holds it once its
// inputs have arrived there.
class GapFiller {
 public:
  explicit GapFiller(const TaskGraph& tasks);
  // When `task` would start on `device`, in the earliest gap that fits it.
  double EarliestStart(int task, int device) const;
  void Place(int task, int device);
  // On the device where it finishes earliest (ties: the lowest index).
  void PlaceWhereItFinishesFirst(int task);
  const TaskSchedule& schedule() const { return schedule_; }

 private:
  const TaskGraph& tasks_;
  TaskSchedule schedule_;
  std::vector<std::vector<std::pair<double, double>>> busy_;  // per device, sorted by start
};

// HEFT (Topcuoglu, Hariri, Wu, IEEE TPDS 2002): tasks by decreasing upward rank (mean compute time
// plus the largest mean communication time + rank over its successors; ties by topological index),
// each to the device where it finishes earliest, inserted into the earliest idle gap that fits.
// It ignores memory: an over-capacity placement is reported in memory_warning.
TaskSchedule ScheduleHeft(const TaskGraph& tasks);
BaselineResult Heft(const PlacementProblem& problem);

}  // namespace placer::baselines
