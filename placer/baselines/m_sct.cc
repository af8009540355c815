#include "placer/baselines/m_sct.h"

#include <fmt/format.h>
#include <glpk.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <vector>

#include "placer/baselines/list_scheduling.h"

namespace placer::baselines {

namespace {

struct GlpkProblemDeleter {
  void operator()(glp_prob* lp) const { glp_delete_prob(lp); }
};

// GLPK writes progress to standard output unless told not to (glp_scale_prob ignores msg_lev);
// the setting is GLPK's, so it is put back as it was.
class GlpkSilence {
 public:
  GlpkSilence() : previous_(glp_term_out(GLP_OFF)) {}
  ~GlpkSilence() { glp_term_out(previous_); }
  GlpkSilence(const GlpkSilence&) = delete;
  GlpkSilence& operator=(const GlpkSilence&) = delete;

 private:
  int previous_;
};

// Rows of the LP in GLPK's sparse triplet form (1-based; entry 0 is unused).
class LpRows {
 public:
  explicit LpRows(glp_prob* lp) : lp_(lp) {}
  // Adds `coefficients` (column, value) with bound type GLP_UP (<= bound) or GLP_LO (>= bound).
  void Add(const std::vector<std::pair<int, double>>& coefficients, int type, double bound) {
    const int row = glp_add_rows(lp_, 1);
    glp_set_row_bnds(lp_, row, type, type == GLP_LO ? bound : 0.0, type == GLP_UP ? bound : 0.0);
    for (const auto& [column, value] : coefficients) {
      rows_.push_back(row);
      columns_.push_back(column);
      values_.push_back(value);
    }
  }
  void Load() {
    glp_load_matrix(lp_, static_cast<int>(rows_.size()) - 1, rows_.data(), columns_.data(),
                    values_.data());
  }

