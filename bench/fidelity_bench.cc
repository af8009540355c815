// Simulator fidelity on this machine: profile the devices (`placer profile`'s code), then for N
// random placements of LeNet and of a branching graph over cpu:0 and cpu:1 (1 thread each),
// compare the simulated step time with the measured one (5 warm-up + 5 timed steps, median).
// Reports the median |simulated - measured| / measured and the Spearman rank correlation.
// Usage: fidelity_bench [placements=30]
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "graph/models.h"
#include "runtime/measured_evaluator.h"
#include "runtime/profiler.h"
#include "runtime/sim/simulated_evaluator.h"

namespace {

using namespace placer;

std::vector<double> Ranks(const std::vector<double>& values) {
  std::vector<size_t> order(values.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return values[a] < values[b]; });
  std::vector<double> ranks(values.size());
  for (size_t i = 0; i < order.size();) {  // ties share their mean rank
    size_t j = i;
    while (j + 1 < order.size() && values[order[j + 1]] == values[order[i]]) ++j;
    for (size_t k = i; k <= j; ++k) ranks[order[k]] = 0.5 * static_cast<double>(i + j);
    i = j + 1;
  }
  return ranks;
}

double Spearman(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> ra = Ranks(a), rb = Ranks(b);
  double mean = 0.5 * static_cast<double>(a.size() - 1);
  double cov = 0, va = 0, vb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    cov += (ra[i] - mean) * (rb[i] - mean);
    va += (ra[i] - mean) * (ra[i] - mean);
    vb += (rb[i] - mean) * (rb[i] - mean);
  }
  return cov / std::sqrt(va * vb);
}

void Run(const std::string& name, const graph::Graph& g, int placements) {
  runtime::DeviceSet devices;
  for (int i = 0; i < 2; ++i) {
    devices.push_back({"cpu:" + std::to_string(i), runtime::DeviceType::kCpu, i, 1, 0});
  }
  const auto names = runtime::DeviceNames(devices);
  sim::ProfiledCostModel profile = runtime::ProfileDevices(g, devices, {.model_name = name});
  sim::SimulatedEvaluator simulated(g, devices, profile);
  runtime::MeasuredEvaluator measured(g, devices, {.warmup_steps = 5, .timed_steps = 5});
  std::mt19937 rng(42);
  std::uniform_int_distribution<int> pick(0, 1);
  std::vector<double> sim_times, real_times, errors;
  for (int p = 0; p < placements; ++p) {
    graph::Placement placement = graph::Placement::AllOn(g, names, 0);
    for (graph::OpId id : g.OpsInPhase(graph::Phase::kForward)) {
      placement.device_of_op[static_cast<size_t>(id)] = pick(rng);
    }
    runtime::EvaluationResult s = simulated.Evaluate(placement);
    runtime::EvaluationResult m = measured.Evaluate(placement);
    if (!s.valid || !m.valid) continue;
    sim_times.push_back(s.step_seconds);
    real_times.push_back(m.step_seconds);
    errors.push_back(std::abs(s.step_seconds - m.step_seconds) / m.step_seconds);
  }
  std::vector<double> sorted = errors;
  std::sort(sorted.begin(), sorted.end());
  fmt::print(
      "{:<34} {:>4} placements  median |sim-meas|/meas {:>6.1f}%  p90 {:>6.1f}%  "
      "Spearman {:.3f}  (measured {:.1f}..{:.1f} ms)\n",
      name, errors.size(), 100 * sorted[sorted.size() / 2], 100 * sorted[sorted.size() * 9 / 10],
      Spearman(sim_times, real_times),
      1e3 * *std::min_element(real_times.begin(), real_times.end()),
      1e3 * *std::max_element(real_times.begin(), real_times.end()));
}

}  // namespace

int main(int argc, char** argv) {
  const int placements = argc > 1 ? std::stoi(argv[1]) : 30;
  Run("LeNet, batch 256", graph::BuildLeNet({}), placements);
  Run("parallel MLP 2 x 3 x 512, batch 256",
      graph::BuildParallelMlp({.batch_size = 256,
                               .in_features = 256,
                               .width = 512,
                               .depth = 3,
                               .branches = 2,
                               .classes = 10}),
      placements);
  return 0;
}
