// What each part of the search adds, on instances whose optimum is plain: `towers` independent
// MLP towers on as many simulated CPU workers (slow links), from the single-device warm start.
// For 2, 3 and 4 towers and 5 seeds: the full search (policy and refinement), the policy alone,
// refinement alone, and uniform random search with as many evaluations as the full search made,
// each against one tower per device. Medians over the seeds.
// Usage: search_bench [policy_steps=30]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "graph/grouping.h"
#include "graph/models.h"
#include "placer/search.h"
#include "placer/setup/simulated_problem.h"
#include "runtime/statistics.h"

namespace {

using namespace placer;
using runtime::Median;

graph::DeviceSet Workers(int count) {
  graph::DeviceSet devices;
  for (int i = 0; i < count; ++i) {
    devices.push_back({"cpu:" + std::to_string(i), graph::DeviceType::kCpu, i, 1, 0});
  }
  return devices;
}

void Run(int towers, int policy_steps) {
  sim::RooflineOptions costs_options;
  costs_options.cpu_to_cpu = {.seconds_per_byte = 5e-10, .latency_seconds = 50e-6};
  const sim::RooflineCostModel costs(costs_options);
  const setup::SimulatedProblem problem = setup::MakeSimulatedProblem(
      [towers](int64_t batch, int64_t normalizer) {
        return graph::BuildParallelMlp({.batch_size = batch,
                                        .in_features = 64,
                                        .width = 512,
                                        .depth = 3,
                                        .branches = towers,
                                        .classes = 10,
                                        .loss_normalizer = normalizer,
                                        .training_step = false});
      },
      64, 0.05, {graph::GroupingMethod::kOpPerGroup, 256}, Workers(towers), costs, {1});
  const int groups = problem.num_groups();
  search::Candidate single{1, std::vector<int>(static_cast<size_t>(groups), 0)};
  search::Candidate apart = single;
  for (int g = 0; g < groups; ++g) {
    const std::string& name =
        problem.base().op(problem.grouping.members[static_cast<size_t>(g)].front()).name;
    if (name.starts_with("tower"))
      apart.options[static_cast<size_t>(g)] = std::stoi(name.substr(5));
  }
  auto seconds = [&](const search::Candidate& c) {
    return problem.evaluator->Evaluate(std::span(&c, 1)).front().step_seconds;
  };
  const double optimum = seconds(apart);
  fmt::print(
      "\n{} towers on {} devices, {} groups: one device {:.3f} ms, one tower per device "
      "{:.3f} ms, lower bound {:.3f} ms\n",
      towers, towers, groups, seconds(single) * 1e3, optimum * 1e3, problem.LowerBound() * 1e3);
  fmt::print("{:>6} {:>22} {:>22} {:>22} {:>22}\n", "seed", "policy + refinement", "policy alone",
             "refinement alone", "random (same evals)");
  std::vector<double> full, policy, refine, random;
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    search::SearchOptions o;
    o.policy_steps = policy_steps;
    o.max_wall_seconds = 600;
    o.seed = seed;
    o.policy.hidden_size = 32;
    o.learner.samples_per_step = 32;
    o.final_refine_rounds = 100;
    const auto problem_of = problem.Problem({{"single device", single}});
    auto run = [&](bool use_policy, bool use_refinement) {
      search::SearchOptions options = o;
      options.use_policy = use_policy;
      options.use_refinement = use_refinement;
      return search::RunSearch(problem_of, options, nullptr);
    };
    const search::SearchOutcome a = run(true, true), b = run(true, false), c = run(false, true);
    const search::SearchOutcome d = search::RandomSearch(*problem.evaluator, a.evaluations, seed);
    auto cell = [&](const search::SearchOutcome& s) {
      return fmt::format("{:.3f} ({:.2f}x, {})", s.best.seconds * 1e3, s.best.seconds / optimum,
                         s.evaluations);
    };
    fmt::print("{:>6} {:>22} {:>22} {:>22} {:>22}\n", seed, cell(a), cell(b), cell(c), cell(d));
    full.push_back(a.best.seconds / optimum);
    policy.push_back(b.best.seconds / optimum);
    refine.push_back(c.best.seconds / optimum);
    random.push_back(d.best.seconds / optimum);
  }
  fmt::print("{:>6} {:>22.3f} {:>22.3f} {:>22.3f} {:>22.3f}   (median / one tower per device)\n",
             "median", Median(full), Median(policy), Median(refine), Median(random));
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::stoi(argv[1]) : 30;
  fmt::print(
      "search_bench: best step time in ms (its ratio to one tower per device, evaluations)\n");
  for (int towers : {2, 3, 4}) Run(towers, steps);
  return 0;
}
