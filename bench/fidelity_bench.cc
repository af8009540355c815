// Simulator fidelity on this machine: for N random placements of LeNet and of a branching graph
// over cpu:0 and cpu:1 (1 thread each; or the devices named, e.g. cpu:0,cuda:0), and for the
// placements a user compares against (every op on each device, data parallel over all devices,
// the expert's model parallelism), compare the simulated step time with the measured one. R
// rounds; each profiles the devices (`placer profile`'s code) for the model and for its
// data-parallel replica graph, then measures every placement once (5 warm-up + 5 timed steps, the
// evaluator's median) in a fresh order. A placement's measured time is its median over rounds; it
// is simulated with the median of the R profiles (each op's and each link field's median), taken
// over the same minutes as the measurements, and also with the first round's profile alone, as
// `placer profile` then `evaluate --simulate` would, with the median profile less its receive
// costs (LinkSpec::receive_seconds_per_byte) and with it less its contention (ContentionSpec:
// the devices as if each ran alone), and with the roofline model of a simulation without a
// profile. For the random placements it reports the median
// |simulated - measured| / measured, the Spearman rank correlation, the measurement's rank
// correlation with itself (even against odd rounds), the ceiling any simulator can reach on the
// machine at that time, and for the copies alone the median over placements of simulated over
// measured copy seconds; for each named placement, simulated over measured.
//
// Usage: fidelity_bench [placements=30] [rounds=6] [detail.csv|-] [devices=cpu:0,cpu:1]
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>

#include "bench/fidelity_models.h"
#include "bench/timing.h"
#include "graph/data_parallel.h"
#include "graph/models.h"
#include "graph/placement.h"
#include "runtime/measured_evaluator.h"
#include "runtime/profiler.h"
#include "runtime/sim/simulated_evaluator.h"
#include "runtime/statistics.h"

