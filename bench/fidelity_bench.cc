// Simulator fidelity on this machine: profile the devices (`placer profile`'s code), then for N
// random placements of LeNet and of a branching graph over cpu:0 and cpu:1 (1 thread each),
// compare the simulated step time with the measured one. Each placement is measured in R
// interleaved rounds (5 warm-up + 5 timed steps each, the evaluator's median); its measured time
// is the median over rounds. Reports the median |simulated - measured| / measured, the Spearman
// rank correlation, and the measurement's rank correlation with itself (even against odd
// rounds), the ceiling any simulator can reach on the machine at that time; and, for the copies
// alone, the median over placements of simulated over measured copy seconds.
// Usage: fidelity_bench [placements=30] [rounds=6] [detail.csv]
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>

#include "bench/timing.h"
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

// Seconds a result says `device` was busy.
double BusyOn(const runtime::EvaluationResult& r, const std::string& device) {
  for (const runtime::DeviceStats& d : r.devices) {
    if (d.device == device) return d.busy_seconds;
  }
  return 0;
}

double TransferSeconds(const runtime::EvaluationResult& r) {
  double seconds = 0;
  for (const runtime::TransferStats& t : r.transfers) seconds += t.seconds;
  return seconds;
}

int64_t TransferredBytes(const runtime::EvaluationResult& r) {
  int64_t bytes = 0;
  for (const runtime::TransferStats& t : r.transfers) bytes += t.bytes;
  return bytes;
}

void Run(const std::string& name, const graph::Graph& g, int placements, int rounds,
         std::FILE* detail) {
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
  std::vector<graph::Placement> chosen;
  for (int p = 0; p < placements; ++p) {
    graph::Placement placement = graph::Placement::AllOn(g, names, 0);
    for (graph::OpId id : g.OpsInPhase(graph::Phase::kForward)) {
      placement.device_of_op[static_cast<size_t>(id)] = pick(rng);
    }
    chosen.push_back(std::move(placement));
  }
  std::vector<runtime::EvaluationResult> sims;
  for (const graph::Placement& placement : chosen) sims.push_back(simulated.Evaluate(placement));
  // Interleaved rounds, each placement in a fresh order per round, so that the machine's slow
  // phases (other tenants' memory traffic) fall on different placements each round.
  const size_t n = chosen.size();
  std::vector<std::vector<runtime::EvaluationResult>> rounds_of(n);
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  for (int round = 0; round < rounds; ++round) {
    std::shuffle(order.begin(), order.end(), rng);
    for (size_t p : order) rounds_of[p].push_back(measured.Evaluate(chosen[p]));
  }
  // A placement's measured step time: the median over rounds of each round's median step (what the
  // measured evaluator reports), also over the even and the odd rounds apart, whose rank
  // correlation is the measurement's agreement with itself: the ceiling of any simulator's.
  std::vector<double> sim_times, measured_all, measured_even, measured_odd;
  // Copies alone: simulated seconds over the executor's own, per placement that copies at all.
  std::vector<double> copy_ratios;
  for (size_t p = 0; p < n; ++p) {
    const auto& results = rounds_of[p];
    bool valid = sims[p].valid;
    for (const auto& r : results) valid = valid && r.valid;
    if (!valid) continue;
    sim_times.push_back(sims[p].step_seconds);
    std::vector<double> all, even, odd, copy_seconds;
    for (size_t r = 0; r < results.size(); ++r) {
      all.push_back(results[r].step_seconds);
      (r % 2 == 0 ? even : odd).push_back(results[r].step_seconds);
      copy_seconds.push_back(TransferSeconds(results[r]));
    }
    measured_all.push_back(bench::Median(all));
    if (const double measured_copies = bench::Median(copy_seconds); measured_copies > 0) {
      copy_ratios.push_back(TransferSeconds(sims[p]) / measured_copies);
    }
    measured_even.push_back(bench::Median(even));
    measured_odd.push_back(bench::Median(odd.empty() ? even : odd));
    if (detail != nullptr) {
      const runtime::EvaluationResult& m = results.front();
      fmt::print(detail, "\"{}\",{},{:.6f},{:.6f},{:.6f},{:.6f},{:.6f},{:.6f},{},{}\n", name, p,
                 sims[p].step_seconds, measured_all.back(), BusyOn(sims[p], names[0]),
                 BusyOn(sims[p], names[1]), BusyOn(m, names[0]), BusyOn(m, names[1]),
                 TransferredBytes(sims[p]), TransferredBytes(m));
    }
  }
  std::vector<double> errors;
  for (size_t i = 0; i < sim_times.size(); ++i) {
    errors.push_back(std::abs(sim_times[i] - measured_all[i]) / measured_all[i]);
  }
  std::sort(errors.begin(), errors.end());
  fmt::print(
      "{:<36} {:>3} placements x {} rounds  median |sim-meas|/meas {:>5.1f}%  p90 {:>5.1f}%  "
      "Spearman {:.3f}  (measurement with itself, even vs odd rounds: {:.3f})  measured "
      "{:.1f}..{:.1f} ms  copies simulated/measured {:.2f}\n",
      name, sim_times.size(), rounds, 100 * errors[errors.size() / 2],
      100 * errors[errors.size() * 9 / 10], Spearman(sim_times, measured_all),
      Spearman(measured_even, measured_odd),
      1e3 * *std::min_element(measured_all.begin(), measured_all.end()),
      1e3 * *std::max_element(measured_all.begin(), measured_all.end()),
      copy_ratios.empty() ? 0.0 : bench::Median(copy_ratios));
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const int placements = argc > 1 ? std::stoi(argv[1]) : 30;
  const int rounds = argc > 2 ? std::stoi(argv[2]) : 6;
  std::FILE* detail = argc > 3 ? std::fopen(argv[3], "w") : nullptr;
  if (detail != nullptr) {
    fmt::print(detail,
               "graph,placement,simulated,measured,sim_busy0,sim_busy1,"
               "meas_busy0,meas_busy1,sim_bytes,meas_bytes\n");
  }
  Run("LeNet, batch 256", graph::BuildLeNet({}), placements, rounds, detail);
  Run("parallel MLP 2 x 3 x 512, batch 256",
      graph::BuildParallelMlp({.batch_size = 256,
                               .in_features = 256,
                               .width = 512,
                               .depth = 3,
                               .branches = 2,
                               .classes = 10}),
      placements, rounds, detail);
  if (detail != nullptr) std::fclose(detail);
  return 0;
}
