// The Megatron-style baseline (placer/baselines/megatron.h) of simulated configs: tensor-parallel
// size T x data-parallel size R over the config's devices, T within a host, each shape's
// simulated step time and peak memory per device beside the config's data parallelism (T = 1).
//
// Usage: megatron_sim_bench <config.yaml>...
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <string>
#include <vector>

#include "bench/timing.h"
#include "placer/baselines/megatron.h"
#include "placer/config/config.h"
#include "placer/setup/devices.h"
#include "placer/setup/model_factory.h"

int main(int argc, char** argv) {
  using namespace placer;
  if (argc < 2) {
    fmt::print(stderr, "usage: megatron_sim_bench <config.yaml>...\n");
    return 2;
  }
  for (int a = 1; a < argc; ++a) {
    const config::Config config = config::LoadConfig(argv[a]);
    const graph::DeviceSet devices = setup::ResolveDevices(config);
    const auto costs = setup::CostModelFor(config);
    std::vector<std::string> log;
    const auto start = bench::Clock::now();
    const baselines::MegatronBaselineResult result = baselines::MegatronBaseline(
        setup::BuildSingleModel(config), setup::ForwardBuilderFor(config), config.model.batch_size,
        config.model.learning_rate, devices, *costs, config.simulation.gpus_per_host, 2'000'000,
        &log);
    fmt::print("{}: {} devices, batch {}; {:.1f} s\n", argv[a], devices.size(),
               config.model.batch_size, bench::SecondsSince(start));
    for (const std::string& line : log) {
      if (line.find("left out") != std::string::npos) fmt::print("  {}\n", line);
    }
    fmt::print(
        "| T | P | M | R | sums per replica | simulated step | busy per device (ms) | copies "
        "(count, ms of link time) | peak memory per device (GiB) |\n"
        "|---:|---:|---:|---:|---:|---:|---|---|---|\n");
    for (size_t i = 0; i < result.trials.size(); ++i) {
      const baselines::MegatronTrial& t = result.trials[i];
      std::vector<std::string> peaks, busy;
      for (const graph::DeviceStats& d : t.result.devices) {
        peaks.push_back(
            fmt::format("{:.2f}", static_cast<double>(d.peak_memory_bytes) / (1 << 30)));
        busy.push_back(fmt::format("{:.1f}", d.busy_seconds * 1e3));
      }
      int copies = 0;
      double link_seconds = 0;
      for (const graph::TransferStats& c : t.result.transfers) {
        if (c.from == "host") continue;  // the minibatch
        copies += c.count;
        link_seconds += c.seconds;
      }
      fmt::print("| {} | {} | {} | {} | {} | {} | {} | {}, {:.1f} | {} |\n", t.tensor_ways,
                 t.pipeline_stages, t.micro_batches, t.replicas, t.partial_sums,
                 t.result.valid ? fmt::format("{:.2f} ms{}", t.result.step_seconds * 1e3,
                                              static_cast<int>(i) == result.best ? " (best)" : "")
                                : "invalid: " + t.result.invalid_reason,
                 fmt::join(busy, " / "), copies, link_seconds * 1e3, fmt::join(peaks, " / "));
    }
  }
  return 0;
}
