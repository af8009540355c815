// The pipeline baseline (placer/baselines/pipeline.h) of simulated configs: the model's optimal
// contiguous stages over the config's devices, then every micro-batch count of the list that
// divides the batch (and that the model builds for) under GPipe and 1F1B, simulated with the
// config's cost model; each trial's step time and peak memory per device, the fastest marked.
// `memory_gib` > 0 caps every device's memory at that many GiB (0: the config's devices as they
// are), to find where GPipe runs out and 1F1B does not. `replicas` adds the DP x PP grid: R
// pipelines of D / R stages each, data parallel between them, for every R listed.
//
// Usage: pipeline_sim_bench <config.yaml> [micro_batches=1,2,4,8,16] [memory_gib=0] [replicas=1]
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <string>
#include <vector>

#include "bench/arguments.h"
#include "bench/timing.h"
#include "graph/device.h"
#include "graph/micro_batches.h"
#include "placer/baselines/pipeline.h"
#include "placer/config/config.h"
#include "placer/setup/devices.h"
#include "placer/setup/model_factory.h"

int main(int argc, char** argv) {
  using namespace placer;
  if (argc < 2) {
    fmt::print(stderr,
               "usage: pipeline_sim_bench <config.yaml> [micro_batches] [memory_gib] [replicas]\n");
    return 2;
  }
  const config::Config config = config::LoadConfig(argv[1]);
  std::vector<int> counts;
  for (const int m : bench::IntList(argc > 2 ? argv[2] : "1,2,4,8,16")) {
    if (config.model.batch_size % m == 0 &&
        !setup::BatchProblem(config, config.model.batch_size / m)) {
      counts.push_back(m);
    } else {
      fmt::print(
          "M = {}: left out (the batch of {} does not split into it, or the model does not "
          "build for {} rows)\n",
          m, config.model.batch_size, config.model.batch_size / m);
    }
  }
  graph::DeviceSet devices = setup::ResolveDevices(config);
  const double memory_gib = argc > 3 ? std::stod(argv[3]) : 0;
  if (memory_gib > 0) {
    for (graph::Device& d : devices) {
      d.memory_capacity = static_cast<int64_t>(memory_gib * (int64_t{1} << 30));
    }
  }
  const std::vector<int> replicas = bench::IntList(argc > 4 ? argv[4] : "1");
  const graph::Graph base = setup::BuildSingleModel(config);
  const auto costs = setup::CostModelFor(config);
  const auto start = bench::Clock::now();
  const baselines::PipelineBaselineResult result = baselines::PipelineBaseline(
      base, setup::ForwardBuilderFor(config), config.model.batch_size, config.model.learning_rate,
      devices, *costs, {.micro_batch_counts = counts, .replica_counts = replicas});
  fmt::print(
      "{}: {} devices, batch {}, stages end at forward op {} of the topological order; "
      "bottleneck estimate {:.3f} ms; {:.1f} s\n",
      argv[1], devices.size(), config.model.batch_size,
      fmt::join(result.stages.front().stage_end, "/"),
      result.stages.front().bottleneck_seconds * 1e3, bench::SecondsSince(start));
  fmt::print(
      "| R | M | schedule | simulated step | peak memory per device (GiB) |\n"
      "|---:|---:|---|---:|---|\n");
  for (size_t i = 0; i < result.trials.size(); ++i) {
    const baselines::PipelineTrial& t = result.trials[i];
    std::vector<std::string> peaks;
    for (const graph::DeviceStats& d : t.result.devices) {
      peaks.push_back(fmt::format("{:.2f}", static_cast<double>(d.peak_memory_bytes) / (1 << 30)));
    }
    fmt::print("| {} | {} | {} | {} | {} |\n", t.replicas, t.micro_batches,
               graph::ToString(t.schedule),
               t.result.valid ? fmt::format("{:.2f} ms{}", t.result.step_seconds * 1e3,
                                            static_cast<int>(i) == result.best ? " (best)" : "")
                              : "invalid: " + t.result.invalid_reason,
               fmt::join(peaks, " / "));
  }
  return 0;
}
