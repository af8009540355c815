// The algorithmic baselines in one place: a single device, and every algorithm by name.
//
//   m-topo  Baechi's m-TOPO, uniform variant (m_topo.h)
//   m-etf   Baechi's m-ETF (list_scheduling.h)
//   m-sct   Baechi's m-SCT, LP by GLPK (m_sct.h)
//   heft    HEFT, insertion-based (list_scheduling.h)
//   cpop    CPOP, the critical path on one device, insertion-based (below)
//   metis   METIS k-way partitioning (partitioners.h)
//   scotch  Scotch static mapping (partitioners.h)
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "placer/baselines/list_scheduling.h"
#include "placer/baselines/m_sct.h"
#include "placer/baselines/m_topo.h"
#include "placer/baselines/partitioners.h"
#include "placer/baselines/problem.h"

namespace placer::baselines {

// Every group on device `device` (an index into problem.devices). Ignores memory: an over-capacity
// placement is reported in memory_warning. Throws std::invalid_argument for an index out of range.
BaselineResult SingleDevice(const PlacementProblem& problem, int device);

// CPOP (Topcuoglu, Hariri, Wu, IEEE TPDS 2002): a task's priority is its upward plus its downward
// rank; the critical path (the entry-to-exit path of the largest priority) all goes to the one
// device that computes it soonest; ready tasks are taken by priority, each other task to the
// device where it finishes earliest, all inserted into the earliest idle gap (list_scheduling.h's
// GapFiller). Ignores memory: an over-capacity placement is reported in memory_warning.
TaskSchedule ScheduleCpop(const TaskGraph& tasks);
BaselineResult Cpop(const PlacementProblem& problem);

// The names above, in that order.
const std::vector<std::string>& BaselineNames();

// Runs the algorithm `name` with its default options. Throws std::invalid_argument listing the
// names for an unknown one.
BaselineResult RunBaseline(std::string_view name, const PlacementProblem& problem);

}  // namespace placer::baselines
