// Simulations per second of the simulator, on random placements: LeNet's training step over two
// CPU workers, and a training step of about 10,000 ops (a parallel MLP of 32 towers of 52 layers)
// over two CPU workers and over two GPUs plus two CPU workers; each without and with contention
// among devices of a kind (ContentionSpec), which re-times running work whenever a device starts
// or stops. Each figure is the median of 5 runs of at least half a second. Usage: sim_bench
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <string>
#include <vector>

#include "graph/device.h"
#include "graph/ir.h"
#include "graph/models.h"
#include "graph/placement.h"
#include "runtime/sim/cost_model.h"
#include "runtime/sim/simulator.h"

namespace {

using placer::graph::Device;
using placer::graph::DeviceSet;
using placer::graph::DeviceType;
using placer::graph::Graph;
using placer::graph::Placement;
using Clock = std::chrono::steady_clock;

constexpr int kRepetitions = 5;
constexpr double kMinimumRunSeconds = 0.5;

std::vector<Placement> RandomPlacements(const Graph& graph, const DeviceSet& devices, int count,
                                        uint32_t seed) {
  std::vector<std::string> names;
  for (const Device& device : devices) names.push_back(device.name);
  std::mt19937 random(seed);
  std::uniform_int_distribution<int> pick(0, static_cast<int>(devices.size()) - 1);
  std::vector<Placement> placements;
  for (int i = 0; i < count; ++i) {
    Placement placement = Placement::AllOn(graph, names, 0);
    for (int& device : placement.device_of_op) {
      if (device >= 0) device = pick(random);
    }
    placements.push_back(std::move(placement));
  }
  return placements;
}

// Median over kRepetitions runs of simulations per second, cycling through `placements`.
double MedianSimulationsPerSecond(const placer::sim::Simulator& simulator,
                                  const std::vector<Placement>& placements) {
  std::vector<double> rates;
  double checksum = 0;  // keeps the results observable
  for (int repetition = 0; repetition < kRepetitions; ++repetition) {
    int64_t simulations = 0;
    const Clock::time_point start = Clock::now();
    double elapsed = 0;
    while (elapsed < kMinimumRunSeconds) {
      for (const Placement& placement : placements) {
        checksum += simulator.Simulate(placement).step_seconds;
        ++simulations;
      }
      elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    }
    rates.push_back(static_cast<double>(simulations) / elapsed);
  }
  std::sort(rates.begin(), rates.end());
  if (checksum < 0) fmt::print("impossible: a negative step time\n");
  return rates[rates.size() / 2];
}

void Report(const std::string& label, const Graph& graph, const DeviceSet& devices,
            int num_placements, bool contention) {
  // With a receive cost between CPU workers, as `placer profile` fits one on this VM, so that the
  // simulator's per-input receive accounting is timed too; and, when asked, with the CPU workers
  // and the GPUs slowing each other down (a profile of the roofline's numbers and a contention).
  placer::sim::RooflineOptions roofline;
  roofline.cpu_to_cpu.receive_seconds_per_byte = 1.3e-10;
  placer::sim::ProfiledCostModel costs{placer::sim::RooflineCostModel(roofline)};
  if (contention) {
    costs.SetContention(DeviceType::kCpu, {.devices = 2, .slowdown = 1.3});
    costs.SetContention(DeviceType::kCuda, {.devices = 2, .slowdown = 1.1});
  }
  const Clock::time_point start = Clock::now();
  placer::sim::Simulator simulator(graph, devices, costs);
  const double setup = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<Placement> placements = RandomPlacements(graph, devices, num_placements, 1);
  const double rate = MedianSimulationsPerSecond(simulator, placements);
  fmt::print("{:<60} {:>6} ops  setup {:8.3f} ms  median {:12.0f} simulations/s\n",
             label + (contention ? ", contention" : ""), graph.num_ops(), setup * 1e3, rate);
}

Device Cpu(int index) { return {.name = fmt::format("cpu:{}", index), .index = index}; }
Device Cuda(int index) {
  return {.name = fmt::format("cuda:{}", index), .type = DeviceType::kCuda, .index = index};
}

}  // namespace

int main() {
  const Graph lenet = placer::graph::BuildLeNet({});
  placer::graph::ParallelMlpOptions options;
  options.branches = 32;
  options.depth = 52;
  options.width = 64;
  options.in_features = 64;
  const Graph mlp = placer::graph::BuildParallelMlp(options);
  for (bool contention : {false, true}) {
    Report("lenet, 2 cpu workers", lenet, {Cpu(0), Cpu(1)}, 1000, contention);
    Report("parallel mlp 32x52, 2 cpu workers", mlp, {Cpu(0), Cpu(1)}, 20, contention);
    Report("parallel mlp 32x52, 2 gpus + 2 cpu workers", mlp, {Cuda(0), Cuda(1), Cpu(0), Cpu(1)},
           20, contention);
  }
  return 0;
}
