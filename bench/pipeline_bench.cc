// A pipeline on this machine's CPU workers: LeNet in two stages (the convolutions on cpu:0, the
// classifier on cpu:1; one thread each), without micro-batches and with M micro-batches under
// GPipe and 1F1B, measured side by side and simulated beside each. R rounds; each profiles the
// devices for every graph (`placer profile`'s code: the micro-batched graph's ops at their own
// size) and then measures every variant once (5 warm-up + 5 timed steps, the evaluator's median)
// in a fresh order. A variant's measured time is its median over rounds (min and max beside); its
// simulated time is the median over rounds of the simulation with that round's profile. Peak
// memory per device: measured (the executor's accounting) and simulated.
//
// Usage: pipeline_bench [rounds=5] [micro_batches=4] [batch=256]
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <random>
#include <string>

#include "bench/timing.h"
#include "graph/micro_batches.h"
#include "graph/models.h"
#include "graph/placement.h"
#include "runtime/measured_evaluator.h"
#include "runtime/profiler.h"
#include "runtime/sim/simulator.h"

namespace {

using namespace placer;

graph::Placement TwoStages(const graph::Graph& plain, const std::vector<std::string>& names) {
  graph::Placement placement = graph::Placement::AllOn(plain, names, 0);
  bool second = false;
  for (graph::OpId id : plain.TopologicalOrder()) {
    if (plain.op(id).phase != graph::Phase::kForward) continue;
    second = second || plain.op(id).name == "fc1";
    placement.device_of_op[static_cast<size_t>(id)] = second ? 1 : 0;
  }
  return placement;
}

struct Variant {
  std::string label;
  const graph::Graph* graph;
  graph::Placement placement;
  std::vector<double> measured, simulated;
  std::vector<int64_t> measured_peak, simulated_peak;
};

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::stoi(argv[1]) : 5;
  const int micro_batches = argc > 2 ? std::stoi(argv[2]) : 4;
  const int64_t batch = argc > 3 ? std::stoll(argv[3]) : 256;
  const graph::DeviceSet devices = {
      {.name = "cpu:0", .type = graph::DeviceType::kCpu, .index = 0, .threads = 1},
      {.name = "cpu:1", .type = graph::DeviceType::kCpu, .index = 1, .threads = 1}};
  const std::vector<std::string> names = {"cpu:0", "cpu:1"};
  auto forward = [](int64_t rows, int64_t normalizer) {
    return graph::BuildLeNet(
        {.batch_size = rows, .loss_normalizer = normalizer, .training_step = false});
  };
  const graph::Graph plain = graph::BuildLeNet({.batch_size = batch});
  const graph::MicroBatchedGraph mb = graph::BuildMicroBatched(forward, batch, micro_batches, 0.2);
  const graph::Placement split = TwoStages(plain, names);
  std::vector<Variant> variants;
  variants.push_back({"two stages, no micro-batches", &plain, split, {}, {}, {}, {}});
  for (graph::PipelineSchedule schedule :
       {graph::PipelineSchedule::kGPipe, graph::PipelineSchedule::kOneFOneB}) {
    variants.push_back(
        {fmt::format("two stages, M = {}, {}", micro_batches, graph::ToString(schedule)),
         &mb.graph,
         graph::PlaceMicroBatches(mb, plain, split, schedule),
         {},
         {},
         {},
         {}});
  }
  variants.push_back(
      {"one device (cpu:0)", &plain, graph::Placement::AllOn(plain, names, 0), {}, {}, {}, {}});
  const std::vector<const graph::Graph*> graphs = {&plain, &mb.graph};
  std::vector<std::unique_ptr<runtime::MeasuredEvaluator>> measurers;
  for (const graph::Graph* g : graphs) {
    measurers.push_back(std::make_unique<runtime::MeasuredEvaluator>(
        *g, devices, runtime::MeasurementOptions{.warmup_steps = 5, .timed_steps = 5}));
  }
  auto measurer_of = [&](const Variant& v) { return v.graph == &plain ? 0 : 1; };
  std::mt19937 rng(42);
  std::vector<size_t> order(variants.size());
  std::iota(order.begin(), order.end(), 0);
  for (int round = 0; round < rounds; ++round) {
    std::vector<std::unique_ptr<sim::ProfiledCostModel>> profiles;
    for (const graph::Graph* g : graphs) {
      profiles.push_back(std::make_unique<sim::ProfiledCostModel>(
          runtime::ProfileDevices(*g, devices, {.model_name = "lenet"})));
    }
    std::shuffle(order.begin(), order.end(), rng);
    for (size_t i : order) {
      Variant& v = variants[i];
      const graph::EvaluationResult r = measurers[measurer_of(v)]->Evaluate(v.placement);
      if (!r.valid) {
        fmt::print("{}: invalid: {}\n", v.label, r.invalid_reason);
        return 1;
      }
      v.measured.push_back(r.step_seconds);
      v.measured_peak.clear();
      for (const auto& d : r.devices) v.measured_peak.push_back(d.peak_memory_bytes);
      sim::Simulator simulator(*v.graph, devices, *profiles[measurer_of(v)]);
      const sim::SimulationResult s = simulator.Simulate(v.placement);
      v.simulated.push_back(s.step_seconds);
      v.simulated_peak = s.peak_memory_bytes;
    }
  }
  fmt::print("LeNet, batch {}, cpu:0 + cpu:1 (1 thread each), {} rounds, interleaved\n", batch,
             rounds);
  fmt::print(
      "| placement | measured ms (median, min-max) | simulated ms (median) | peak MB measured "
      "| peak MB simulated |\n|---|---|---|---|---|\n");
  auto mb_list = [](const std::vector<int64_t>& bytes) {
    std::vector<std::string> out;
    for (int64_t b : bytes) out.push_back(fmt::format("{:.1f}", static_cast<double>(b) / 1e6));
    return fmt::format("{}", fmt::join(out, " / "));
  };
  for (const Variant& v : variants) {
    fmt::print("| {} | {:.1f} ({:.1f}-{:.1f}) | {:.1f} | {} | {} |\n", v.label,
               1e3 * bench::Median(v.measured),
               1e3 * *std::min_element(v.measured.begin(), v.measured.end()),
               1e3 * *std::max_element(v.measured.begin(), v.measured.end()),
               1e3 * bench::Median(v.simulated), mb_list(v.measured_peak),
               mb_list(v.simulated_peak));
  }
  return 0;
}
