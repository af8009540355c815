// Cost of one policy step on this machine: sample K candidates of 256 groups over 8 devices
// (replica counts 1, 2, 4, 8: 15 options per group) and apply the PPO update (3 epochs), at
// LibTorch's default intra-op threads and at one thread.
// Usage: policy_bench [steps=10] [K=64]
#include <ATen/Parallel.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <random>

#include "graph/group_features.h"
#include "graph/grouping.h"
#include "graph/models.h"
#include "placer/learner.h"
#include "runtime/statistics.h"

int main(int argc, char** argv) {
  using namespace placer;
  using Clock = std::chrono::steady_clock;
  const int steps = argc > 1 ? std::stoi(argv[1]) : 10;
  const int k = argc > 2 ? std::stoi(argv[2]) : 64;
  // One tower of 127 Linear+ReLU layers, a classifier and the loss: exactly 256 forward groups.
  graph::Graph g = graph::BuildParallelMlp(
      {.batch_size = 8, .in_features = 8, .width = 8, .depth = 127, .branches = 1, .classes = 4});
  graph::Grouping grouping = graph::OpPerGroup(g);
  graph::GroupFeatures features = graph::ComputeGroupFeatures(g, grouping);
  const search::ActionSpace space(8, {1, 2, 4, 8});
  fmt::print(
      "policy_bench: {} groups, 8 devices, {} options, K = {}, PPO 3 epochs; median of {} "
      "steps after 2 warm-up steps\n",
      grouping.num_groups(), space.num_options(), k, steps);
  fmt::print("{:>8} {:>8} {:>14} {:>14} {:>14}\n", "threads", "hidden", "sample ms", "update ms",
             "step ms");
  const int default_threads = at::get_num_threads();
  for (int threads : {default_threads, 1}) {
    at::set_num_threads(threads);
    for (int hidden : {64, 128}) {
      search::Learner learner(features, space, {.hidden_size = hidden},
                              {.samples_per_step = k, .epochs = 3}, 1);
      std::mt19937 rng(2);
      std::uniform_real_distribution<double> reward(-1.0, -0.5);
      std::vector<double> sample_ms, update_ms, step_ms;
      for (int step = 0; step < steps + 2; ++step) {
        const auto t0 = Clock::now();
        search::Batch batch = learner.Sample(std::nullopt);
        const auto t1 = Clock::now();
        std::vector<double> rewards;
        for (int i = 0; i < k; ++i) rewards.push_back(reward(rng));
        learner.Update(batch, rewards);
        const auto t2 = Clock::now();
        if (step < 2) continue;
        sample_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        update_ms.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
        step_ms.push_back(std::chrono::duration<double, std::milli>(t2 - t0).count());
      }
      using runtime::Median;
      fmt::print("{:>8} {:>8} {:>14.1f} {:>14.1f} {:>14.1f}\n", threads, hidden, Median(sample_ms),
                 Median(update_ms), Median(step_ms));
    }
  }
  return 0;
}
