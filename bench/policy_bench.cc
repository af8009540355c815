// Cost of one policy step on this machine: sample K=4 placements of 256 groups and apply the
// REINFORCE update (target: under 50 ms). Usage: policy_bench [steps=20]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <random>

#include "graph/grouping.h"
#include "graph/models.h"
#include "placer/reinforce.h"

int main(int argc, char** argv) {
  using namespace placer;
  using Clock = std::chrono::steady_clock;
  const int steps = argc > 1 ? std::stoi(argv[1]) : 20;
  // One tower of 127 Linear+ReLU layers, a classifier and the loss: exactly 256 forward groups.
  graph::Graph g = graph::BuildParallelMlp(
      {.batch_size = 8, .in_features = 8, .width = 8, .depth = 127, .branches = 1, .classes = 4});
  graph::Grouping grouping = graph::OpPerGroup(g);
  graph::GroupFeatures features = graph::ComputeGroupFeatures(g, grouping);
  fmt::print("policy_bench: {} groups, 4 devices, K = 4, {} steps after 3 warm-up steps\n",
             grouping.num_groups(), steps);
  fmt::print("{:>8} {:>14} {:>14} {:>14}\n", "hidden", "sample ms", "update ms", "step ms");
  for (int hidden : {64, 128, 256}) {
    search::Reinforce learner(features, 4, {.hidden_size = hidden}, {.samples_per_step = 4}, 1);
    std::mt19937 rng(2);
    std::uniform_real_distribution<double> reward(-1.0, -0.5);
    std::vector<double> sample_ms, update_ms, step_ms;
    for (int step = 0; step < steps + 3; ++step) {
      auto t0 = Clock::now();
      auto placements = learner.Sample();
      auto t1 = Clock::now();
      learner.Update({reward(rng), reward(rng), reward(rng), reward(rng)});
      auto t2 = Clock::now();
      if (step < 3) continue;
      sample_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      update_ms.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
      step_ms.push_back(std::chrono::duration<double, std::milli>(t2 - t0).count());
    }
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    fmt::print("{:>8} {:>14.2f} {:>14.2f} {:>14.2f}\n", hidden, median(sample_ms),
               median(update_ms), median(step_ms));
  }
  return 0;
}
