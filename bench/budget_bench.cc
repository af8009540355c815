// How the policy and refinement share the search's budget (search.budget_split), at equal
// simulator evaluations: the whole search loop (placer/search.h), warm starts included.
//
//   budget_bench configs SEEDS BUDGETS CONFIG...
//     The configs' problems (their models, machines and every baseline as warm starts).
//   budget_bench validate SEEDS BUDGETS PROBLEMS MAX_GROUPS
//     Generated problems of a seed no pretraining uses (placer/setup/pretraining.h's corpus,
//     batches 32, 128, 512): where settings are tried, never on issue 27's held-out set.
//
// Arms, each run once per budget E of BUDGETS ("512,2048": max_evaluations = E, the wall time
// unbounded) and seed: the policy alone, refinement alone, policy + refinement with the fixed
// split, and with the earned split. Prints per problem and budget each arm's median best step
// time over the seeds; then, per budget, each arm's geometric mean relative to refinement alone,
// and the earned split against the better of refinement alone and the fixed split: win / tie /
// loss with a 0.5% band, and its worst ratio.
//
// With BUDGET_BENCH_POLICY=FILE in the environment, the arms with the policy use the graph
// network pretrained into FILE (search.policy_network: graph, search.policy_file: FILE) in place
// of the default policy.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <sstream>

#include "bench/arguments.h"
#include "placer/config/config.h"
#include "placer/search.h"
#include "placer/setup/pretraining.h"
#include "placer/setup/search_setup.h"
#include "placer/setup/simulated_problem.h"
#include "runtime/statistics.h"

namespace {

using namespace placer;
constexpr double kInfinity = std::numeric_limits<double>::infinity();

struct Arm {
  const char* name;
  bool policy;
  bool refinement;
  search::BudgetSplit split;
};
constexpr std::array<Arm, 4> kArms = {{
    {"policy alone", true, false, search::BudgetSplit::kFixed},
    {"refinement alone", false, true, search::BudgetSplit::kFixed},
    {"fixed split", true, true, search::BudgetSplit::kFixed},
    {"earned split", true, true, search::BudgetSplit::kEarned},
}};
constexpr size_t kRefinementAlone = 1, kFixed = 2, kEarned = 3;

using Medians = std::array<double, kArms.size()>;

struct Tally {
  std::vector<std::string> problems;
  std::map<int, std::vector<Medians>> medians;  // [budget][problem]
};

double BestWithin(const search::SearchProblem& problem, const Arm& arm, uint64_t seed, int budget) {
  search::SearchOptions o;
  o.seed = seed;
  o.max_evaluations = budget;
  o.max_wall_seconds = 1e6;
  o.use_policy = arm.policy;
  o.use_refinement = arm.refinement;
  o.budget_split = arm.split;
  if (const char* file = std::getenv("BUDGET_BENCH_POLICY"); file != nullptr && arm.policy) {
    o.policy.kind = search::PolicyKind::kGraph;
    o.policy.pretrained_file = file;
  }
  const search::SearchOutcome outcome = search::RunSearch(problem, o, nullptr);
  return outcome.found_valid ? outcome.best.seconds : kInfinity;
}

void Compare(const std::string& name, const search::SearchProblem& problem, int seeds,
             const std::vector<int>& budgets, Tally& tally) {
  fmt::print("\n{} ({} groups, {} warm starts)\n", name, problem.evaluator->num_groups(),
             problem.warm_starts.size());
  fmt::print("{:>6}", "E");
  for (const Arm& arm : kArms) fmt::print(" {:>17}", arm.name);
  fmt::print(" {:>12}\n", "earned/refin");
  for (int budget : budgets) {
    Medians median{};
    for (size_t a = 0; a < kArms.size(); ++a) {
      std::vector<double> best;
      for (int seed = 1; seed <= seeds; ++seed) {
        best.push_back(BestWithin(problem, kArms[a], static_cast<uint64_t>(seed), budget));
      }
      median[a] = runtime::Median(best);
    }
    tally.medians[budget].push_back(median);
    fmt::print("{:>6}", budget);
    for (double m : median) fmt::print(" {:>14.3f} ms", m * 1e3);
    fmt::print(" {:>12.3f}\n", median[kEarned] / median[kRefinementAlone]);
    std::fflush(stdout);
  }
  tally.problems.push_back(name);
}

void Summarise(const Tally& tally, int seeds) {
  fmt::print(
      "\nover {} problems, {} seeds each (medians over seeds), relative to refinement alone:\n",
      tally.problems.size(), seeds);
  fmt::print("{:>6}", "E");
  for (const Arm& arm : kArms) fmt::print(" {:>17}", arm.name);
  fmt::print(" {:>26} {:>8}\n", "earned vs best other: w/t/l", "worst");
  for (const auto& [budget, rows] : tally.medians) {
    fmt::print("{:>6}", budget);
    for (size_t a = 0; a < kArms.size(); ++a) {
      double sum = 0;
      for (const Medians& m : rows) sum += std::log(m[a] / m[kRefinementAlone]);
      fmt::print(" {:>17.3f}", std::exp(sum / static_cast<double>(rows.size())));
    }
    std::array<int, 3> wtl{};
    double worst = 0;
    for (const Medians& m : rows) {
      const double r = m[kEarned] / std::min(m[kRefinementAlone], m[kFixed]);
      ++wtl[r < 0.995 ? 0 : r <= 1.005 ? 1 : 2];
      worst = std::max(worst, r);
    }
    fmt::print(" {:>26} {:>8.3f}\n", fmt::format("{}/{}/{}", wtl[0], wtl[1], wtl[2]), worst);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 6 && std::string(argv[1]) == "validate") {
    const int seeds = std::stoi(argv[2]);
    const std::vector<int> budgets = bench::IntList(argv[3]);
    const int problems = std::stoi(argv[4]);
    const setup::PretrainOptions o = setup::ValidationProblems(std::stoi(argv[5]));
    Tally tally;
    for (int i = 0; i < problems; ++i) {
      const setup::CorpusProblem corpus = setup::CorpusProblemFor(o, 0, i);
      const setup::CorpusInstance instance(corpus, o);
      search::SearchProblem problem;
      problem.evaluator = instance.problem->evaluator.get();
      problem.features = instance.problem->features;
      problem.seconds_per_byte = instance.seconds_per_byte;
      for (size_t s = 0; s < instance.starts.size(); ++s) {
        problem.warm_starts.push_back({fmt::format("start {}", s), instance.starts[s]});
      }
      Compare(corpus.Describe(), problem, seeds, budgets, tally);
    }
    Summarise(tally, seeds);
    return 0;
  }
  if (argc < 5 || std::string(argv[1]) != "configs") {
    fmt::print(stderr,
               "usage: budget_bench configs SEEDS BUDGETS CONFIG...\n"
               "       budget_bench validate SEEDS BUDGETS PROBLEMS MAX_GROUPS\n");
    return 2;
  }
  const int seeds = std::stoi(argv[2]);
  const std::vector<int> budgets = bench::IntList(argv[3]);
  Tally tally;
  for (int a = 4; a < argc; ++a) {
    std::ostringstream quiet;
    const auto s = setup::BuildSearchSetup(config::LoadConfig(argv[a]), quiet);
    Compare(argv[a], s->Problem(), seeds, budgets, tally);
  }
  Summarise(tally, seeds);
  return 0;
}