namespace {

using namespace placer;

// Seconds a result says `device` was busy.
double BusyOn(const graph::EvaluationResult& r, const std::string& device) {
  for (const graph::DeviceStats& d : r.devices) {
    if (d.device == device) return d.busy_seconds;
  }
  return 0;
}

double TransferSeconds(const graph::EvaluationResult& r) {
  double seconds = 0;
  for (const graph::TransferStats& t : r.transfers) seconds += t.seconds;
  return seconds;
}

int64_t TransferredBytes(const graph::EvaluationResult& r) {
  int64_t bytes = 0;
  for (const graph::TransferStats& t : r.transfers) bytes += t.bytes;
  return bytes;
}

// Each op's and each link field's median over `profiles` (of `graph` on `devices`).
sim::ProfiledCostModel MedianProfile(const std::vector<sim::ProfiledCostModel>& profiles,
                                     const graph::Graph& g, const graph::DeviceSet& devices) {
  sim::ProfiledCostModel merged;
  merged.metadata() = profiles.front().metadata();
  for (graph::OpId id = 0; id < static_cast<graph::OpId>(g.num_ops()); ++id) {
    for (const graph::Device& device : devices) {
      std::vector<double> seconds;
      for (const auto& profile : profiles) {
        if (auto s = profile.FindOpSeconds(g.op(id).name, device.name)) seconds.push_back(*s);
      }
      if (!seconds.empty()) merged.SetOpSeconds(g.op(id).name, device.name, bench::Median(seconds));
    }
  }
  for (const graph::Device& from : devices) {
    for (const graph::Device& to : devices) {
      std::vector<double> per_byte, latency, receive;
      for (const auto& profile : profiles) {
        if (auto link = profile.FindLink(from.name, to.name)) {
          per_byte.push_back(link->seconds_per_byte);
          latency.push_back(link->latency_seconds);
          receive.push_back(link->receive_seconds_per_byte);
        }
      }
      if (per_byte.empty()) continue;
      merged.SetLink(from.name, to.name,
                     {.seconds_per_byte = bench::Median(per_byte),
                      .latency_seconds = bench::Median(latency),
                      .receive_seconds_per_byte = bench::Median(receive)});
    }
  }
  for (graph::DeviceType type : {graph::DeviceType::kCpu, graph::DeviceType::kCuda}) {
    std::vector<double> slowdown;
    int devices_busy = 0;
    for (const auto& profile : profiles) {
      if (auto contention = profile.FindContention(type)) {
        slowdown.push_back(contention->slowdown);
        devices_busy = contention->devices;
      }
    }
    if (!slowdown.empty()) {
      merged.SetContention(type, {.devices = devices_busy, .slowdown = bench::Median(slowdown)});
    }
  }
  return merged;
}

// A placement's measurements: the median over rounds, over the even and the odd rounds apart, and
// of the executor's copy seconds; the fastest and slowest round (how far the measurement strays
// from its own median: no simulator can come closer to one round than that).
struct Measured {
  double all = 0, even = 0, odd = 0, copy_seconds = 0, fastest = 0, slowest = 0;
};

void Report(const std::string& label, const std::vector<graph::EvaluationResult>& sims,
            const std::vector<Measured>& measured) {
  std::vector<double> sim_times, measured_all, measured_even, measured_odd, errors, copy_ratios;
  for (size_t p = 0; p < sims.size(); ++p) {
    sim_times.push_back(sims[p].step_seconds);
    measured_all.push_back(measured[p].all);
    measured_even.push_back(measured[p].even);
    measured_odd.push_back(measured[p].odd);
    errors.push_back(std::abs(sims[p].step_seconds - measured[p].all) / measured[p].all);
    if (measured[p].copy_seconds > 0) {
      copy_ratios.push_back(TransferSeconds(sims[p]) / measured[p].copy_seconds);
    }
  }
  std::sort(errors.begin(), errors.end());
  fmt::print(
      "  {:<32} median |sim-meas|/meas {:>5.1f}%  p90 {:>5.1f}%  Spearman {:.3f}  (measurement "
      "with itself, even vs odd rounds: {:.3f})  measured {:.1f}..{:.1f} ms  copies "
      "simulated/measured {:.2f}\n",
      label, 100 * errors[errors.size() / 2], 100 * errors[errors.size() * 9 / 10],
      runtime::Spearman(sim_times, measured_all), runtime::Spearman(measured_even, measured_odd),
      1e3 * *std::min_element(measured_all.begin(), measured_all.end()),
      1e3 * *std::max_element(measured_all.begin(), measured_all.end()),
      copy_ratios.empty() ? 0.0 : bench::Median(copy_ratios));
}

// "cpu:0,cuda:0" -> CPU workers of one thread each, GPUs.
graph::DeviceSet ParseDevices(const std::string& list) {
  graph::DeviceSet devices;
  std::stringstream stream(list);
  for (std::string name; std::getline(stream, name, ',');) {
    devices.push_back(graph::DeviceFromName(name));
  }
  if (devices.size() < 2) throw std::invalid_argument("fidelity_bench: name at least two devices");
  return devices;
}

// A placement to judge, of the model (graph 0) or of its data-parallel replica graph (graph 1).
struct Case {
  std::string label;  // "random", or the placement's name
  size_t graph = 0;
  graph::Placement placement;
};

void ReportNamed(const std::vector<std::string>& labels,
                 const std::vector<std::vector<graph::EvaluationResult>>& sims,
                 const std::vector<std::string>& variants, const std::vector<Measured>& measured) {
  for (size_t p = 0; p < labels.size(); ++p) {
    std::string ratios;
    for (size_t v = 0; v < variants.size(); ++v) {
      ratios += fmt::format("  {} {:.3f}", variants[v], sims[v][p].step_seconds / measured[p].all);
    }
    fmt::print(
        "  {:<40} measured {:7.2f} ms (rounds {:.2f} to {:.2f} of it)  simulated {:7.2f} ms  "
        "simulated/measured:{}\n",
        labels[p] + ":", 1e3 * measured[p].all, measured[p].fastest / measured[p].all,
        measured[p].slowest / measured[p].all, 1e3 * sims[0][p].step_seconds, ratios);
  }
}

void Run(const std::string& name, const graph::Graph& g, int64_t batch,
         const graph::ForwardBuilder& forward, double learning_rate,
         const std::vector<std::pair<std::string, graph::Placement>>& experts,
         const graph::DeviceSet& devices, int placements, int rounds, std::FILE* detail) {
  const auto names = graph::DeviceNames(devices);
  const graph::DataParallelGraph dp = graph::BuildDataParallel(
      forward, batch, names, std::vector<double>(devices.size(), 1.0), learning_rate);
  const std::vector<const graph::Graph*> graphs = {&g, &dp.graph};
  std::vector<std::unique_ptr<runtime::MeasuredEvaluator>> measurers;
  for (const graph::Graph* graph : graphs) {
    measurers.push_back(std::make_unique<runtime::MeasuredEvaluator>(
        *graph, devices, runtime::MeasurementOptions{.warmup_steps = 5, .timed_steps = 5}));
  }
  std::mt19937 rng(42);
  std::uniform_int_distribution<int> pick(0, static_cast<int>(devices.size()) - 1);
  std::vector<Case> cases;
  for (int p = 0; p < placements; ++p) {
    graph::Placement placement = graph::Placement::AllOn(g, names, 0);
    for (graph::OpId id : g.OpsInPhase(graph::Phase::kForward)) {
      placement.device_of_op[static_cast<size_t>(id)] = pick(rng);
    }
    cases.push_back({"random", 0, std::move(placement)});
  }
  for (size_t d = 0; d < devices.size(); ++d) {
    cases.push_back(
        {"every op on " + names[d], 0, graph::Placement::AllOn(g, names, static_cast<int>(d))});
  }
  cases.push_back(
      {fmt::format("data parallel ({})", fmt::join(dp.shard_sizes, "/")), 1, dp.placement});
  for (const auto& [label, placement] : experts) cases.push_back({label, 0, placement});
  // Interleaved rounds, each placement in a fresh order per round, so that the machine's slow
  // phases (other tenants' memory traffic) fall on different placements each round; each round
  // starts with the profiles, so that they see the same phases as the measurements.
  const size_t n = cases.size();
  std::vector<std::vector<sim::ProfiledCostModel>> profiles(graphs.size());
  std::vector<std::vector<graph::EvaluationResult>> rounds_of(n);
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  for (int round = 0; round < rounds; ++round) {
    for (size_t i = 0; i < graphs.size(); ++i) {
      // The replica graph's contention with each device running its replica, as measured.
      profiles[i].push_back(runtime::ProfileDevices(
          *graphs[i], devices,
          {.model_name = name,
           .concurrent_shares = i == 1 ? std::optional(dp.placement) : std::nullopt}));
    }
    std::shuffle(order.begin(), order.end(), rng);
    for (size_t p : order)
      rounds_of[p].push_back(measurers[cases[p].graph]->Evaluate(cases[p].placement));
  }
  // Per graph, the simulators of each variant: the median profile, the first round's, the median
  // without the ops' receive cost, the median without contention, and the roofline model that
  // `evaluate --simulate` uses without a profile (uncalibrated: how far off is it here?).
  const std::vector<std::string> variants = {"median", "first", "no receive", "no contention",
                                             "roofline"};
  const sim::RooflineCostModel roofline;
  std::vector<std::vector<std::unique_ptr<sim::SimulatedEvaluator>>> simulators(graphs.size());
  for (size_t i = 0; i < graphs.size(); ++i) {
    const sim::ProfiledCostModel merged = MedianProfile(profiles[i], *graphs[i], devices);
    std::string fitted;
    for (graph::DeviceType type : {graph::DeviceType::kCpu, graph::DeviceType::kCuda}) {
      if (auto contention = merged.FindContention(type)) {
        fitted += fmt::format(" {} slowdown {:.3f} with {} busy;", graph::DeviceTypeName(type),
                              contention->slowdown, contention->devices);
      }
    }
    for (const graph::Device& from : devices) {
      for (const graph::Device& to : devices) {
        if (auto link = merged.FindLink(from.name, to.name)) {
          fitted += fmt::format(" {}->{} {:.3g} s/B + {:.3g} s, receive {:.3g} s/B;", from.name,
                                to.name, link->seconds_per_byte, link->latency_seconds,
                                link->receive_seconds_per_byte);
        }
      }
    }
    fmt::print("{}, {}: median profile:{}\n", name, i == 0 ? "model" : "replica graph", fitted);
    sim::ProfiledCostModel without_receive = merged;
    for (const graph::Device& from : devices) {
      for (const graph::Device& to : devices) {
        if (auto link = merged.FindLink(from.name, to.name)) {
          link->receive_seconds_per_byte = 0;
          without_receive.SetLink(from.name, to.name, *link);
        }
      }
    }
    // The ablation of issue 21: the devices' slowdown of each other left out.
    sim::ProfiledCostModel without_contention = merged;
    without_contention.ClearContention();
    // The simulators take what they need from a cost model when built (these die with the loop).
    for (const sim::CostModel* costs : std::initializer_list<const sim::CostModel*>{
             &merged, &profiles[i].front(), &without_receive, &without_contention, &roofline}) {
      simulators[i].push_back(
          std::make_unique<sim::SimulatedEvaluator>(*graphs[i], devices, *costs));
    }
  }
  // Random placements and named ones apart: [variant][placement].
  std::vector<std::vector<graph::EvaluationResult>> random_sims(variants.size()),
      named_sims(variants.size());
  std::vector<Measured> random_measured, named_measured;
  std::vector<std::string> named_labels;
  for (size_t p = 0; p < n; ++p) {
    const Case& c = cases[p];
    const auto& results = rounds_of[p];
    std::vector<graph::EvaluationResult> sims;
    bool valid = true;
    for (auto& simulator : simulators[c.graph]) {
      sims.push_back(simulator->Evaluate(c.placement));
      valid = valid && sims.back().valid;
    }
    for (const auto& r : results) valid = valid && r.valid;
    if (!valid) {
      fmt::print("  {} {}: invalid, left out\n", c.label, p);
      continue;
    }
    std::vector<double> all, even, odd, copy_seconds;
    for (size_t r = 0; r < results.size(); ++r) {
      all.push_back(results[r].step_seconds);
      (r % 2 == 0 ? even : odd).push_back(results[r].step_seconds);
      copy_seconds.push_back(TransferSeconds(results[r]));
    }
    const Measured m{.all = bench::Median(all),
                     .even = bench::Median(even),
                     .odd = bench::Median(odd.empty() ? even : odd),
                     .copy_seconds = bench::Median(copy_seconds),
                     .fastest = *std::min_element(all.begin(), all.end()),
                     .slowest = *std::max_element(all.begin(), all.end())};
    if (detail != nullptr) {
      const graph::EvaluationResult& first = results.front();
      fmt::print(detail,
                 "\"{}\",\"{}\",{},{:.6f},{:.6f},{:.6f},{:.6f},{:.6f},{:.6f},{:.6f},{},{}\n", name,
                 c.label, p, sims[0].step_seconds, sims[1].step_seconds, m.all,
                 BusyOn(sims[0], names[0]), BusyOn(sims[0], names[1]), BusyOn(first, names[0]),
                 BusyOn(first, names[1]), TransferredBytes(sims[0]), TransferredBytes(first));
    }
    const bool random = c.label == "random";
    (random ? random_measured : named_measured).push_back(m);
    if (!random) named_labels.push_back(c.label);
    for (size_t v = 0; v < variants.size(); ++v) {
      (random ? random_sims : named_sims)[v].push_back(std::move(sims[v]));
    }
  }
  fmt::print("{}: {} random placements x {} rounds\n", name, random_measured.size(), rounds);
  Report(fmt::format("median of the {} profiles:", rounds), random_sims[0], random_measured);
  Report("the first round's profile:", random_sims[1], random_measured);
  Report("the median, no receive cost:", random_sims[2], random_measured);
  Report("the median, no contention:", random_sims[3], random_measured);
  Report("the roofline model, no profile:", random_sims[4], random_measured);
  fmt::print("{}: named placements\n", name);
  ReportNamed(named_labels, named_sims, variants, named_measured);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const int placements = argc > 1 ? std::stoi(argv[1]) : 30;
  const int rounds = argc > 2 ? std::stoi(argv[2]) : 6;
  std::FILE* detail = argc > 3 && std::string(argv[3]) != "-" ? std::fopen(argv[3], "w") : nullptr;
  const graph::DeviceSet devices = ParseDevices(argc > 4 ? argv[4] : "cpu:0,cpu:1");
  if (detail != nullptr) {
    fmt::print(detail,
               "graph,placement,index,simulated,simulated_first_profile,measured,sim_busy0,"
               "sim_busy1,meas_busy0,meas_busy1,sim_bytes,meas_bytes\n");
  }
  const std::vector<std::string> names = graph::DeviceNames(devices);
  const graph::Graph lenet = graph::BuildLeNet({});
  // The expert's LeNet: the shipped file `placer compare` uses (conv half, fc half).
  const std::vector<std::pair<std::string, graph::Placement>> lenet_experts = {
      {"expert (configs/experts/lenet.yaml)",
       graph::ReadPlacementYaml(PLACER_SOURCE_DIR "/configs/experts/lenet.yaml", lenet, names)}};
  Run("LeNet, batch 256", lenet, graph::LeNetOptions{}.batch_size, bench::LeNetShard,
      graph::LeNetOptions{}.learning_rate, lenet_experts, devices, placements, rounds, detail);
  const graph::ParallelMlpOptions& mlp = bench::kFidelityMlp;
  const graph::Graph mlp_graph = graph::BuildParallelMlp(mlp);
  // Its expert: one tower per device, the merge and the classifier on the first.
  graph::Placement towers = graph::Placement::AllOn(mlp_graph, names, 0);
  for (graph::OpId id : mlp_graph.OpsInPhase(graph::Phase::kForward)) {
    const std::string& op = mlp_graph.op(id).name;
    if (op.starts_with("tower")) {
      towers.device_of_op[static_cast<size_t>(id)] =
          (op[5] - '0') % static_cast<int>(devices.size());
    }
  }
  Run("parallel MLP 2 x 3 x 512, batch 256", mlp_graph, mlp.batch_size, bench::FidelityMlpShard,
      mlp.learning_rate, {{"expert (one tower per device)", towers}}, devices, placements, rounds,
      detail);
  if (detail != nullptr) std::fclose(detail);
  return 0;
}
