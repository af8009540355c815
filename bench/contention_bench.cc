// How the devices' slowdown of each other is best timed for a data-parallel step: the profiler's
// contention phase with every device running the whole replicated step at once ("whole", what a
// profile without ProfileOptions::concurrent_shares does) against every device running its own
// replica in one executor ("shares", what `placer profile --data-parallel` does), each followed
// by the measured data-parallel step, on the d2l LeNet and the parallel MLP of fidelity_bench.
// Per round: both fitted slowdowns, the measured step, and each profile's simulated / measured.
//
// Usage: contention_bench [rounds=4]
#include <fmt/format.h>

#include <string>
#include <utility>
#include <vector>

#include "bench/fidelity_models.h"
#include "graph/data_parallel.h"
#include "runtime/measured_evaluator.h"
#include "runtime/profiler.h"
#include "runtime/sim/simulated_evaluator.h"

namespace {

using namespace placer;

graph::Device CpuWorker(int index) {
  return {.name = fmt::format("cpu:{}", index),
          .type = graph::DeviceType::kCpu,
          .index = index,
          .threads = 1};
}

double CpuSlowdown(const sim::ProfiledCostModel& profile) {
  return profile.FindContention(graph::DeviceType::kCpu).value_or(sim::ContentionSpec{}).slowdown;
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::stoi(argv[1]) : 4;
  const graph::DeviceSet devices = {CpuWorker(0), CpuWorker(1)};
  const std::vector<std::string> names = graph::DeviceNames(devices);
  const std::vector<std::pair<std::string, graph::ForwardBuilder>> models = {
      {"LeNet, batch 256", bench::LeNetShard},
      {"parallel MLP 2 x 3 x 512, batch 256", bench::FidelityMlpShard}};
  for (const auto& [name, forward] : models) {
    const graph::DataParallelGraph dp = graph::BuildDataParallel(
        forward, 256, names, std::vector<double>(devices.size(), 1.0), /*learning_rate=*/0.1);
    runtime::MeasuredEvaluator measure(dp.graph, devices, {.warmup_steps = 5, .timed_steps = 5});
    for (int round = 0; round < rounds; ++round) {
      // The two profiles take turns at going first, so neither is always nearer the measurement.
      sim::ProfiledCostModel whole, shares;
      for (int turn = 0; turn < 2; ++turn) {
        if ((turn + round) % 2 == 0) {
          whole = runtime::ProfileDevices(dp.graph, devices, {.model_name = name});
        } else {
          shares = runtime::ProfileDevices(dp.graph, devices,
                                           {.model_name = name, .concurrent_shares = dp.placement});
        }
      }
      const double measured = measure.Evaluate(dp.placement).step_seconds;
      const double from_whole =
          sim::SimulatedEvaluator(dp.graph, devices, whole).Evaluate(dp.placement).step_seconds;
      const double from_shares =
          sim::SimulatedEvaluator(dp.graph, devices, shares).Evaluate(dp.placement).step_seconds;
      fmt::print(
          "{}, round {}: slowdown whole {:.3f}, shares {:.3f}; data parallel measured {:.2f} ms; "
          "simulated / measured: whole {:.3f}, shares {:.3f}\n",
          name, round + 1, CpuSlowdown(whole), CpuSlowdown(shares), 1e3 * measured,
          from_whole / measured, from_shares / measured);
      std::fflush(stdout);
    }
  }
  return 0;
}
