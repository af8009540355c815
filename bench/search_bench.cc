// Learned search vs uniform random search at equal numbers of evaluations, on the simulated
// "independent heavy chains" instance (the larger one: 3 towers of depth 3 on 3 devices, 22
// groups) and the test's smaller one (2 towers, 15 groups, optimum known by enumeration).
// Prints both best-so-far curves and the medians over 5 seeds.
// Usage: search_bench [policy_steps=150]
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "graph/grouping.h"
#include "graph/models.h"
#include "placer/search.h"
#include "runtime/sim/simulated_evaluator.h"

namespace {

using namespace placer;

double BestAt(const search::SearchOutcome& o, int evaluations) {
  double best = INFINITY;
  for (const search::CurvePoint& p : o.curve) {
    if (p.evaluations <= evaluations) best = std::min(best, p.best_seconds);
  }
  return best;
}

void Run(int branches, int policy_steps) {
  graph::Graph g = graph::BuildParallelMlp({.batch_size = 64,
                                            .in_features = 64,
                                            .width = 512,
                                            .depth = 3,
                                            .branches = branches,
                                            .classes = 10});
  graph::Grouping grouping = graph::OpPerGroup(g);
  runtime::DeviceSet devices;
  for (int i = 0; i < branches; ++i) {
    devices.push_back({"cpu:" + std::to_string(i), runtime::DeviceType::kCpu, i, 1, 0});
  }
  sim::RooflineOptions costs_options;
  costs_options.cpu_to_cpu = {.seconds_per_byte = 5e-10, .latency_seconds = 50e-6};
  sim::RooflineCostModel costs(costs_options);
  sim::SimulatedEvaluator evaluator(g, devices, costs);
  const auto names = runtime::DeviceNames(devices);
  double single = evaluator.Evaluate(graph::Placement::AllOn(g, names, 0)).step_seconds;
  fmt::print(
      "\n{} towers on {} devices, {} groups; single device {:.3f} ms, lower bound {:.3f} ms\n",
      branches, branches, grouping.num_groups(), single * 1e3,
      evaluator.lower_bound().seconds * 1e3);
  std::vector<double> learned, random;
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    search::SearchOptions o;
    o.policy_steps = policy_steps;
    o.max_evaluations = 100000;
    o.seed = seed;
    o.policy.hidden_size = 64;
    search::SearchOutcome policy = search::RunSearch(g, grouping, evaluator, names, o);
    search::SearchOutcome baseline =
        search::RandomSearch(g, grouping, evaluator, names, policy.evaluations, seed);
    learned.push_back(policy.best_seconds);
    random.push_back(baseline.best_seconds);
    if (seed == 1) {
      fmt::print("best-so-far (ms) by evaluations, seed 1:\n{:>12} {:>10} {:>10}\n", "evaluations",
                 "learned", "random");
      for (int e : {4, 10, 20, 50, 100, 150, 200, 300, 400, 600}) {
        if (e > policy.evaluations) break;
        fmt::print("{:>12} {:>10.3f} {:>10.3f}\n", e, BestAt(policy, e) * 1e3,
                   BestAt(baseline, e) * 1e3);
      }
    }
    fmt::print("seed {}: {} evaluations, learned {:.3f} ms, random {:.3f} ms\n", seed,
               policy.evaluations, policy.best_seconds * 1e3, baseline.best_seconds * 1e3);
  }
  std::sort(learned.begin(), learned.end());
  std::sort(random.begin(), random.end());
  fmt::print("median over 5 seeds: learned {:.3f} ms, random {:.3f} ms (random / learned {:.3f})\n",
             learned[2] * 1e3, random[2] * 1e3, random[2] / learned[2]);
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::stoi(argv[1]) : 150;
  Run(2, steps);
  Run(3, steps);
  return 0;
}