 private:
  glp_prob* lp_;
  std::vector<int> rows_ = {0}, columns_ = {0};
  std::vector<double> values_ = {0.0};
};

}  // namespace

SctRelaxation SolveSctRelaxation(const TaskGraph& tasks) {
  const int num_edges = static_cast<int>(tasks.edges().size());
  const int num_tasks = tasks.num_tasks();
  SctRelaxation relaxation;
  relaxation.edge_communication.assign(Index(num_edges), 1.0);
  relaxation.start_seconds.assign(Index(num_tasks), 0.0);
  if (num_tasks == 0) return relaxation;

  // Times in units of the largest one keep the coefficients near 1, where the simplex tolerances
  // (absolute, around 1e-7) are meaningful: op times are often microseconds.
  std::vector<double> compute(Index(num_tasks)), communication(Index(num_edges));
  double unit = 0;
  for (int task = 0; task < num_tasks; ++task) {
    compute[Index(task)] = tasks.MeanComputeSeconds(task);
    unit = std::max(unit, compute[Index(task)]);
  }
  for (int e = 0; e < num_edges; ++e) {
    communication[Index(e)] = tasks.MeanCommunicationSeconds(e);
    unit = std::max(unit, communication[Index(e)]);
  }
  if (unit == 0) unit = 1;

  // Columns: x_e (1 .. E), s_i (E+1 .. E+N), w (E+N+1).
  std::unique_ptr<glp_prob, GlpkProblemDeleter> lp(glp_create_prob());
  glp_set_obj_dir(lp.get(), GLP_MIN);
  glp_add_cols(lp.get(), num_edges + num_tasks + 1);
  auto x = [](int edge) { return edge + 1; };
  auto s = [&](int task) { return num_edges + task + 1; };
  const int w = num_edges + num_tasks + 1;
  for (int e = 0; e < num_edges; ++e) glp_set_col_bnds(lp.get(), x(e), GLP_DB, 0.0, 1.0);
  for (int task = 0; task < num_tasks; ++task) glp_set_col_bnds(lp.get(), s(task), GLP_LO, 0, 0);
  glp_set_col_bnds(lp.get(), w, GLP_LO, 0.0, 0.0);
  glp_set_obj_coef(lp.get(), w, 1.0);

  LpRows rows(lp.get());
  for (int e = 0; e < num_edges; ++e) {
    const TaskEdge& edge = tasks.edges()[Index(e)];
    rows.Add({{s(edge.from), 1.0}, {s(edge.to), -1.0}, {x(e), communication[Index(e)] / unit}},
             GLP_UP, -compute[Index(edge.from)] / unit);
  }
  for (int task = 0; task < num_tasks; ++task) {
    rows.Add({{s(task), 1.0}, {w, -1.0}}, GLP_UP, -compute[Index(task)] / unit);
    for (const auto* incident : {&tasks.out_edges(task), &tasks.in_edges(task)}) {
      if (incident->size() < 2) continue;  // the constraint is sum >= 0: always true
      std::vector<std::pair<int, double>> sum;
      for (int e : *incident) sum.push_back({x(e), 1.0});
      rows.Add(sum, GLP_LO, static_cast<double>(incident->size()) - 1);
    }
  }
  rows.Load();

  const GlpkSilence silence;
  glp_scale_prob(lp.get(), GLP_SF_AUTO);
  glp_smcp parameters;
  glp_init_smcp(&parameters);
  parameters.msg_lev = GLP_MSG_OFF;
  parameters.presolve = GLP_ON;
  const int code = glp_simplex(lp.get(), &parameters);
  const int status = glp_get_status(lp.get());
  if (code != 0 || status != GLP_OPT) {
    throw BaselineError(fmt::format(
        "m-SCT: GLPK's simplex found no optimal solution of the SCT relaxation ({} tasks, {} "
        "edges; glp_simplex returned {}, status {})",
        num_tasks, num_edges, code, status));
  }
  relaxation.makespan_seconds = glp_get_obj_val(lp.get()) * unit;
  for (int e = 0; e < num_edges; ++e) {
    relaxation.edge_communication[Index(e)] = glp_get_col_prim(lp.get(), x(e));
  }
  for (int task = 0; task < num_tasks; ++task) {
    relaxation.start_seconds[Index(task)] = glp_get_col_prim(lp.get(), s(task)) * unit;
  }
  return relaxation;
}

std::vector<int> FavouriteChildren(const TaskGraph& tasks, const SctRelaxation& relaxation,
                                   double threshold) {
  const int num_edges = static_cast<int>(tasks.edges().size());
  std::vector<int> by_x(Index(num_edges));
  std::iota(by_x.begin(), by_x.end(), 0);
  std::stable_sort(by_x.begin(), by_x.end(), [&](int a, int b) {
    return relaxation.edge_communication[Index(a)] < relaxation.edge_communication[Index(b)];
  });
  std::vector<int> favourite_child(Index(tasks.num_tasks()), -1);
  std::vector<bool> has_favourite_parent(Index(tasks.num_tasks()), false);
  for (int e : by_x) {
    if (relaxation.edge_communication[Index(e)] >= threshold) break;
    const TaskEdge& edge = tasks.edges()[Index(e)];
    if (favourite_child[Index(edge.from)] != -1 || has_favourite_parent[Index(edge.to)]) continue;
    favourite_child[Index(edge.from)] = edge.to;
    has_favourite_parent[Index(edge.to)] = true;
  }
  return favourite_child;
}

BaselineResult MSct(const PlacementProblem& problem, const MSctOptions& options) {
  return ScheduledBaseline("m-SCT", problem, [&](const TaskGraph& tasks) {
    const SctRelaxation relaxation = SolveSctRelaxation(tasks);
    return ScheduleEarliestTaskFirst(
        tasks, FavouriteChildren(tasks, relaxation, options.favourite_child_threshold), "m-SCT");
  });
}

}  // namespace placer::baselines
