// Baechi's m-SCT (beomyeol/baechi placer/m_sct.py): m-ETF plus favourite children from the linear
// relaxation of Hanen and Munier's small-communication-time (SCT) schedule, solved with GLPK's
// simplex.
#pragma once

#include <vector>

#include "placer/baselines/problem.h"
#include "placer/baselines/task_graph.h"

namespace placer::baselines {

struct MSctOptions {
  // An edge whose relaxed x is below this is a favourite-child edge (Baechi's sct_threshold flag,
  // 0.1; its function default is 0.5).
  double favourite_child_threshold = 0.1;
};

// The LP over the task graph, with p_i = task i's mean compute time over the devices and c_ij =
// the edge's mean communication time over ordered pairs of distinct devices (Baechi's devices are
// identical; means are the heterogeneous generalisation):
//   minimise w
//   s_i + p_i + c_ij x_ij <= s_j   for every edge i -> j  (x_ij = 1: the edge pays communication)
//   s_i + p_i <= w                  for every task
//   sum_j x_ij >= outdeg(i) - 1     at most one favourite child
//   sum_i x_ij >= indeg(j) - 1      at most one favourite parent
//   0 <= x_ij <= 1, s_i >= 0
struct SctRelaxation {
  double makespan_seconds = 0;             // w at the optimum
  std::vector<double> edge_communication;  // x per edge of TaskGraph::edges()
  std::vector<double> start_seconds;       // s per task
};
// Throws BaselineError when GLPK does not report an optimal solution.
SctRelaxation SolveSctRelaxation(const TaskGraph& tasks);

// Favourite child per task (or -1) from the relaxation: edges with x below `threshold`, taken in
// increasing x (ties: edge order), each kept only while its parent has no favourite child and its
// child no favourite parent yet. Baechi rounds every edge and then overwrites, which can leave a
// parent with a child that another parent claimed; taking them in order keeps both constraints.
std::vector<int> FavouriteChildren(const TaskGraph& tasks, const SctRelaxation& relaxation,
                                   double threshold);

// m-SCT: the relaxation, its favourite children, then the m-ETF engine with the favourite-child
// rule (list_scheduling.h). estimated_step_seconds is the schedule's makespan.
BaselineResult MSct(const PlacementProblem& problem, const MSctOptions& options = {});

}  // namespace placer::baselines
